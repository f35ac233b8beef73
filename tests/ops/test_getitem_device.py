"""Indexing a device tensor with index arrays made anywhere: lists, NumPy arrays and Tensors on
either device select as NumPy does, with PyTorch's gradient. An integer index made on the host
is checked against the shape before it reaches the device, where CuPy would wrap it around."""
import copy

import numpy as np
import pytest

import standin_cupy
import tinymem as tm
from conftest import requires_torch
from tinymem import backend

VALUES = np.arange(12, dtype=np.float64).reshape(3, 4)

FANCY = [[0, 2, 0], [-1, 0, -1], [], [True, False, True], np.array([0, 2, 2], np.int32),
         np.array([0, 2, 2], np.uint8), np.array(1), VALUES > 4, np.array([[0, 1], [1, 1]]),
         (slice(None), np.array([1, 1, 3])), (np.array([0, 0, 2]), np.array([1, 1, -1])),
         (Ellipsis, np.array([3, 3])), (None, np.array([2, 2])), (1, [0, 0, 3]),
         (np.array([True, False, True]), np.array([3, 0]))]


def _torch_index(index):
    import torch
    items = index if isinstance(index, tuple) else (index,)
    items = tuple(torch.as_tensor(i) if isinstance(i, (list, np.ndarray)) else i for i in items)
    items = tuple(i.long() if getattr(i, "dtype", None) in (torch.int32, torch.uint8, torch.float32) else i
                  for i in items)
    return items if isinstance(index, tuple) else items[0]


@requires_torch
@pytest.mark.parametrize("index", FANCY, ids=range(len(FANCY)))
def test_fancy_indexing_and_its_gradient_equal_pytorch(device, index):
    import torch
    # Copies: tm.tensor shares the array it is given and the ledger counts an array while it lives,
    # so the module's own VALUES (and a FANCY index that GetItem saves) stayed counted for the rest
    # of the suite (a 96 B array in a later test's peak window, depending on test order).
    index = copy.deepcopy(index)
    x = tm.tensor(VALUES.copy(), requires_grad=True, device=device)
    y = x[index]
    weights = np.random.default_rng(0).standard_normal(y.shape)
    (y * tm.tensor(weights, device=device)).sum().backward()
    xt = torch.tensor(VALUES, requires_grad=True)
    yt = xt[_torch_index(index)]
    (yt * torch.tensor(weights)).sum().backward()
    assert backend.device_of(y.data) == device and y.shape == tuple(yt.shape)
    np.testing.assert_array_equal(backend.to_numpy(y.data), yt.detach().numpy())
    np.testing.assert_allclose(backend.to_numpy(x.grad.data), xt.grad.numpy())


@pytest.mark.parametrize("index, message", [
    ([5], "index 5 is out of bounds for axis 0 with size 3"),
    (np.array([0, 3]), "index 3 is out of bounds for axis 0"),
    (np.array([-4]), "index -4 is out of bounds for axis 0"),
    ((slice(None), np.array([4])), "index 4 is out of bounds for axis 1 with size 4"),
    ((Ellipsis, [-5]), "index -5 is out of bounds for axis 1"),
    ((None, 0, np.array([1, 9])), "index 9 is out of bounds for axis 1"),
    ((np.array([True, False, True]), np.array([4, 0])), "index 4 is out of bounds for axis 1"),
])
def test_a_host_index_out_of_range_is_refused_before_the_device_wraps_it(standin, monkeypatch, index, message):
    # CuPy wraps an integer index out of range around ("Differences between CuPy and NumPy");
    # the stand-in raises as NumPy does, so here reaching its indexing at all is the failure.
    x = tm.tensor(VALUES.copy(), requires_grad=True)

    def reached(a, key):
        raise AssertionError("an index out of range reached the device, which wraps it around")
    monkeypatch.setattr(standin_cupy, "_getitem", reached)
    with pytest.raises(IndexError, match=message):
        x[index]


def test_a_host_tensor_indexed_by_a_device_tensor_selects_on_the_host(standin):
    x = tm.tensor(VALUES.copy(), requires_grad=True, device="cpu")
    y = x[tm.tensor(np.array([2, 2]), device="cuda")]
    y.sum().backward()
    assert backend.device_of(y.data) == "cpu"
    np.testing.assert_array_equal(y.data, VALUES[[2, 2]])
    expected = np.zeros_like(VALUES)
    expected[2] = 2.0  # row 2, selected twice
    np.testing.assert_array_equal(x.grad.data, expected)
