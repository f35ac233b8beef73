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


def test_a_plain_npy_array_and_damaged_headers_raise_the_checkpoint_error(tmp_path):
    np.save(tmp_path / "plain.npy", np.ones(3))
    with pytest.raises(tm.CheckpointError, match="single array.*numpy.load"):
        tm.load(tmp_path / "plain.npy")
    path = tmp_path / "ckpt.npz"
    tm.save({"w": np.ones((10, 100), np.float32)}, path)
    good = path.read_bytes()
    directory = good.index(b"PK\x01\x02")  # the zip's central directory entry of the first array

    def flipped(position, bit):
        data = bytearray(good)
        data[position] ^= 1 << bit
        return bytes(data)

    damaged = {"npy header": good.replace(b"(10, 100)", b"(10,(100)", 1),   # NumPy's tokenizer fails
               "encrypted flag": flipped(directory + 8, 0),                 # zipfile: RuntimeError
               "zip version": flipped(directory + 6, 6)}                    # zipfile: NotImplementedError
    for what, data in damaged.items():
        (tmp_path / "bad.npz").write_bytes(data)
        with pytest.raises(tm.CheckpointError, match="truncated or not a tinymem checkpoint"):
            tm.load(tmp_path / "bad.npz")


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


def test_zero_d_arrays_and_numpy_scalars_keep_their_shape_and_type(tmp_path):
    obj = {"zero_d": np.array(2.5, np.float32), "f32": np.float32(1.5), "i8": np.int8(-3),
           "b": np.bool_(True), "t0": tm.tensor(np.array(4.0, np.float32)), "empty": np.zeros((0, 3))}
    tm.save(obj, tmp_path / "c.npz")
    back = tm.load(tmp_path / "c.npz")
    assert back["zero_d"].shape == () and back["zero_d"].dtype == np.float32 and back["zero_d"] == 2.5
    assert type(back["f32"]) is np.float32 and back["f32"] == 1.5
    assert type(back["i8"]) is np.int8 and back["i8"] == -3
    assert type(back["b"]) is np.bool_ and back["b"]
    assert back["t0"].shape == () and back["t0"].item() == 4.0
    assert back["empty"].shape == (0, 3)


def _hand_made(path, manifest_text, **arrays):
    members = {k: np.asarray(v) for k, v in arrays.items()}
    members["manifest"] = np.frombuffer(manifest_text.encode(), dtype=np.uint8)
    np.savez(path, **members)
    return path


ROOT = '{"format": "tinymem-checkpoint-1", "root": %s}'


@pytest.mark.parametrize("manifest", [
    ROOT % '{"array": 5}',                      # names no array (was KeyError)
    ROOT % '{"array": "0"}',
    ROOT % '"just text"',                       # not an entry (was AttributeError)
    ROOT % '{"dict": [[{"value": "k"}]]}',      # a pair without its value
    ROOT % '{"dict": [[{"list": []}, {"value": 1}]]}',  # an unhashable key
    ROOT % '{"int": null}',
    ROOT % '{"int": "twelve"}',
    ROOT % '{"value": [1, 2]}',
    ROOT % '{"a": 1, "b": 2}',
    ROOT % '{"scalar": 0}',                     # a scalar entry naming a 1-d array
    ROOT % ('{"list": [' * 5000 + ']}' * 5000),  # deep nesting (was RecursionError)
    '["not", "a", "dict"]',
    '{"format": "tinymem-checkpoint-1"}',
])
def test_hand_made_bad_manifests_raise_the_checkpoint_error(tmp_path, manifest):
    path = _hand_made(tmp_path / "bad.npz", manifest, a0=np.ones(2))
    with pytest.raises(tm.CheckpointError, match="bad.npz"):
        tm.load(path)


def test_a_new_file_follows_the_umask_and_an_overwritten_one_keeps_its_mode(tmp_path):
    old = os.umask(0o022)
    try:
        tm.save({"v": np.ones(2)}, tmp_path / "new.npz")
        assert os.stat(tmp_path / "new.npz").st_mode & 0o777 == 0o644
        os.chmod(tmp_path / "new.npz", 0o640)
        tm.save({"v": np.zeros(2)}, tmp_path / "new.npz")
        assert os.stat(tmp_path / "new.npz").st_mode & 0o777 == 0o640
    finally:
        os.umask(old)
    np.testing.assert_array_equal(tm.load(tmp_path / "new.npz")["v"], np.zeros(2))
