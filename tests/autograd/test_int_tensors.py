"""Integer tensors cannot require gradients, whichever way one asks."""
import numpy as np
import pytest

import tinymem as tm


@pytest.mark.parametrize("dtype", ["int64", "int8", "bool"])
def test_requires_grad_on_an_integer_tensor_is_refused(dtype):
    t = tm.tensor(np.array([1, 0, 1]), dtype=dtype)
    with pytest.raises(TypeError, match="floating-point"):
        t.requires_grad_()
    assert not t.requires_grad
    with pytest.raises(TypeError, match="floating-point"):
        tm.tensor([1, 2], requires_grad=True)
    assert t.requires_grad_(False) is t


def test_requires_grad_on_a_float_tensor_still_works():
    t = tm.tensor([1.0, 2.0]).requires_grad_()
    (t * t).sum().backward()
    np.testing.assert_array_equal(t.grad.numpy(), [2.0, 4.0])
