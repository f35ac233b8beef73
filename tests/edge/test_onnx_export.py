"""ONNX export built with onnx.helper, run in ONNX Runtime, held against tinymem's own inference."""
import numpy as np
import pytest

import tinymem as tm
import tinymem.functional as F
from tinymem import data, models, nn, optim
from tinymem.techniques import quantization as Q

pytest.importorskip("onnxruntime")
import onnx  # noqa: E402
import onnxruntime as ort  # noqa: E402

from tinymem.edge import onnx_export as E  # noqa: E402
from tinymem.edge import runtime as R  # noqa: E402


@pytest.fixture(scope="module")
def digits_models():
    x_train, y_train, x_test, y_test = data.load_digits()
    tm.manual_seed(0)
    model = models.MLP([64, 96, 64, 10])
    opt = optim.Adam(model.parameters(), lr=2e-3)
    for epoch in range(3):
        for xb, yb in data.DataLoader((x_train, y_train), batch_size=64, shuffle=True, seed=epoch):
            loss = F.cross_entropy(model(xb), yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
    int8 = models.MLP([64, 96, 64, 10])
    int8.load_state_dict(model.state_dict())
    Q.quantize_model(int8, [x_train[:256], x_train[256:512]], Q.HistogramObserver, per_channel=True)
    return model, int8, x_test, y_test


def test_float_export_runs_like_tinymem(digits_models):
    model, _, x, _ = digits_models
    with tm.no_grad():
        expected = model(tm.tensor(x)).numpy()
    got = R.run(R.session(E.to_onnx(model)), x)["logits"]
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("level", ["reference", "fused"])
def test_int8_codes_within_one_step_and_the_same_predictions(digits_models, level):
    _, int8, x, y = digits_models
    proto = E.to_onnx(int8, expose_codes=True)
    opt = ort.GraphOptimizationLevel.ORT_DISABLE_ALL if level == "reference" else ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    out = R.run(R.session(proto, level=opt), x)
    logits, codes = R.tinymem_codes(int8, x)
    _, saturated = R.tinymem_codes(int8, x, int16_pairs=True)
    assert len(codes) == 3
    # the first layer's codes come straight from the input: the same numbers, the same rounding
    assert np.array_equal(out["codes_0"], codes[0])
    assert all(out[f"codes_{i}"].dtype == np.uint8 for i in range(3))
    agree = R.code_agreement(out, codes, saturated)
    if level == "reference":  # float math as the graph spells it: one step at most
        assert agree["codes_max_diff"] <= 1, agree
    # fused kernels on x86 without VNNI saturate int16 pair sums: each code further than one step
    # from tinymem's exact codes is within one step of the same arithmetic with that saturation
    assert agree["codes_beyond_one_step"] == agree["beyond_explained_by_int16_pairs"], agree
    assert agree["codes_beyond_one_step"] < 1e-3 * agree["codes"], agree
    assert np.array_equal(out["logits"].argmax(1), logits.argmax(1))
    with tm.no_grad():
        assert np.array_equal(int8(tm.tensor(x)).numpy().argmax(1), logits.argmax(1))


def test_quantize_linear_is_what_the_onnx_spec_says(digits_models):
    """Independent reference for codes_0: saturate(round_half_even(x / scale) + zero_point)."""
    _, int8, x, _ = digits_models
    first = int8[0]
    out = R.run(R.session(E.to_onnx(int8, expose_codes=True)), x)
    spec = np.clip(np.rint(x / np.float32(first.input_scale)) + first.input_zero_point, 0, 255).astype(np.uint8)
    assert np.abs(out["codes_0"].astype(int) - spec.astype(int)).max() <= 1
    assert (out["codes_0"] != spec).mean() < 1e-3  # only at float ties of x / s


def test_int8_file_is_a_quarter_of_float32_and_valid(digits_models, tmp_path):
    model, int8, _, _ = digits_models
    fp32, q = E.to_onnx(model), E.to_onnx(int8)
    assert 0.24 < E.file_bytes(q) / E.file_bytes(fp32) < 0.3
    path = E.save(q, str(tmp_path / "m.onnx"))
    loaded = onnx.load(path)
    onnx.checker.check_model(loaded)
    assert loaded.opset_import[0].version == E.OPSET
    assert {n.op_type for n in loaded.graph.node} >= {"QuantizeLinear", "DequantizeLinear", "MatMul"}
    weights = {i.name: i for i in loaded.graph.initializer}
    assert weights["wq_0"].data_type == onnx.TensorProto.INT8
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx"]


def test_fused_graph_runs_integer_kernels(digits_models):
    _, int8, _, _ = digits_models
    assert "QGemm" in R.fused_op_types(E.to_onnx(int8)) or "MatMulIntegerToFloat" in R.fused_op_types(E.to_onnx(int8))


def test_save_leaves_nothing_behind_on_failure(digits_models, tmp_path):
    model, _, _, _ = digits_models
    with pytest.raises(OSError):
        E.save(E.to_onnx(model), str(tmp_path / "missing" / "m.onnx"))
    assert list(tmp_path.iterdir()) == []


def test_clear_errors_for_what_cannot_be_exported():
    with pytest.raises(TypeError, match="Sequential"):
        E.to_onnx(nn.Linear(3, 2))
    with pytest.raises(TypeError, match="GELU"):
        E.to_onnx(nn.Sequential(nn.Linear(3, 2), nn.GELU()))
    model = nn.Sequential(nn.Linear(4, 3))
    Q.quantize_model(model, [np.random.default_rng(0).standard_normal((8, 4)).astype(np.float32)],
                     lambda: Q.MinMaxObserver(reduce_range=True))
    with pytest.raises(ValueError, match="0..255"):
        E.to_onnx(model)


def test_int16_pair_matmul_saturates_adjacent_pairs_only():
    """VPMADDUBSW's arithmetic by hand: (255·127 + 255·127) saturates to 32,767, a pair of
    opposite signs does not, and an odd inner dimension pads one zero product."""
    codes = np.array([[255, 255, 255, 255, 3]], np.uint8)
    weight = np.array([[127, 127, 127, -127, 2], [-128, -128, 1, 1, 1]], np.int8)
    got = R.int16_pair_matmul(codes, weight)
    assert got.tolist() == [[32767 + 0 + 6, -32768 + 510 + 3]]
    exact = codes.astype(np.int64) @ weight.T.astype(np.int64)
    assert exact.tolist() == [[64770 + 0 + 6, -65280 + 510 + 3]]
    small = np.array([[10, 20, 30]], np.uint8)
    assert np.array_equal(R.int16_pair_matmul(small, weight[:, :3]), small.astype(np.int64) @ weight[:, :3].T.astype(np.int64))
