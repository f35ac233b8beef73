"""Checks for lesson 14's exercises, held against the planner's torch mode (which
tests/measure/test_torch_mode_measured.py holds against measured PyTorch steps)."""
import random

import pytest

from tinymem.planner.inputs import TorchOptions
from tinymem.planner.model.architectures import Arch
from tinymem.planner.terms import torch_step

pytestmark = pytest.mark.exercise_14


def _archs(seed, count):
    rng = random.Random(seed)
    for _ in range(count):
        heads = rng.choice([1, 2, 4])
        yield Arch("gpt", rng.randint(1, 4), heads * rng.randint(2, 16), heads, rng.randint(1, 64),
                   rng.randint(2, 3000), tied=rng.random() < 0.5), rng.randint(1, 4)


def test_cross_entropy_backward_bytes_are_the_torch_modes(exercise, forbid):
    cases = []
    for arch, batch in _archs(14, 40):
        for hold in (True, False):
            terms = torch_step.breakdown(arch, batch, TorchOptions(hold_logits=hold)).moment_terms["loss backward"]
            cases.append((batch * arch.seq, arch.vocab, hold, sum(t.bytes for _, t in terms if t.formula == "4·N·V")))
    forbid(torch_step.breakdown, torch_step.evaluate)
    mod = exercise("ex14")
    for tokens, vocab, hold, expected in cases:
        assert mod.cross_entropy_backward_bytes(tokens, vocab, hold) == expected, (tokens, vocab, hold)
    assert mod.cross_entropy_backward_bytes(1024, 50257, True) == 16 * 1024 * 50257


def test_adamw_temporary_bytes_are_the_torch_modes(exercise, forbid):
    cases = []
    for arch, batch in _archs(41, 30):
        sizes = torch_step.parameter_sizes(arch)
        for implementation in ("for-loop", "foreach", "fused"):
            b = torch_step.breakdown(arch, batch, TorchOptions(optimizer=implementation, hold_logits=False))
            cases.append((sizes, implementation, b.moments.get("optimizer step", {}).get("temporary", 0)))
    forbid(torch_step.breakdown, torch_step.evaluate)
    mod = exercise("ex14")
    for sizes, implementation, expected in cases:
        assert mod.adamw_temporary_bytes(sizes, implementation) == expected, (sizes, implementation)
    # the denominator of the parameter before is still alive: not 8 x the largest (80)
    assert mod.adamw_temporary_bytes([3, 10], "for-loop") == 4 * (2 * 10 + 3)
    assert mod.adamw_temporary_bytes([10, 3, 7], "for-loop") == 80
    assert mod.adamw_temporary_bytes([10, 3, 7], "foreach") == 80
    assert mod.adamw_temporary_bytes([10, 3, 7], "fused") == 0
