"""Checkpoints: no pickle, atomic writes, clear errors, bit-identical resume."""
import os

import numpy as np
import pytest

import tinymem as tm
import tinymem.functional as F


def test_round_trip_of_nested_values(tmp_path):
    obj = {"w": np.arange(6, dtype=np.float32).reshape(2, 3), "step": 2**60 + 1, "lr": 1e-3,
           "inf": float("inf"), "name": "adam", "flags": (True, None), "t": tm.tensor([1.5, 2.5]),
           "nested": [{"a": np.int8(3)}, []], 7: "int key"}
    tm.save(obj, tmp_path / "c.npz")
    back = tm.load(tmp_path / "c.npz")
    np.testing.assert_array_equal(back["w"], obj["w"])
    assert back["w"].dtype == np.float32
    assert back["step"] == 2**60 + 1 and back["lr"] == 1e-3 and back["inf"] == float("inf")
    assert back["flags"] == (True, None) and back["name"] == "adam" and back[7] == "int key"
    assert isinstance(back["t"], tm.Tensor) and back["t"].numpy().tolist() == [1.5, 2.5]
    assert back["nested"] == [{"a": 3}, []]


def test_write_is_atomic_and_leaves_nothing_on_failure(tmp_path):
    path = tmp_path / "ckpt.npz"
    tm.save({"v": np.ones(3)}, path)
    with pytest.raises(tm.CheckpointError, match="cannot save a set"):
        tm.save({"v": np.zeros(3), "bad": {1, 2}}, path)
    np.testing.assert_array_equal(tm.load(path)["v"], np.ones(3))  # the old file is intact
    assert os.listdir(tmp_path) == ["ckpt.npz"]  # no temporary file left behind


def test_truncated_and_foreign_files_raise_clear_errors(tmp_path):
    path = tmp_path / "ckpt.npz"
    tm.save({"v": np.ones(1000)}, path)
    data = path.read_bytes()
    (tmp_path / "cut.npz").write_bytes(data[: len(data) // 2])
    with pytest.raises(tm.CheckpointError, match="cut.npz.*truncated"):
        tm.load(tmp_path / "cut.npz")
    np.savez(tmp_path / "foreign.npz", x=np.ones(2))
    with pytest.raises(tm.CheckpointError, match="not a tinymem checkpoint"):
        tm.load(tmp_path / "foreign.npz")
    np.save(tmp_path / "pickled.npy", np.array([{"evil": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(tm.CheckpointError):
        tm.load(tmp_path / "pickled.npy")


def _train(steps, resume_at=None, path=None, make_opt=None):
    x_tr, y_tr, _, _ = tm.data.load_digits()
    tm.manual_seed(0)
    model = tm.models.MLP([64, 32, 10], dropout=0.2)
    opt = make_opt(model.parameters())
    loader = tm.data.DataLoader((x_tr[:256], y_tr[:256]), batch_size=32, seed=1)
    batches = [b for _ in range(2) for b in loader][:steps]
    for i, (x, y) in enumerate(batches):
        if i == resume_at:
            tm.save({"model": model.state_dict(), "opt": opt.state_dict(), "rng": tm.get_rng_state()}, path)
            tm.manual_seed(123)  # scramble everything, then restore from the file
            model = tm.models.MLP([64, 32, 10], dropout=0.2)
            opt = make_opt(model.parameters())
            state = tm.load(path)
            model.load_state_dict(state["model"])
            opt.load_state_dict(state["opt"])
            tm.set_rng_state(state["rng"])
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()
    return [p.numpy() for p in model.parameters()]


@pytest.mark.parametrize("make_opt", [lambda p: tm.optim.SGD(p, lr=0.1, momentum=0.9),
                                      lambda p: tm.optim.Adam(p, lr=1e-2)], ids=["sgd", "adam"])
def test_resumed_training_is_bit_identical(tmp_path, make_opt):
    straight = _train(12, make_opt=make_opt)
    resumed = _train(12, resume_at=5, path=tmp_path / "c.npz", make_opt=make_opt)
    for a, b in zip(straight, resumed):
        np.testing.assert_array_equal(a, b)
