"""Properties of the closed form over random inputs (Hypothesis), its cost at any depth, and the
clear errors bad sizes get.

For any decoder shape and any stack: no bucket, peak or host total is negative; the peak does
not fall when the micro-batch, the sequence or the number of layers grows. (A bucket alone may
fall with depth: with ``recompute="sqrt"`` checkpoint_sequential cuts 11 layers into 4
segments of 2 and a plain last segment of 5, and 12 layers into 4 of 3 with a last of 3, so 12
layers keep fewer activations than 11; in a narrow enough model the peak falls with them, so
depth is not grown under sqrt segments.)
"""
import sys

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from tinymem.planner import activations, analytic, architectures, fits
from tinymem.planner.terms.analytic import Stack
from tinymem.planner.terms.moments import micro_batch_extremes, micro_batch_sizes

BUCKETS = ("parameter", "gradient", "optimizer", "activation", "workspace")


@st.composite
def shapes(draw):
    heads = draw(st.sampled_from([1, 2, 4, 8]))
    kv = draw(st.sampled_from([k for k in (1, 2, 4, 8) if heads % k == 0]))
    experts = draw(st.sampled_from([1, 1, 4]))
    return dict(layers=draw(st.integers(1, 40)), hidden=heads * draw(st.integers(1, 32)), heads=heads,
                seq=draw(st.integers(1, 64)), vocab=draw(st.integers(1, 500)), kv_heads=kv,
                mlp=draw(st.sampled_from(["gelu", "swiglu"])), experts=experts,
                top_k=draw(st.integers(1, experts)))


@st.composite
def stacks(draw):
    ranks = draw(st.integers(1, 64))
    return Stack(draw(st.sampled_from(["fp32", "bf16", "fp16", "bf16-pure"])),
                 draw(st.sampled_from(["Adam", "SGD", "Adam8bit", "Adafactor"])),
                 draw(st.sampled_from(["none", "selective", "full", "sqrt"])),
                 storage=draw(st.sampled_from([None, "int8"])), zero=draw(st.integers(0, 3)), ranks=ranks,
                 offload=draw(st.sampled_from([False, "optimizer", "zero-offload"])))


def arch_of(sizes, **change):
    sizes = dict(sizes, **change)
    norm = "rmsnorm" if sizes["mlp"] == "swiglu" else "layernorm"
    return architectures.custom(sizes.pop("layers"), sizes.pop("hidden"), sizes.pop("heads"), sizes.pop("seq"),
                                sizes.pop("vocab"), norm=norm, **sizes)


@settings(max_examples=150, deadline=None)
@given(shapes(), stacks(), st.integers(1, 8))
def test_no_bucket_peak_or_host_total_is_negative(sizes, stack, batch):
    result = analytic.breakdown(arch_of(sizes), batch, stack)
    assert all(result.buckets[b] >= 0 for b in BUCKETS), result.buckets
    assert result.peak >= 0 and result.host >= 0
    assert all(v >= 0 for moment in result.moments.values() for v in moment.values())


@settings(max_examples=150, deadline=None)
@given(shapes(), stacks(), st.integers(1, 8), st.sampled_from(["batch", "seq", "layers"]))
def test_the_peak_does_not_fall_when_batch_seq_or_layers_grow(sizes, stack, batch, grow):
    # sqrt segments are cut afresh at each depth (see the module docstring): Hypothesis found
    # 15 -> 16 layers of width 1 where the activations fall by more than the weights grow.
    assume(not (grow == "layers" and stack.recompute == "sqrt"))
    arch = arch_of(sizes)
    smaller = analytic.breakdown(arch, batch, stack).peak
    if grow == "batch":
        larger = analytic.breakdown(arch, batch + 1, stack).peak
    else:
        larger = analytic.breakdown(arch_of(sizes, **{grow: sizes[grow] + 1}), batch, stack).peak
    assert larger >= smaller


def count_calls(fn):
    """Python and C function calls made by ``fn()``: the work, counted exactly, not timed."""
    calls = 0

    def profile(frame, event, arg):
        nonlocal calls
        calls += event in ("call", "c_call")

    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return calls


@pytest.mark.parametrize("stack", [Stack("bf16", recompute="full", zero=3, ranks=64),
                                   Stack(optimizer="Adafactor", recompute="sqrt", micro_batches=2),
                                   Stack("bf16", recompute="full", pipeline=8, micro_batches=8)])
def test_the_closed_form_costs_the_same_at_ten_and_a_million_layers(stack):
    """A 100k-layer plan took 95 s when every estimate walked every layer."""
    def run(layers):
        arch = architectures.custom(layers, 256, 8, 128, 1000)
        architectures.shape_counts.cache_clear()
        return count_calls(lambda: analytic.breakdown(arch, 8, stack))

    assert run(10) == run(10 ** 6)
    deep, one = (architectures.custom(n, 256, 8, 128, 1000) for n in (10 ** 6, 1))
    outer = architectures.parameter_count(one) - architectures.layer_parameter_count(one)
    assert architectures.parameter_count(deep) == outer + 10 ** 6 * architectures.layer_parameter_count(one)


def test_a_million_layer_plan_costs_about_what_a_ten_layer_plan_does():
    """The plan bisects the stages of its pipeline rows up to the depth: log2(10^6) = 20 steps
    against 4, so its work may grow by that, never by the depth (it did: 95 s at 10^5 layers)."""
    def work(layers):
        arch = architectures.custom(layers, 64, 4, 16, 100)
        answer = []
        calls = count_calls(lambda: answer.append(fits.plan_arch(arch, 8, 80e9)))
        return calls, answer[0]

    shallow, _ = work(10)
    deep, (rows, proposal) = work(10 ** 6)
    assert proposal is not None and len(rows) > 8
    assert deep < 2 * shallow, (deep, shallow)


@pytest.mark.parametrize("call,message", [
    (lambda: analytic.model_states(-100), "whole number >= 0, got -100"),
    (lambda: analytic.model_states(1000, 1, ranks=2.5), "ranks must be a positive integer, got 2.5"),
    (lambda: analytic.model_states(10.5), "whole number >= 0"),
    (lambda: activations.activations_per_layer(16, -1, 64, 4), "batch must be a positive integer, got -1"),
    (lambda: activations.activations_per_layer(16, 1, 64, 0), "heads must be a positive integer, got 0"),
    (lambda: activations.activations_per_layer(16, 1, 768, 7), "768 is not divisible by 7 heads"),
    (lambda: activations.activations_per_layer(16, 1, 2.7, 1), "hidden must be a positive integer, got 2.7"),
    (lambda: activations.activations_per_layer(0, 1, 64, 4), "seq must be a positive integer, got 0"),
    (lambda: activations.activations_per_layer(16, 1, 64, 4, kv_heads=3), "3 kv heads do not divide 4"),
    (lambda: activations.activations_per_layer(16, 1, 64, 4, experts=2, top_k=3), "cannot exceed the 2 experts"),
    (lambda: architectures.custom(2, 64, 4, 16, 100, kv_heads=3), "kv_heads must be a positive integer that divides"),
    (lambda: analytic.breakdown("gpt2", 1, Stack(offload="disk")), "unknown offload 'disk'"),
    (lambda: analytic.breakdown("gpt2", 1, Stack(precision="bf8")), "unknown precision 'bf8'"),
])
def test_bad_sizes_get_a_clear_error(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_micro_batch_extremes_are_the_split_s_without_the_list():
    """A million-stage pipeline feeds a million micro-batches: the closed form reads the first,
    the largest and the largest later size by formula; here against the list itself."""
    for batch in range(1, 160):
        for k in range(1, batch + 1):
            sizes = micro_batch_sizes(batch, k)
            assert micro_batch_extremes(batch, k) == (sizes[0], max(sizes), max(sizes[1:], default=0)), (batch, k)
