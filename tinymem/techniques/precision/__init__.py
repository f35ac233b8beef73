"""Mixed precision: half-precision storage, fp32 master weights and loss scaling.

    bfloat16.py     the bfloat16 bit codec: float32 <-> bfloat16 bits by rounding to nearest even
    float16.py      the float16 bit codec: float32 <-> float16 by bit arithmetic, and one-pass rounding
    formats.py      HalfFormat: how float16 and bfloat16 are stored, encoded and decoded
    half.py         half(model, optimizer, dtype): HalfModule, Upcast, RoundGrad
    masters.py      MasterOptimizer: the fp32 masters that the optimizer updates
    grad_scaler.py  GradScaler: static and dynamic loss scaling, PyTorch's contract
"""
from .bfloat16 import bfloat16_bits_to_float32, float32_to_bfloat16_bits, round_to_bfloat16
from .float16 import float16_to_float32, float32_to_float16, round_to_float16
from .formats import FORMATS, HalfFormat, get_format
from .grad_scaler import GradScaler
from .half import (FP16_MAX, FP16_MIN_NORMAL, FP16_MIN_SUBNORMAL, HalfModule, RoundGrad, Upcast,
                   accumulate_half_grad, fp16_range_report, half)
from .masters import MasterOptimizer

__all__ = ["half", "HalfModule", "Upcast", "RoundGrad", "accumulate_half_grad", "fp16_range_report",
           "FP16_MIN_SUBNORMAL", "FP16_MIN_NORMAL", "FP16_MAX", "GradScaler", "MasterOptimizer", "HalfFormat", "FORMATS", "get_format",
           "float32_to_bfloat16_bits", "bfloat16_bits_to_float32", "round_to_bfloat16",
           "float32_to_float16", "float16_to_float32", "round_to_float16"]
