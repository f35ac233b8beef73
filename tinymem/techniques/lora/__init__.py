"""LoRA and QLoRA: fine-tune a frozen model through small trainable adapters.

    adapter.py  LoRALinear, apply_lora, merge / unmerge: frozen weight plus rank-r A and B
"""
from .adapter import LoRALinear, apply_lora, lora_modules, trainable_parameters

__all__ = ["LoRALinear", "apply_lora", "lora_modules", "trainable_parameters"]
