"""Histogram calibrators: least-L2-error range (PyTorch's HistogramObserver) and least-KL
threshold (TensorRT's entropy calibration).

Both summarize calibration data as a fixed-size histogram (``bins`` float32 counts: 8 KiB for
2048 bins), so calibrating on any number of batches costs the same memory. When a new batch
falls outside the current range, the old counts are spread into the wider bins (PyTorch's
``_upscale_histogram``: each old bin split into 16 pieces, each piece placed by its midpoint).

HistogramObserver follows ``torch.ao.quantization.HistogramObserver`` step by step; results
agree with PyTorch's to within a few tenths of a percent of the scale (often exactly; the tests
hold them to 0.5 %; ``tinymem bench quantization`` shows up to 0.46 % on 8 large batches), not
bit for bit: torch.histc and torch.linspace round bin edges with SIMD-width-dependent float32
arithmetic, which moves a few values into the neighbouring bin.
"""
import numpy as np

from ... import backend
from .affine import EPS
from .observers import ObserverBase


def histc(x, bins, lo, hi):
    """Counts of ``x`` in ``bins`` equal bins over [lo, hi] (``torch.histc``): values outside are
    dropped, ``hi`` itself goes to the last bin, an empty range is widened by 1 each side."""
    xp = backend.array_module(x)
    lo, hi = float(lo), float(hi)
    if lo == hi:
        lo, hi = lo - 1.0, hi + 1.0
    x = x.reshape(-1)
    x = x[(x >= lo) & (x <= hi)]
    idx = ((x.astype(np.float64) - lo) * (bins / (hi - lo))).astype(np.int64)
    idx = xp.clip(idx, 0, bins - 1)
    return xp.bincount(idx, minlength=bins).astype(np.float32)


def rebin(histogram, orig_min, orig_max, new_min, new_max, upsample_rate=16):
    """Spread counts binned over [orig_min, orig_max] into as many bins over the wider
    [new_min, new_max] (PyTorch's ``_upscale_histogram``)."""
    xp = backend.array_module(histogram)
    orig_min, orig_max, new_min, new_max = (float(v) for v in (orig_min, orig_max, new_min, new_max))
    bins = histogram.size
    fine = xp.repeat(histogram, upsample_rate) / upsample_rate
    fine_width = (orig_max - orig_min) / (bins * upsample_rate)
    mids = xp.linspace(orig_min, orig_max, bins * upsample_rate + 1, dtype=np.float32)[:-1] + 0.5 * fine_width
    bounds = xp.linspace(new_min, new_max, bins + 1, dtype=np.float32)
    slot = xp.clip(xp.searchsorted(bounds, mids, side="right") - 1, 0, bins - 1)
    return xp.bincount(slot, weights=fine, minlength=bins).astype(np.float32)


class _HistogramBase(ObserverBase):
    """Keeps a ``bins``-bin histogram of ``transform(x)`` over its running [min, max]."""

    def __init__(self, bins=2048, dtype="quint8", qscheme="per_tensor_affine", reduce_range=False,
                 quant_min=None, quant_max=None, eps=EPS):
        super().__init__(dtype, qscheme, reduce_range, quant_min, quant_max, eps)
        if bins < 2:
            raise ValueError(f"bins must be at least 2, got {bins}")
        self.bins = bins
        self.histogram = self.hist_min = self.hist_max = None

    def _values(self, x):
        return x

    def _bounds(self, values):
        xp = backend.array_module(values)
        return xp.asarray(values.min()), xp.asarray(values.max())

    def forward(self, x):
        xp = backend.array_module(x)
        x = x[xp.isfinite(x)]
        if x.size == 0:
            return
        lo, hi = xp.asarray(x.min()), xp.asarray(x.max())
        self.min_val = lo if self.min_val is None else xp.minimum(self.min_val, lo)
        self.max_val = hi if self.max_val is None else xp.maximum(self.max_val, hi)
        values = self._values(x)
        vlo, vhi = self._bounds(values)
        if self.histogram is None:
            self.hist_min, self.hist_max = vlo, vhi
            self.histogram = histc(values, self.bins, vlo, vhi)
            return
        new_min, new_max = xp.minimum(self.hist_min, vlo), xp.maximum(self.hist_max, vhi)
        update = histc(values, self.bins, new_min, new_max)
        if bool(new_min == self.hist_min) and bool(new_max == self.hist_max):
            self.histogram = self.histogram + update
            return
        if bool(self.hist_min == self.hist_max):
            old = histc(self.hist_min.reshape(1), self.bins, new_min, new_max) * self.histogram.sum()
        else:
            old = rebin(self.histogram, self.hist_min, self.hist_max, new_min, new_max)
        self.histogram = old + update
        self.hist_min, self.hist_max = new_min, new_max

    def reset_min_max_vals(self):
        super().reset_min_max_vals()
        self.histogram = self.hist_min = self.hist_max = None


class HistogramObserver(_HistogramBase):
    """The [min, max] with the least L2 quantization error over a 2048-bin histogram.

    Starting from the full histogram, the search moves whichever end cuts off less mass by
    1e-5 of the total, computes the L2 error of quantizing the histogram to 2^8 levels over
    the narrowed range (values inside a destination bin are uniform, error ∫x² per bin; values
    outside are clamped to the end bins), and stops when the error starts rising. Time: a few
    thousand O(bins) evaluations at most; memory: ``bins`` counts.
    """

    def __init__(self, bins=2048, dtype="quint8", qscheme="per_tensor_affine", reduce_range=False,
                 quant_min=None, quant_max=None, eps=EPS):
        super().__init__(bins, dtype, qscheme, reduce_range, quant_min, quant_max, eps)
        self.dst_nbins = 2 ** 8
        self.upsample_rate = 16

    def _quantization_error(self, hist, start_bin, end_bin):
        f32 = np.float32
        bin_width = (float(self.hist_max) - float(self.hist_min)) / self.bins
        dst_width = bin_width * (end_bin - start_bin + 1) / self.dst_nbins
        if dst_width == 0.0:
            return 0.0
        src_begin = (np.arange(self.bins) - start_bin).astype(f32) * f32(bin_width)
        src_end = src_begin + f32(bin_width)
        dst_of_begin = np.clip(np.floor(src_begin / f32(dst_width)), 0, self.dst_nbins - 1)
        dst_of_end = np.clip(np.floor(src_end / f32(dst_width)), 0, self.dst_nbins - 1)
        density = hist / f32(bin_width)
        half = f32(dst_width / 2)

        def cube_integral(begin, end):
            return density * (end * end * end - begin * begin * begin) / f32(3)

        dst_of_begin_center = (dst_of_begin + f32(0.5)) * f32(dst_width)
        dst_of_end_center = dst_of_end * f32(dst_width) + half
        norm = cube_integral(src_begin - dst_of_begin_center, half)
        norm = norm + (dst_of_end - dst_of_begin - 1) * cube_integral(-half, half)
        norm = norm + cube_integral(-half, src_end - dst_of_end_center)
        return float(norm.sum())

    def search_range(self):
        """PyTorch's ``_non_linear_param_search``: the (min, max) with the least L2 error."""
        # 2048 counts: the thousands of small steps below run on the host even for CuPy data.
        hist = backend.to_numpy(self.histogram)
        total = float(hist.sum())
        csum = np.cumsum(hist)
        step, alpha, beta = 1e-5, 0.0, 1.0
        start_bin, end_bin = 0, self.bins - 1
        norm_min = float("inf")
        while alpha < beta:
            next_alpha, next_beta = alpha + step, beta - step
            # First bin whose cumulative count reaches next_alpha of the total, and the last
            # bin whose cumulative count stays within next_beta (cumsum is sorted).
            left = int(np.searchsorted(csum, np.float32(next_alpha * total), side="left"))
            right = int(np.searchsorted(csum, np.float32(next_beta * total), side="right")) - 1
            left = min(max(left, start_bin), end_bin)
            right = min(max(right, start_bin), end_bin)
            next_start, next_end = start_bin, end_bin
            if left - start_bin > end_bin - right:
                next_start, alpha = left, next_alpha
            else:
                next_end, beta = right, next_beta
            if next_start == start_bin and next_end == end_bin:
                continue
            norm = self._quantization_error(hist, next_start, next_end)
            if norm > norm_min:
                break
            norm_min, start_bin, end_bin = norm, next_start, next_end
        width = (self.hist_max - self.hist_min) / np.float32(self.bins)
        return self.hist_min + width * start_bin, self.hist_min + width * (end_bin + 1)

    def observed_range(self):
        return self.search_range()


class EntropyObserver(_HistogramBase):
    """TensorRT's entropy calibration: the |x| threshold with the least KL divergence.

    A ``bins``-bin (2048) histogram of |x| over [0, max|x|]. For every candidate threshold i
    (from ``levels`` to ``bins`` bins), P is the histogram cut at i with the cut-off mass added
    to its last bin, Q is the same bins merged into ``levels`` (128, the magnitudes of int8)
    buckets and spread back evenly over P's non-empty bins; both get empty bins smoothed to
    1e-4 counts, and the threshold minimizing KL(P || Q) wins (the last one on ties), as in
    TensorRT's calibrator (MXNet's ``_get_optimal_threshold``). The smallest threshold is
    ``levels`` bins, 1/16 of max|x| with the defaults: a huge outlier costs resolution. The range is
    then [-T, T] intersected with the observed [min, max] (so post-ReLU data gets [0, T]).
    Time: ``bins - levels`` KL evaluations of O(bins) each.
    """

    def __init__(self, bins=2048, levels=128, dtype="quint8", qscheme="per_tensor_affine",
                 reduce_range=False, quant_min=None, quant_max=None, eps=EPS):
        super().__init__(bins, dtype, qscheme, reduce_range, quant_min, quant_max, eps)
        if not 2 <= levels <= bins:
            raise ValueError(f"levels must be in [2, bins={bins}], got {levels}")
        self.levels = levels

    def _values(self, x):
        return abs(x)

    def _bounds(self, values):
        # |x| histograms always start at 0: bin i then covers magnitudes [i·w, (i+1)·w).
        xp = backend.array_module(values)
        hi = xp.asarray(values.max())
        return xp.zeros_like(hi), hi

    def threshold(self):
        """The clipping threshold T chosen by the KL search."""
        hist = backend.to_numpy(self.histogram).astype(np.float64)
        hist[0] = hist[1]  # the zero spike (ReLU) would dominate the KL; TensorRT flattens it
        edges = np.linspace(0.0, float(self.hist_max), self.bins + 1)
        best, best_i = np.inf, self.bins
        for i in range(self.levels, self.bins + 1):
            p = hist[:i].copy()
            p[-1] += hist[i:].sum()
            nonzero = p != 0
            bucket = np.minimum((np.arange(i) * self.levels) // i, self.levels - 1)
            mass = np.bincount(bucket, weights=hist[:i], minlength=self.levels)
            count = np.bincount(bucket[nonzero], minlength=self.levels)
            q = np.where(nonzero, mass[bucket] / np.maximum(count[bucket], 1), 0.0)
            kl = _kl(_smooth(p), _smooth(q))
            if kl <= best:
                best, best_i = kl, i
        return edges[best_i]

    def observed_range(self):
        t = np.float32(self.threshold())
        xp = backend.array_module(self.min_val)
        return xp.maximum(self.min_val, -t), xp.minimum(self.max_val, t)


def _smooth(counts, eps=1e-4):
    """Give empty bins ``eps`` of mass, taken evenly from the others (MXNet's and TensorRT's
    ``_smooth_distribution``), so a Q that misses a bin of P costs a finite, large KL."""
    zero = counts == 0
    n_zero, n_nonzero = int(zero.sum()), int((~zero).sum())
    if n_nonzero == 0 or eps * n_zero / n_nonzero >= counts[~zero].min():
        return None
    return counts + eps * zero - (eps * n_zero / n_nonzero) * ~zero


def _kl(p, q):
    """KL(P || Q) of two unnormalized histograms (infinite where Q misses mass P has)."""
    if p is None or q is None or p.sum() == 0 or q.sum() == 0:
        return np.inf
    p, q = p / p.sum(), q / q.sum()
    support = p > 0
    if np.any(q[support] == 0):
        return np.inf
    return float(np.sum(p[support] * np.log(p[support] / q[support])))
