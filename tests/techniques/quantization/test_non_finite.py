"""NaN and inf in calibration data or in a compressed activation: observers keep a finite scale
(ignoring them, with a warning), and compression keeps them exactly instead of wrecking their
group."""
import contextlib

import numpy as np
import pytest

import tinymem as tm
import tinymem.functional as F
from tinymem.techniques import quantization as Q

OBSERVERS = {
    "MinMax": lambda: Q.MinMaxObserver(),
    "MovingAverage": lambda: Q.MovingAverageMinMaxObserver(averaging_constant=0.5),
    "Percentile": lambda: Q.PercentileObserver(percentile=99.0),
    "PerChannel": lambda: Q.PerChannelMinMaxObserver(ch_axis=0),
    "Histogram": lambda: Q.HistogramObserver(bins=64),
}


def _batches():
    rng = np.random.default_rng(0)
    return [rng.standard_normal((4, 256)).astype(np.float32) * (1 + i) for i in range(3)]


def _poisoned(batches):
    out = []
    for i, x in enumerate(batches):
        x = x.copy()
        x[1, 3] = [np.nan, np.inf, -np.inf][i]
        x[2, 7] = np.inf
        out.append(x)
    return out


def _without_the_poison(batches):
    """The finite values only, shaped as the observer expects them (per-channel rows kept)."""
    out = []
    for x in _poisoned(batches):
        x = x.copy()
        for r in range(x.shape[0]):
            row = x[r]
            row[~np.isfinite(row)] = row[np.isfinite(row)][0]  # a value the row already has
        out.append(x)
    return out


@pytest.mark.parametrize("name", list(OBSERVERS))
def test_observers_ignore_nan_and_inf_with_a_warning(name):
    batches = _batches()
    poisoned, clean = OBSERVERS[name](), OBSERVERS[name]()
    with pytest.warns(RuntimeWarning, match="non-finite"):
        for x in _poisoned(batches):
            poisoned(x)
    scale, zero_point = poisoned.calculate_qparams()
    assert np.isfinite(scale).all() and (scale > 0).all()
    if name != "Percentile":  # percentiles move when values are dropped rather than repeated
        for x in _without_the_poison(batches):
            clean(x)
        expected = clean.calculate_qparams()
        np.testing.assert_array_equal(scale, expected[0])
        np.testing.assert_array_equal(zero_point, expected[1])
    axis = 0 if name == "PerChannel" else None
    x = batches[-1]
    q = Q.quantize(x, scale, zero_point, axis=axis)
    assert len(np.unique(q)) > 10, "quantized to (nearly) one code"


def test_a_channel_with_only_non_finite_values_gets_a_finite_scale():
    obs = Q.PerChannelMinMaxObserver(ch_axis=0)
    x = np.ones((2, 5), np.float32)
    x[1] = np.nan
    with pytest.warns(RuntimeWarning):
        obs(x)
    scale, _ = obs.calculate_qparams()
    assert np.isfinite(scale).all()


def test_a_non_finite_range_is_refused_by_the_formula():
    with pytest.raises(ValueError, match="finite"):
        Q.qparams_from_minmax(np.float32(np.nan), np.float32(1.0))
    with pytest.raises(ValueError, match="finite"):
        Q.qparams_from_minmax(np.float32(0.0), np.float32(np.inf))


@pytest.mark.parametrize("bits", [8, 4, 2])
@pytest.mark.parametrize("keep_sign", [True, False])
def test_compression_keeps_nan_and_inf_exactly_and_its_group_usable(bits, keep_sign):
    x = np.array([1, np.inf, 2, 3, 4, np.nan, -np.inf, 5], np.float32)
    c = Q.compress(x, bits=bits, group_size=8, keep_sign=keep_sign)
    back = Q.decompress(c)
    special = ~np.isfinite(x)
    np.testing.assert_array_equal(back[special], x[special])  # NaN == NaN for assert_array_equal
    step = (5 - 1) / (2 ** bits - 1 - (1 if keep_sign else 0))
    assert np.abs(back[~special] - x[~special]).max() <= step / 2 + 1e-6, back
    assert c.nbytes == Q.compress(np.arange(8, dtype=np.float32), bits, 8, keep_sign=keep_sign).nbytes + 3 * 12


def test_a_saved_inf_reaches_the_gradients_as_it_does_without_compression():
    w = tm.tensor(np.ones((4, 3), np.float32), requires_grad=True)
    x = np.random.default_rng(0).standard_normal((8, 4)).astype(np.float32)
    x[2, 1] = np.inf

    def grads(ctx):
        w.grad = None
        with ctx:
            F.relu(tm.tensor(x) @ w).sum().backward()
        return w.grad.numpy()

    plain = grads(contextlib.nullcontext())
    packed = grads(Q.compress_saved_activations(bits=8))
    np.testing.assert_array_equal(np.isfinite(packed), np.isfinite(plain))
    assert not np.isfinite(packed).all()



def test_a_range_set_by_hand_on_the_host_is_still_checked():
    """Observers skip the range check on a device (a host sync); on the host it is free, and a
    ``min_val`` set by hand (NaN, or above ``max_val``) must still be refused, not give a NaN
    scale or a range that leaves out the data."""
    obs = Q.MinMaxObserver()
    obs(np.array([-1.0, 2.0], np.float32))
    obs.min_val = np.float32(np.nan)
    with pytest.raises(ValueError, match="finite"):
        obs.calculate_qparams()
    obs.min_val, obs.max_val = np.float32(3.0), np.float32(1.0)
    with pytest.raises(ValueError, match="larger"):
        obs.calculate_qparams()


def test_fake_quant_linear_on_the_host_refuses_an_overflowing_range():
    """Finite activations near the float32 limit give an inf scale ((max - min) / 255 overflows):
    on the host FakeQuantLinear refuses it (the check is free there) instead of quantizing every
    activation to 0 with it."""
    layer = Q.FakeQuantLinear(tm.nn.Linear(2, 1), averaging_constant=0.5)
    with pytest.raises(ValueError, match="scale must be finite"):
        layer(tm.tensor(np.array([[-3e38, 3e38]], np.float32)))
