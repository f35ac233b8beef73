"""LoRA and QLoRA: fine-tune a frozen model through small trainable adapters.

    adapter.py       LoRALinear, apply_lora, merge / unmerge: frozen weight plus rank-r A and B
    nf4.py           the NF4 levels; 4-bit block quantization, two codes per byte
    double_quant.py  the NF4 block scales quantized to 8 bits (blocks of 256, mean subtracted)
    qlinear.py       NF4Linear: QLoRA's frozen base, dequantized for each matmul only
    paging.py        paged(optimizer): state moves to the host when a budget would be exceeded
"""
from .adapter import LoRALinear, apply_lora, lora_modules, trainable_parameters
from .double_quant import dequantize_absmax, quantize_absmax
from .nf4 import LEVELS, dequantize_nf4, nf4_levels, quantize_nf4
from .paging import PagedOptimizer, paged
from .qlinear import NF4Linear, NF4Matmul, apply_qlora, expected_bits_per_weight

__all__ = ["LoRALinear", "apply_lora", "lora_modules", "trainable_parameters", "LEVELS", "nf4_levels",
           "quantize_nf4", "dequantize_nf4", "quantize_absmax", "dequantize_absmax", "NF4Linear",
           "NF4Matmul", "expected_bits_per_weight", "apply_qlora", "PagedOptimizer", "paged"]

