"""Property test (Hypothesis): ``tm.save`` then ``tm.load`` gives back any nested state exactly:
the same containers, keys, number types, array dtypes and shapes (0-d and empty included),
NaN and inf included."""
import math
import tempfile

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import tinymem as tm

DTYPES = ["float16", "float32", "float64", "int8", "int32", "int64", "uint8", "bool"]

arrays = st.sampled_from(DTYPES).flatmap(lambda dt: hnp.arrays(
    np.dtype(dt), hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4)))
scalars = arrays.filter(lambda a: a.ndim == 0).map(lambda a: a[()])
leaves = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(), st.text(max_size=8),
                   arrays, scalars, arrays.map(tm.tensor))
keys = st.one_of(st.text(max_size=6), st.integers(-10, 10), st.none())
states = st.recursive(leaves, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.lists(inner, max_size=4).map(tuple),
    st.dictionaries(keys, inner, max_size=4)), max_leaves=12)


def same(a, b):
    if type(a) is not type(b):
        return False
    if isinstance(a, tm.Tensor):
        return same(a.numpy(), b.numpy())
    if isinstance(a, (np.ndarray, np.generic)):
        return a.dtype == b.dtype and a.shape == b.shape and np.array_equal(
            a, b, equal_nan=a.dtype.kind == "f")
    if isinstance(a, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    return a == b


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(states)
def test_save_then_load_gives_back_the_same_state(state):
    with tempfile.TemporaryDirectory() as folder:
        path = f"{folder}/c.npz"
        tm.save(state, path)
        back = tm.load(path)
    assert same(state, back), (state, back)
