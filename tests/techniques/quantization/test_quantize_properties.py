"""Property test (Hypothesis): quantize then dequantize returns every value inside the
calibrated range within scale/2, per tensor and per channel, for every dtype and qscheme."""
import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from tinymem.techniques import quantization as Q

finite = st.floats(-1e6, 1e6, allow_nan=False, width=32)


@given(x=hnp.arrays(np.float32, hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=6),
                    elements=st.one_of(finite, st.sampled_from([0.0, -0.0, 1e-40, -1e-40]))),
       dtype=st.sampled_from(["quint8", "qint8"]), symmetric=st.booleans(), per_channel=st.booleans())
def test_round_trip_is_within_half_a_step(x, dtype, symmetric, per_channel):
    if per_channel:
        kind = "per_channel_symmetric" if symmetric else "per_channel_affine"
        observer, axis = Q.PerChannelMinMaxObserver(ch_axis=0, dtype=dtype, qscheme=kind), 0
    else:
        kind = "per_tensor_symmetric" if symmetric else "per_tensor_affine"
        observer, axis = Q.MinMaxObserver(dtype=dtype, qscheme=kind), None
    observer(x)
    scale, zero_point = observer.calculate_qparams()
    assert np.isfinite(scale).all() and (scale > 0).all()
    back = Q.dequantize(Q.quantize(x, scale, zero_point, dtype=dtype, axis=axis), scale, zero_point, axis=axis)
    step = scale.reshape((-1,) + (1,) * (x.ndim - 1)) if per_channel else scale
    error = np.abs(back.astype(np.float64) - x.astype(np.float64))
    # scale/2 from rounding, plus float32 rounding of x/scale and of scale*(q - z)
    bound = step / 2 + 4 * np.finfo(np.float32).eps * (np.abs(x) + step)
    assert np.all(error <= bound), (x, scale, zero_point, back)
