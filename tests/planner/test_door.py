"""The closed form resolves a stack's names once, at its door (``tinymem.planner.inputs``).

The door's lookups, ``width`` (a precision's Width, once ``precision.width``), ``offload_kind`` and
``optimizer_label`` (once ``sharding``'s), are replaced in every tinymem module that binds them by
a counting wrapper, so that a call through any import is counted: a stack weighed asks each
once, and nothing below the door asks again. (On main before the door: 3686 / 971 / 2060 calls
in plan_arch('llama2-70b', 64 GPUs), 14 / 4 / 3 in one breakdown, 10 / 4 / 14 in compare.)
"""
import collections
import sys

import pytest

from tinymem.planner import analytic, architectures, exactness, fits, inputs

Stack = analytic.Stack

LOOKUPS = {"width": inputs.width, "offload_kind": inputs.offload_kind, "optimizer_label": inputs.optimizer_label,
           "get_arch": architectures.get_arch}


@pytest.fixture
def calls(monkeypatch):
    """``{name: count}`` of the calls of each name lookup while the test runs."""
    counts = collections.Counter()

    def counting(name, original):
        def wrapper(*args, **kwargs):
            counts[name] += 1
            return original(*args, **kwargs)
        return wrapper

    wrappers = {name: counting(name, f) for name, f in LOOKUPS.items()}
    for module in [m for n, m in list(sys.modules.items()) if n.startswith("tinymem") and m is not None]:
        for attribute, value in list(vars(module).items()):
            for name, original in LOOKUPS.items():
                if value is original:
                    monkeypatch.setattr(module, attribute, wrappers[name])
    return counts


def weighed(arch, gpus, micro_batches=None):
    """The stacks plan_arch evaluates: the rows' that fit the model, and every candidate's."""
    arch = analytic.archs.get_arch(arch)
    rows = [s for _, s in fits.stacks(gpus, micro_batches)
            if s.pipeline <= arch.layers and fits.parallel.splits(arch, s.tensor)]
    others = [s for s in fits.candidates(gpus, micro_batches) + fits.layouts_3d(arch, gpus, micro_batches)
              if s.pipeline <= arch.layers]
    return len(rows) + len(others)


@pytest.mark.parametrize("arch, gpus", [("llama2-7b", 8), ("llama2-70b", 64), ("gpt2", 1)])
def test_plan_arch_resolves_each_stack_once(calls, arch, gpus):
    expected = weighed(arch, gpus)  # counted before the search runs: stacks() itself looks nothing up
    calls.clear()
    fits.plan_arch(arch, gpus, 80e9)
    names = dict(calls)
    assert names.pop("get_arch") <= 2  # plan_arch's door, and parallel.layouts's (an entry of its own)
    assert names == dict.fromkeys(("width", "offload_kind", "optimizer_label"), expected)


@pytest.mark.parametrize("stack", [Stack(), Stack("bf16", "Adam8bit", "full", zero=3, ranks=8, offload="zero-offload"),
                                   Stack("bf16-pure", recompute="sqrt", pipeline=4, micro_batches=8),
                                   Stack("fp16", "Adafactor", storage="int8", zero=2, ranks=4, offload=True)])
def test_one_breakdown_resolves_once(calls, stack):
    analytic.breakdown("llama2-7b", 8, stack)
    fits.run("llama2-7b", 1, stack, convention="deepspeed")  # the conventions' rows too
    assert dict(calls) == dict.fromkeys(LOOKUPS, 2)  # the model too: its name, once a call


def test_compare_resolves_once(calls):
    exactness.compare((50, 8, 16, 2, 2), 2, Stack("bf16", recompute="full", micro_batches=2))
    assert dict(calls) == dict.fromkeys(("width", "offload_kind", "optimizer_label"), 1)  # its model: built once
