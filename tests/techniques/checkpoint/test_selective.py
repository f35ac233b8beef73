"""Selective recomputation: bit-identical gradients, kept ops not recomputed, fewer saved bytes
than plain, clear errors for policies that cannot work."""
import numpy as np
import pytest
from _ckpt_models import assert_identical, mlp, step_grads

import tinymem as tm
from tinymem import memory
from tinymem.ops import layers
from tinymem.techniques.checkpoint import Policy, checkpoint, checkpoint_sequential

POLICIES = [["linear"], Policy(save=["Linear", "matmul"]), Policy(recompute=["conv2d"])]


def plain(model, x):
    return model(x)


@pytest.mark.parametrize("policy", POLICIES, ids=repr)
@pytest.mark.parametrize("segments", [2, "sqrt"])
def test_gradients_bit_identical_to_plain(device, policy, segments):
    model = mlp(device, dropout=0.5)
    ref = step_grads(model, plain, device)
    got = step_grads(model, lambda m, x: checkpoint_sequential(m, segments, x, policy=policy), device)
    assert_identical(ref, got)


def test_transformer_block_bit_identical():
    tm.manual_seed(0)
    lm = tm.models.TransformerLM(vocab_size=11, context=8, d_model=16, n_heads=2, n_layers=2, dropout=0.1)
    ids = np.random.default_rng(0).integers(0, 11, (3, 8))

    def grads(run):
        for p in lm.parameters():
            p.grad = None
        tm.manual_seed(3)
        h = lm.embed(ids)
        out = lm.logits(run(h))
        tm.functional.cross_entropy(out.reshape(-1, 11), ids.reshape(-1)).backward()
        return [p.grad.numpy() for p in lm.parameters()]

    ref = grads(lm.blocks)
    for policy in (["linear", "matmul"], ["linear", "gelu"]):
        got = grads(lambda h: checkpoint_sequential(lm.blocks, 2, h, policy=policy))
        assert_identical(ref, got)


def test_kept_ops_are_not_recomputed(monkeypatch):
    model = mlp(dropout=0.0)
    calls = []
    forward = layers.Linear.forward

    def counted(ctx, *args, **kwargs):
        calls.append(1)
        return forward(ctx, *args, **kwargs)

    monkeypatch.setattr(layers.Linear, "forward", staticmethod(counted))
    n_linear = sum(isinstance(m, tm.nn.Linear) for m in model.modules())
    step_grads(model, lambda m, x: checkpoint(m, x, policy=["linear"]))
    assert len(calls) == n_linear, "a kept Linear ran again in the recomputation"
    calls.clear()
    step_grads(model, lambda m, x: checkpoint(m, x))
    assert len(calls) == 2 * n_linear, "full recomputation runs every Linear twice"


def _activation_peak(run):
    model = mlp(depth=6, width=64, dropout=0.0)
    rng = np.random.default_rng(0)
    x = tm.tensor(rng.standard_normal((256, 8)), dtype="float32", requires_grad=True)
    with memory.track(measure=False, timeline=False) as t:
        run(model, x).sum().backward()
    return t.max_by_bucket()["activation"]


def test_saved_bytes_between_full_recomputation_and_none():
    none = _activation_peak(plain)
    full = _activation_peak(lambda m, x: checkpoint_sequential(m, 4, x))
    selective = _activation_peak(lambda m, x: checkpoint_sequential(m, 4, x, policy=["linear"]))
    assert full < selective < none, (full, selective, none)


def test_policy_errors_say_what_to_do():
    with pytest.raises(ValueError, match="either save"):
        Policy()
    with pytest.raises(ValueError, match="unknown op"):
        Policy(save=["linaer"])
    with pytest.raises(ValueError, match="keep_for_backward"):
        Policy(save=["layer_norm"])


def test_recomputation_that_runs_other_ops_is_refused():
    state = {"calls": 0}
    lin = tm.nn.Linear(4, 4)

    def changing(x):
        state["calls"] += 1
        return lin(x) if state["calls"] == 1 else x * 2

    x = tm.tensor(np.ones((2, 4), np.float32), requires_grad=True)
    out = checkpoint(changing, x, policy=["linear"])
    with pytest.raises(RuntimeError, match="same ops"):
        out.sum().backward()
