"""INT8 quantization: the affine map, calibration observers, quantized layers, compressed activations.

- ``affine.py``: quantize / dequantize / fake_quantize, qparams from a range (PyTorch's formulas).
- ``observers.py``: MinMax, MovingAverageMinMax, PerChannelMinMax, Percentile observers.
- ``histogram.py``: HistogramObserver (least L2 error) and EntropyObserver (TensorRT's KL).
- ``modules.py``: exact integer matmul, QuantizedLinear, post-training quantization
  (prepare / calibrate / convert) and quantization-aware training layers.
- ``compressed.py``: ``compress_saved_activations(bits)``, int8/4/2-bit saved tensors for training.
"""
from .affine import (QSCHEMES, FakeQuantize, dequantize, fake_quantize, qparams_from_minmax, qrange,
                     quantize, storage_dtype)
from .compressed import CompressedTensor, compress, compress_saved_activations, decompress
from .histogram import EntropyObserver, HistogramObserver
from .modules import (FakeQuantLinear, ObservedLinear, QuantizedLinear, calibrate, convert, convert_qat,
                      int_matmul, prepare, prepare_qat, quantize_model)
from .observers import (MinMaxObserver, MovingAverageMinMaxObserver, ObserverBase, PercentileObserver,
                        PerChannelMinMaxObserver)

__all__ = ["QSCHEMES", "FakeQuantize", "dequantize", "fake_quantize", "qparams_from_minmax", "qrange",
           "quantize", "storage_dtype", "EntropyObserver", "HistogramObserver", "MinMaxObserver",
           "MovingAverageMinMaxObserver", "ObserverBase", "PercentileObserver", "PerChannelMinMaxObserver",
           "CompressedTensor", "compress", "compress_saved_activations", "decompress",
           "FakeQuantLinear", "ObservedLinear", "QuantizedLinear", "calibrate", "convert", "convert_qat",
           "int_matmul", "prepare", "prepare_qat", "quantize_model"]
