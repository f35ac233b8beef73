"""clip_grad_norm_ against torch.nn.utils.clip_grad_norm_."""
import numpy as np
import pytest
from conftest import TOL, requires_torch

import tinymem as tm
from tinymem.nn.utils import clip_grad_norm_


@requires_torch
@pytest.mark.parametrize("norm_type,max_norm", [(2.0, 0.5), (1.0, 100.0), (float("inf"), 0.5), (3.0, 0.5), (0.5, 1.0),
                                               # -inf is the smallest |g|, 0 counts nonzeros (then norms of norms)
                                               (float("-inf"), 1e-3), (0.0, 0.5)])
def test_matches_torch(norm_type, max_norm):
    import torch
    rng = np.random.default_rng(0)
    grads = [rng.standard_normal(s).astype(np.float32) for s in ((3, 4), (5,))]
    grads[0][1, 2] = 0.0  # a zero entry: not counted by the 0-"norm", the smallest for -inf
    ours = [tm.tensor(np.zeros_like(g), requires_grad=True) for g in grads]
    theirs = [torch.zeros(g.shape, requires_grad=True) for g in grads]
    for o, t, g in zip(ours, theirs, grads):
        o.grad = tm.tensor(g.copy())
        t.grad = torch.from_numpy(g.copy())
    total = clip_grad_norm_(ours, max_norm, norm_type)
    expected = torch.nn.utils.clip_grad_norm_(theirs, max_norm, norm_type)
    np.testing.assert_allclose(total.item(), expected.item(), *TOL["float32"])
    for o, t in zip(ours, theirs):
        np.testing.assert_allclose(o.grad.numpy(), t.grad.numpy(), *TOL["float32"])


def test_float16_gradients_are_normed_in_float32():
    p = tm.tensor(np.zeros(4, np.float16), requires_grad=True)
    p.grad = tm.tensor(np.full(4, 300.0, np.float16))  # 300^2 overflows float16
    total = clip_grad_norm_([p], 1.0)
    assert total.item() == pytest.approx(600.0)
    assert p.grad.dtype == np.float16
    np.testing.assert_allclose(p.grad.numpy().astype(np.float32), 0.5, rtol=1e-3)


def test_nonfinite_norm_can_raise():
    p = tm.tensor(np.zeros(2, np.float32), requires_grad=True)
    p.grad = tm.tensor(np.array([np.inf, 1.0], np.float32))
    with pytest.raises(RuntimeError, match="non-finite"):
        clip_grad_norm_(p, 1.0, error_if_nonfinite=True)


def test_bfloat16_bits_explain():
    p = tm.tensor(np.zeros(2, np.float32), requires_grad=True)
    p._grad = tm.Tensor(np.zeros(2, np.uint16))
    with pytest.raises(TypeError, match="master"):
        clip_grad_norm_(p, 1.0)
