"""Edge deployment: int8 models exported to ONNX, and inference under a microcontroller's memory.

    onnx_export.py  to_onnx(model): float32 or QDQ int8 graphs built with onnx.helper
    runtime.py      ONNX Runtime sessions; tinymem's int8 codes to compare with the runtime's
    chain.py        a CNN as a chain of inference layers (BatchNorm folded, direct convolution)
    peak.py         inference_peak(model, input_shape): layer by layer, peak from the ledger
    patch.py        patch_inference: the first layers tile by tile (MCUNetV2), bit-exact

``onnx_export.py`` and ``runtime.py`` need ``onnx`` and ``onnxruntime`` (``pip install -e
".[apps]"``); importing ``tinymem.edge`` does not import them.
"""
from .chain import ConvLayer, PoolLayer, chain, run_chain, unet_encoder
from .patch import patch_inference, whole_and_patch_equal
from .peak import inference_peak

__all__ = ["ConvLayer", "PoolLayer", "chain", "run_chain", "unet_encoder", "patch_inference",
           "whole_and_patch_equal", "inference_peak"]
