import re

import numpy as np
import pytest

from tinymem import data


def test_digits_are_standardised_and_split_reproducibly():
    x_tr, y_tr, x_te, y_te = data.load_digits()
    assert x_tr.shape[1] == 64 and len(x_tr) + len(x_te) == 1797
    assert abs(len(x_te) - 0.2 * 1797) <= 1
    assert x_tr.dtype == np.float32 and y_tr.dtype == np.int64
    np.testing.assert_allclose(x_tr.mean(0), 0, atol=1e-5)
    again = data.load_digits()
    np.testing.assert_array_equal(again[1], y_tr)
    assert set(np.unique(y_te)) == set(range(10))


def test_loader_shuffles_by_seed_and_covers_every_sample():
    x = np.arange(10).reshape(10, 1).astype(np.float32)
    y = np.arange(10)
    first = [b[1].numpy().tolist() for b in data.DataLoader((x, y), batch_size=4, seed=3)]
    second = [b[1].numpy().tolist() for b in data.DataLoader((x, y), batch_size=4, seed=3)]
    assert first == second and [len(b) for b in first] == [4, 4, 2]
    assert sorted(sum(first, [])) == list(range(10))
    loader = data.DataLoader((x, y), batch_size=4, seed=3, drop_last=True)
    epoch1 = [b[1].numpy().tolist() for b in loader]
    epoch2 = [b[1].numpy().tolist() for b in loader]
    assert len(loader) == 2 and epoch1 != epoch2  # a new order each epoch
    with pytest.raises(ValueError, match="different lengths"):
        data.DataLoader((x, y[:5]))


def test_a_loader_given_tensors_batches_their_arrays(device):
    import tinymem as tm
    x = np.arange(12, dtype=np.float32).reshape(6, 2)
    y = np.arange(6)
    from_tensors = data.DataLoader((tm.tensor(x, device=device, requires_grad=True), tm.tensor(y, device=device)),
                                   batch_size=4, seed=1, device="cpu")
    from_arrays = data.DataLoader((x, y), batch_size=4, seed=1, device="cpu")
    batches = list(from_tensors)
    assert [b[0].dtype for b in batches] == [np.float32] * 2 and batches[0][1].dtype == y.dtype
    for got, want in zip(batches, from_arrays):
        np.testing.assert_array_equal(got[0].numpy(), want[0].numpy())
        np.testing.assert_array_equal(got[1].numpy(), want[1].numpy())
    assert not batches[0][0].requires_grad  # data, not a part of the graph that made it


def test_a_loader_refuses_non_numeric_arrays_and_bad_devices_at_construction():
    import tinymem as tm
    with pytest.raises(TypeError, match="array 0 is not numeric .*from a list"):
        data.DataLoader(([tm.tensor([1.0]), tm.tensor([2.0])],))
    with pytest.raises(tm.DeviceError, match="unknown device 'gpu'"):
        data.DataLoader((np.ones(3),), device="gpu")


def test_python_source_is_a_second_text_in_the_documentations_characters():
    train_ids, val_ids, vocab = data.load_python_docs()
    source, source_val = data.load_python_source(vocab)
    assert len(source) > 100_000 and len(source_val) == pytest.approx(len(source) / 9, rel=0.01)
    assert source.max() < len(vocab) and source.min() >= 0
    text = vocab.decode(source[:2000])
    assert text.count("def ") >= 3 and "return" in text  # code, not the documentation's prose
    again, _ = data.load_python_source(vocab)
    np.testing.assert_array_equal(again, source)


@pytest.mark.parametrize("values", [np.array(["a", "b"]), np.array([b"a", b"b"]),
                                    np.array(["2020-01-01", "2020-01-02"], "datetime64[D]"),
                                    np.zeros(2, [("a", "f4")])], ids=["str", "bytes", "datetime", "record"])
def test_a_loader_refuses_arrays_of_strings_dates_and_records(values):
    with pytest.raises(TypeError, match=f"array 1 holds {re.escape(str(values.dtype))} values, not numbers"):
        data.DataLoader((np.ones(2), values))


def test_a_loader_says_which_argument_is_ragged():
    with pytest.raises(ValueError, match="DataLoader's array 0 cannot be made one array"):
        data.DataLoader(([[1.0, 2.0], [3.0]],))


@pytest.mark.parametrize("flag", ["shuffle", "drop_last"])
def test_a_loader_takes_only_true_or_false_for_its_switches(flag):
    with pytest.raises(TypeError, match=f"DataLoader's {flag} must be True or False, got 'no'"):
        data.DataLoader((np.arange(5),), batch_size=2, **{flag: "no"})  # 'no' is truthy: it shuffled / dropped
    loader = data.DataLoader((np.arange(5),), batch_size=2, **{"shuffle": False, flag: np.False_})
    assert [b[0].numpy().tolist() for b in loader][-1] == [4]  # kept, in order
