"""Checks for lesson 11 (edge deployment), and proof that plausible wrong answers fail them."""
import math
from types import SimpleNamespace

import numpy as np
import pytest

from exercise_checks import assert_fails_only_its_check, forbidding, wrong_answers
from tinymem.edge import PoolLayer, inference_peak, patch_inference
from tinymem.edge.patch import out_extent, tiles, trace_back

pytestmark = pytest.mark.exercise_11


def _ort_quantize(x, scale, zero_point):
    """The reference: ONNX Runtime running one QuantizeLinear node."""
    ort = pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper, numpy_helper
    graph = helper.make_graph(
        [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"])], "q",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None])],
        [helper.make_tensor_value_info("q", TensorProto.UINT8, [None])],
        [numpy_helper.from_array(np.array(scale, np.float32), "s"),
         numpy_helper.from_array(np.array(zero_point, np.uint8), "z")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": x})[0]


def check_onnx_quantize_linear(mod):
    rng = np.random.default_rng(0)
    scale = np.float32(0.1)
    x = np.concatenate([rng.uniform(-20, 30, 5000), (np.arange(-40, 300) + 0.5) * 0.1,  # near ties
                        [1.25, 0.75, -1e9, 1e9]]).astype(np.float32)
    # the test data holds quotients where dividing and multiplying by the reciprocal disagree
    assert (np.rint(x / scale) != np.rint(x * (np.float32(1) / scale))).any()
    for s, z in ((scale, 0), (scale, 128), (np.float32(0.5), 3)):
        got = np.asarray(mod.onnx_quantize_linear(x, s, z))
        assert got.dtype == np.uint8 and np.array_equal(got, _ort_quantize(x, s, z)), (s, z)


def _layers(spec):
    return [SimpleNamespace(kernel=k, stride=s, padding=p) for k, s, p in spec]


def check_input_rows(mod):
    rng = np.random.default_rng(1)
    cases = []
    for _ in range(200):
        spec = [(int(rng.choice([1, 3, 5])), int(rng.integers(1, 3)), int(rng.integers(0, 3))) for _ in range(3)]
        a = int(rng.integers(0, 20))
        b = a + int(rng.integers(1, 8))
        shift = 64  # move the tile far from the border, so tinymem's trace_back clips nothing
        stride = math.prod(s for _, s, _ in spec)
        (lo, hi, _, _) = trace_back((a + shift, b + shift), _layers(spec), [10**6] * 4)[0]
        cases.append((a, b, spec, (lo - shift * stride, hi - shift * stride)))
    with forbidding(trace_back):
        assert tuple(mod.input_rows(0, 1, [(3, 1, 1)])) == (-1, 2)
        for a, b, spec, want in cases:
            assert tuple(mod.input_rows(a, b, spec)) == want, spec


def check_layer_by_layer_peak(mod):
    # the second layer (16x8x8 in + 16x4x4 out = 1280) holds more than the first (3x8x8 + 16x8x8 = 1216)
    assert mod.layer_by_layer_peak([(3, 8, 8), (16, 8, 8), (16, 4, 4)]) == 4 * 1280
    for c, h in ((1, 32), (4, 64), (3, 20)):
        chain = [PoolLayer(2), PoolLayer(2), PoolLayer(2)]
        measured = inference_peak(chain, (1, c, h, h))
        shapes = [(1, c, h, h)] + [tuple(r["shape"]) for r in measured["layers"]]
        assert mod.layer_by_layer_peak(shapes) == measured["peak"]  # pooling has no workspace
    # int8 maps (1 byte) and half precision (2 bytes)
    assert mod.layer_by_layer_peak([(3, 8, 8), (16, 8, 8), (16, 4, 4)], bytes_per_element=1) == 1280
    assert mod.layer_by_layer_peak([(3, 8, 8), (16, 8, 8), (16, 4, 4)], 2) == 2 * 1280


def _reference_fraction(size, count, spec):
    layers = _layers(spec)
    sizes = [size]
    for layer in layers:
        sizes.append(out_extent(sizes[-1], layer))
    extent, computed = sizes[-1], 0
    for t in range(count):
        a, b = t * extent // count, (t + 1) * extent // count
        needs = trace_back((a, b), layers, sizes)
        computed += (b - a) + sum(hi - lo for lo, hi, _, _ in needs[1:])
    return computed / sum(sizes[1:]) - 1


def check_recomputed_fraction(mod):
    # 3, 5 and 7 tiles do not divide the extents (64, 32 or 8 positions): the tiles are unequal
    cases = [(64, count, spec) for spec in ([(3, 1, 1)] * 4, [(3, 2, 1), (3, 1, 1), (2, 2, 0), (5, 1, 2)])
             for count in (1, 2, 3, 4, 5, 7)]
    expected = [_reference_fraction(*case) for case in cases]
    with forbidding(trace_back, tiles, out_extent, patch_inference):
        assert mod.recomputed_fraction(8, 2, [(3, 1, 1), (3, 1, 1)]) == pytest.approx(18 / 16 - 1)
        assert mod.recomputed_fraction(16, 4, [(3, 1, 1)]) == pytest.approx(0)
        for case, want in zip(cases, expected):
            assert mod.recomputed_fraction(*case) == pytest.approx(want), case


CHECKS = {"onnx_quantize_linear": check_onnx_quantize_linear, "input_rows": check_input_rows,
          "layer_by_layer_peak": check_layer_by_layer_peak, "recomputed_fraction": check_recomputed_fraction}


@pytest.mark.parametrize("name", list(CHECKS))
def test_exercise(exercise, name):
    CHECKS[name](exercise("ex11"))


@pytest.mark.parametrize("path", wrong_answers("ex11"), ids=lambda p: p.stem)
def test_a_wrong_answer_fails_its_check_and_only_its_check(path):
    assert_fails_only_its_check("ex11", path, CHECKS)
