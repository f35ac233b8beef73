"""Observers against torch.ao.quantization.observer on random data.

MinMax, MovingAverageMinMax and PerChannelMinMax must give PyTorch's scale and zero_point
exactly (same float32 formulas). HistogramObserver follows PyTorch's algorithm but bins with its
own histc and linspace, so it is held to 0.5 % on the scale and 1 on the zero point. Percentile and Entropy
have no PyTorch counterpart and are checked against their definitions.
"""
import warnings

import numpy as np
import pytest
from conftest import requires_torch

from tinymem.techniques import quantization as Q

CASES = [(dt, qs, rr) for dt in ("quint8", "qint8") for qs in ("per_tensor_affine", "per_tensor_symmetric")
         for rr in (False, True) if not (rr and dt == "quint8" and qs == "per_tensor_symmetric")]


def _batches(seed, n=4, shape=(32, 48), positive=False):
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        x = (rng.laplace(size=shape) * (1 + 0.5 * i) + 0.2 * i).astype(np.float32)
        out.append(np.maximum(x, 0) if positive else x)
    return out


def _torch_pair(ours_cls, torch_name, dt, qs, rr, **kw):
    import torch
    from torch.ao.quantization import observer as O
    tdt = {"quint8": torch.quint8, "qint8": torch.qint8}[dt]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # PyTorch warns that reduce_range will be deprecated
        theirs = getattr(O, torch_name)(dtype=tdt, qscheme=getattr(torch, qs), reduce_range=rr, **kw)
    return ours_cls(dtype=dt, qscheme=qs, reduce_range=rr, **kw), theirs


def _observe(ours, theirs, batches):
    import torch
    for x in batches:
        ours(x)
        theirs(torch.from_numpy(x))
    s, z = ours.calculate_qparams()
    ts, tz = theirs.calculate_qparams()
    return s, z, ts.numpy(), tz.numpy()


@requires_torch
@pytest.mark.parametrize("positive", [False, True], ids=["signed", "relu"])
@pytest.mark.parametrize("dt,qs,rr", CASES)
@pytest.mark.parametrize("name", ["MinMaxObserver", "MovingAverageMinMaxObserver"])
def test_per_tensor_observers_equal_pytorch(name, dt, qs, rr, positive):
    ours, theirs = _torch_pair(getattr(Q, name), name, dt, qs, rr)
    s, z, ts, tz = _observe(ours, theirs, _batches(1, positive=positive))
    assert s.dtype == np.float32 and z.dtype == np.int64
    np.testing.assert_array_equal(s, ts)
    np.testing.assert_array_equal(z, tz)


@requires_torch
@pytest.mark.parametrize("ch_axis", [0, 1])
@pytest.mark.parametrize("dt,qs,rr", [(dt, qs.replace("tensor", "channel"), rr) for dt, qs, rr in CASES])
def test_per_channel_observer_equals_pytorch(dt, qs, rr, ch_axis):
    ours, theirs = _torch_pair(Q.PerChannelMinMaxObserver, "PerChannelMinMaxObserver", dt, qs, rr, ch_axis=ch_axis)
    s, z, ts, tz = _observe(ours, theirs, _batches(2, shape=(6, 5, 7)))
    assert s.shape == (ours.min_val.size,)
    np.testing.assert_array_equal(s, ts)
    np.testing.assert_array_equal(z, tz)


@requires_torch
@pytest.mark.parametrize("dt,qs,rr", CASES)
def test_custom_quant_range_equals_pytorch(dt, qs, rr):
    lo, hi = (-8, 7) if dt == "qint8" else (0, 15)
    ours, theirs = _torch_pair(Q.MinMaxObserver, "MinMaxObserver", dt, qs, rr, quant_min=lo, quant_max=hi)
    s, z, ts, tz = _observe(ours, theirs, _batches(3))
    np.testing.assert_array_equal(s, ts)
    np.testing.assert_array_equal(z, tz)


@requires_torch
@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("dt,qs,rr", CASES[::2])
def test_histogram_observer_close_to_pytorch(dt, qs, rr, seed):
    ours, theirs = _torch_pair(Q.HistogramObserver, "HistogramObserver", dt, qs, rr)
    batches = _batches(10 + seed, n=3, shape=(64, 32), positive=seed == 1)
    batches[1][0, 0] = 25.0  # an outlier that the L2 search should clip
    s, z, ts, tz = _observe(ours, theirs, batches)
    np.testing.assert_allclose(s, ts, rtol=5e-3)
    assert np.abs(z - tz).max() <= 1


def _mse(x, obs):
    s, z = obs.calculate_qparams()
    q = Q.quantize(x, s, z, obs.dtype)
    return float(np.mean((Q.dequantize(q, s, z) - x) ** 2))


def test_histogram_observer_lowers_the_l2_error_of_heavy_tails():
    # Laplace data: clipping the rarest values pays for itself in rounding error. PyTorch's
    # greedy search stops at the first rise of the error, so the gain is modest (about 6 %).
    x = np.random.default_rng(0).laplace(size=50000).astype(np.float32)
    hist, mm = Q.HistogramObserver(), Q.MinMaxObserver()
    hist(x), mm(x)
    assert hist.calculate_qparams()[0][0] < mm.calculate_qparams()[0][0]
    assert _mse(x, hist) < 0.97 * _mse(x, mm)


def test_percentile_observer_is_the_mean_of_batch_percentiles():
    batches = _batches(4)
    obs = Q.PercentileObserver(percentile=99.0)
    for x in batches:
        obs(x)
    lo = np.mean([np.percentile(x, 1.0) for x in batches])
    hi = np.mean([np.percentile(x, 99.0) for x in batches])
    np.testing.assert_allclose([obs.min_val, obs.max_val], [lo, hi], rtol=1e-6)
    expected = Q.qparams_from_minmax(lo, hi, "per_tensor_affine", "quint8", 0, 255)
    np.testing.assert_allclose(obs.calculate_qparams()[0], expected[0], rtol=1e-6)


def test_entropy_observer_clips_heavy_tail_and_keeps_uniform_range():
    rng = np.random.default_rng(0)
    heavy = rng.laplace(size=50000).astype(np.float32)
    obs = Q.EntropyObserver()
    obs(heavy)
    t = obs.threshold()
    assert 0 < t < 0.8 * np.abs(heavy).max()
    # A uniform distribution has nothing to clip: the threshold stays near the max.
    flat = rng.uniform(-1, 1, 50000).astype(np.float32)
    obs = Q.EntropyObserver()
    obs(flat)
    assert obs.threshold() > 0.95


def test_entropy_observer_clips_an_extreme_outlier():
    # Without TensorRT's smoothing, any threshold below the outlier would leave Q empty where P
    # holds the clipped outlier (infinite KL) and the search would fall back to max|x|.
    x = np.random.default_rng(2).standard_normal(20000).astype(np.float32)
    x[0] = 1000.0
    obs = Q.EntropyObserver()
    obs(x)
    assert obs.threshold() < 0.1 * 1000.0


def test_entropy_observer_post_relu_range_starts_at_zero():
    x = np.maximum(np.random.default_rng(1).standard_normal(10000), 0).astype(np.float32)
    obs = Q.EntropyObserver()
    obs(x[:5000]), obs(x[5000:] * 2)  # a wider second batch re-bins the first
    lo, hi = obs.observed_range()
    assert lo == 0 and 0 < hi <= x.max() * 2
    assert obs.histogram.sum() == pytest.approx(10000, rel=1e-5)


def test_observer_errors_and_defaults():
    with pytest.raises(ValueError, match="qscheme"):
        Q.MinMaxObserver(qscheme="per_channel_affine")
    with pytest.raises(ValueError, match="reduce_range"):
        Q.MinMaxObserver(qscheme="per_tensor_symmetric", reduce_range=True)
    with pytest.raises(ValueError, match="quantized dtype"):
        Q.MinMaxObserver(dtype="int16")
    with pytest.warns(UserWarning, match="before any data"):
        s, z = Q.MinMaxObserver().calculate_qparams()
    assert s[0] == 1.0 and z[0] == 0
