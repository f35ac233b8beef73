"""Observers: watch tensors during calibration, then choose a scale and zero_point.

Every observer is called on tensors (``obs(x)`` records and returns ``x``) and answers
``calculate_qparams() -> (scale, zero_point)`` (float32 and int64 arrays of one element per
tensor or per channel), with the constructor arguments and the results of
``torch.ao.quantization.observer`` where PyTorch has the observer:

- :class:`MinMaxObserver`: the running min and max. One outlier stretches the range and
  wastes the 256 levels on empty space.
- :class:`MovingAverageMinMaxObserver`: min and max averaged over batches with
  ``averaging_constant`` (0.01): x_min <- x_min + c·(min(X) - x_min).
- :class:`PerChannelMinMaxObserver`: min and max per slice along ``ch_axis`` (0: output
  channels of a weight).
- :class:`PercentileObserver` (not in PyTorch): the ``percentile`` (99.99) of each batch, averaged
  over batches; ignores the rarest values instead of stretching for them.
- :class:`HistogramObserver`: a 2048-bin histogram; picks the [min, max] whose quantization
  has the least L2 error (PyTorch's search, from caffe2's norm minimization). See
  ``histogram.py``.
- :class:`EntropyObserver` (TensorRT): the clipping threshold whose 128-level quantized
  |x| histogram has the least KL divergence from the original. See ``histogram.py``.

Non-finite values (NaN, inf) are ignored with a warning: the range comes from the finite ones.

Memory: min/max observers keep two float32 numbers per tensor (or per channel); the histogram
observers keep ``bins`` float32 counts (8 KiB for 2048). They never keep the tensors.
"""
import warnings

import numpy as np

from ... import backend
from ...autograd import Tensor
from ...checks import axis_index
from .affine import EPS, check_qscheme, qparams_from_minmax, qrange, storage_dtype


def _array(x):
    return x.data if isinstance(x, Tensor) else x


class ObserverBase:
    """Shared constructor and ``calculate_qparams`` of PyTorch's ``UniformQuantizationObserverBase``."""

    per_channel = False

    def __init__(self, dtype="quint8", qscheme="per_tensor_affine", reduce_range=False,
                 quant_min=None, quant_max=None, eps=EPS):
        check_qscheme(qscheme)
        if qscheme.startswith("per_channel") != self.per_channel:
            kind = "per-channel" if self.per_channel else "per-tensor"
            raise ValueError(f"{type(self).__name__} is {kind}; qscheme {qscheme!r} does not fit "
                             f"(use {'PerChannelMinMaxObserver' if not self.per_channel else 'a per-tensor observer'})")
        if qscheme.endswith("symmetric") and reduce_range and storage_dtype(dtype) == np.uint8:
            raise ValueError("reduce_range with symmetric quantization to uint8 is not supported "
                             "(as in PyTorch); use dtype='qint8' or reduce_range=False")
        self.dtype, self.qscheme, self.reduce_range, self.eps = dtype, qscheme, reduce_range, eps
        self.customized_qrange = quant_min is not None and quant_max is not None
        self.quant_min, self.quant_max = qrange(dtype, reduce_range, quant_min, quant_max)
        self.min_val = self.max_val = None

    def __call__(self, x):
        data = _array(x)
        if data.size:
            data = data.astype(np.float32, copy=False)
            finite = backend.array_module(data).isfinite(data)
            if not bool(finite.all()):
                # A NaN or inf would become the range, the scale NaN/inf, and every code 0.
                bad = data.size - int(finite.sum())
                warnings.warn(f"{type(self).__name__}: ignored {bad} non-finite value(s) (NaN or inf) "
                              f"of {data.size}; the range comes from the finite ones", RuntimeWarning,
                              stacklevel=2)
                if not self.per_channel:
                    data = data[finite]  # per-channel observers mask them per slice instead
            if data.size:
                self.forward(data)
        return x

    def forward(self, x):
        raise NotImplementedError(f"{type(self).__name__} must define forward")

    def _qparams(self, min_val, max_val):
        # The range is of finite values (__call__ drops the rest) and ordered: not read on the host.
        return qparams_from_minmax(min_val, max_val, self.qscheme, self.dtype, self.quant_min,
                                   self.quant_max, self.customized_qrange, self.eps, check=False)

    def _default_qparams(self):
        warnings.warn(f"{type(self).__name__}: calculate_qparams before any data was observed; "
                      "returning scale 1.0 and zero_point 0 (as PyTorch does)", stacklevel=3)
        return np.ones(1, np.float32), np.zeros(1, np.int64)

    def observed_range(self):
        """The [min, max] that ``calculate_qparams`` turns into a scale (before widening to 0)."""
        return self.min_val, self.max_val

    def calculate_qparams(self):
        """``(scale, zero_point)`` for the data seen so far."""
        if self.min_val is None:
            return self._default_qparams()
        lo, hi = self.observed_range()
        return self._qparams(lo, hi)

    def reset_min_max_vals(self):
        self.min_val = self.max_val = None

    def __repr__(self):
        return f"{type(self).__name__}(min_val={self.min_val}, max_val={self.max_val})"


class MinMaxObserver(ObserverBase):
    """Running minimum and maximum of every tensor seen (PyTorch's ``MinMaxObserver``)."""

    def forward(self, x):
        xp = backend.array_module(x)
        lo, hi = x.min(), x.max()
        if self.min_val is None:
            self.min_val, self.max_val = xp.asarray(lo), xp.asarray(hi)
        else:
            self.min_val, self.max_val = xp.minimum(self.min_val, lo), xp.maximum(self.max_val, hi)


class MovingAverageMinMaxObserver(MinMaxObserver):
    """Exponential moving average of per-batch min and max, weight ``averaging_constant``."""

    def __init__(self, averaging_constant=0.01, dtype="quint8", qscheme="per_tensor_affine",
                 reduce_range=False, quant_min=None, quant_max=None, eps=EPS):
        super().__init__(dtype, qscheme, reduce_range, quant_min, quant_max, eps)
        if not 0 < averaging_constant <= 1:
            raise ValueError(f"averaging_constant must be in (0, 1], got {averaging_constant}")
        self.averaging_constant = averaging_constant

    def forward(self, x):
        xp = backend.array_module(x)
        lo, hi = xp.asarray(x.min()), xp.asarray(x.max())
        if self.min_val is None:
            self.min_val, self.max_val = lo, hi
        else:
            c = self.averaging_constant
            self.min_val = self.min_val + c * (lo - self.min_val)
            self.max_val = self.max_val + c * (hi - self.max_val)


class PerChannelMinMaxObserver(ObserverBase):
    """Running min and max of each slice along ``ch_axis`` (PyTorch's ``PerChannelMinMaxObserver``)."""

    per_channel = True

    def __init__(self, ch_axis=0, dtype="quint8", qscheme="per_channel_affine", reduce_range=False,
                 quant_min=None, quant_max=None, eps=EPS):
        super().__init__(dtype, qscheme, reduce_range, quant_min, quant_max, eps)
        self.ch_axis = ch_axis

    def forward(self, x):
        xp = backend.array_module(x)
        axis = axis_index("PerChannelMinMaxObserver(ch_axis)", self.ch_axis, x.ndim)
        rows = xp.moveaxis(x, axis, 0).reshape(x.shape[axis], -1)
        finite = xp.isfinite(rows)
        lo = xp.where(finite, rows, np.float32(np.inf)).min(axis=1)
        hi = xp.where(finite, rows, np.float32(-np.inf)).max(axis=1)
        empty = ~finite.any(axis=1)  # a slice with no finite value: range [0, 0]
        lo, hi = xp.where(empty, np.float32(0), lo), xp.where(empty, np.float32(0), hi)
        if self.min_val is None:
            self.min_val, self.max_val = lo, hi
        else:
            if lo.shape != self.min_val.shape:
                raise ValueError(f"PerChannelMinMaxObserver saw {self.min_val.size} channels before "
                                 f"and now {lo.size} along axis {self.ch_axis}")
            self.min_val, self.max_val = xp.minimum(self.min_val, lo), xp.maximum(self.max_val, hi)


class PercentileObserver(ObserverBase):
    """The ``percentile``-th and (100 - ``percentile``)-th percentile of each batch, averaged.

    Per-batch percentiles keep the observer's memory constant (no stored tensors); the cost is
    that a batch must hold more than 100/(100 - percentile) values (10,000 for 99.99) for the
    percentile to exclude at least one of them.
    """

    def __init__(self, percentile=99.99, dtype="quint8", qscheme="per_tensor_affine",
                 reduce_range=False, quant_min=None, quant_max=None, eps=EPS):
        super().__init__(dtype, qscheme, reduce_range, quant_min, quant_max, eps)
        if not 50 < percentile <= 100:
            raise ValueError(f"percentile must be in (50, 100], got {percentile}")
        self.percentile, self.batches = percentile, 0

    def forward(self, x):
        xp = backend.array_module(x)
        flat = x.reshape(-1).astype(np.float64)
        lo = xp.percentile(flat, 100.0 - self.percentile)
        hi = xp.percentile(flat, self.percentile)
        n = self.batches
        if n == 0:
            self.min_val, self.max_val = lo, hi
        else:
            self.min_val = self.min_val + (lo - self.min_val) / (n + 1)
            self.max_val = self.max_val + (hi - self.max_val) / (n + 1)
        self.batches = n + 1

    def reset_min_max_vals(self):
        super().reset_min_max_vals()
        self.batches = 0
