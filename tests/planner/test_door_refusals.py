"""Bad inputs at the planner's door (``tinymem.planner.inputs.resolve`` and the entries that call
it) are refused with a message that names them, as before the door was built, and the numbers of
good inputs stay what they were: each test here failed on the first door (a hang, a raw
TypeError, a bad stack or device accepted, a sixth size read as the dropout)."""
import importlib
import threading

import pytest

from tinymem.planner import analytic, architectures, conventions, exactness, fits, moments
from tinymem.planner.inputs import Device, GPU, resolve

Stack = analytic.Stack
ARCH = "llama2-7b"
ZERO3 = Stack("bf16", recompute="full", zero=3)


@pytest.mark.parametrize("limit", [2.5, 0, -5, True])
def test_fewest_gpus_refuses_a_limit_that_is_not_a_whole_number(limit):
    # 2.5 bisected forever (mid = (1 + 2.5) // 2 = 1.0 again and again), 0 divided by zero, -5 said None
    with pytest.raises(ValueError, match="limit must be a positive integer"):
        fits.fewest_gpus(ARCH, 1, ZERO3, 80e9, limit=limit)


@pytest.mark.parametrize("memory", [float("nan"), -1, 0])
def test_fewest_gpus_refuses_a_memory_that_fits_nothing(memory):
    with pytest.raises(ValueError, match="gpu_memory is the bytes of one GPU"):
        fits.fewest_gpus(ARCH, 1, ZERO3, memory)


def test_fewest_gpus_reads_a_memory_size_as_plan_arch_does():
    assert fits.fewest_gpus(ARCH, 1, ZERO3, "80GB") == fits.fewest_gpus(ARCH, 1, ZERO3, 80e9) == 2


def test_fewest_gpus_names_micro_batches_not_the_batch():
    pipe = Stack("bf16", recompute="full", pipeline=2, micro_batches=8)
    with pytest.raises(ValueError, match=r"^micro_batches must be a positive integer, got -1"):
        fits.fewest_gpus(ARCH, 1, pipe, 40e9, micro_batches=-1)


@pytest.mark.parametrize("call", [
    lambda: analytic.breakdown(ARCH, None, Stack()),
    lambda: fits.run(ARCH, None, Stack()),
    lambda: fits.plan_arch(ARCH, 8, 80e9, batch=None),
    lambda: exactness.predict((50, 8, 16, 2, 2), None, Stack()),
    lambda: moments.transient_bound(ARCH, 2.5, Stack()),
    lambda: fits.relative_time(ARCH, 0, Stack()),
    lambda: fits.relative_time(ARCH, -1, Stack()),
    lambda: fits.relative_time(ARCH, float("nan"), Stack()),
])
def test_a_batch_left_out_or_not_whole_is_refused_by_name(call):
    # None skipped the door's check (a raw '<=' TypeError); relative_time divided by zero or gave 1.0
    with pytest.raises(ValueError, match="batch must be a positive integer"):
        call()


def test_fits_run_names_the_batch_it_was_given():
    with pytest.raises(ValueError, match=r"got 0\.5$"):  # was "got 1.0", the batch times the micro-batches
        fits.run(ARCH, 0.5, Stack(micro_batches=2))


@pytest.mark.parametrize("gpus", ["8", None, 2.5])
def test_plan_arch_refuses_gpus_that_are_not_a_whole_number(gpus):
    with pytest.raises(ValueError, match="--gpus must be a whole number >= 1"):
        fits.plan_arch(ARCH, gpus, 80e9)


@pytest.mark.parametrize("call", [
    lambda s: fits.refusal(s),
    lambda s: moments.transient_bound(ARCH, 4, s),
    lambda s: conventions.rows(ARCH, s),
    lambda s: analytic.breakdown(ARCH, 4, s),
])
def test_an_unknown_storage_is_refused_at_the_door(call):
    # refusal said None (tinymem builds it) and transient_bound counted "int4" as the precision's
    with pytest.raises(ValueError, match="unknown storage 'int4'"):
        call(Stack(storage="int4", micro_batches=2))


def test_an_unknown_attention_is_refused_at_the_door():
    with pytest.raises(ValueError, match="unknown attention 'flash'"):
        fits.refusal(Stack(attention="flash"))


@pytest.mark.parametrize("call", [
    lambda s: moments.transient_bound(ARCH, 1, s),
    lambda s: conventions.rows(ARCH, s),
    lambda s: fits.relative_time(ARCH, 1, s),
])
def test_a_stack_that_does_not_split_the_model_is_refused_by_every_entry(call):
    with pytest.raises(ValueError, match="pipeline stages for 32 layers"):
        call(Stack(pipeline=100, micro_batches=1))
    with pytest.raises(ValueError, match="tensor-parallel ranks do not split"):
        call(Stack(tensor=3))


def test_a_precision_of_the_wrong_type_is_refused_by_name():
    with pytest.raises(ValueError, match=r"unknown precision \['bf16'\]"):  # was "unhashable type: 'list'"
        analytic.breakdown(ARCH, 1, Stack(["bf16"]))


@pytest.mark.parametrize("kwargs, field", [({"backend": "cpu"}, "compute"), ({"backend": None}, "compute"),
                                           ({"backend": "numpy", "chunks": "tpu"}, "chunks"),
                                           ({"fused_update": "yes"}, "fused_update")])
def test_breakdown_refuses_a_device_it_does_not_model(kwargs, field):
    # "cpu" was computed as a GPU computes, silently
    with pytest.raises(ValueError, match=field):
        analytic.breakdown(ARCH, 1, Stack("bf16"), **kwargs)


def test_transient_bound_refuses_a_backend_it_does_not_model():
    with pytest.raises(ValueError, match="compute"):
        moments.transient_bound(ARCH, 1, Stack("bf16"), backend="cpu")


def test_resolve_refuses_an_inconsistent_device_and_keeps_a_good_one():
    with pytest.raises(ValueError, match="compute"):
        resolve(Stack(), on=Device("tpu", "gpu", False))
    with pytest.raises(TypeError, match="Device"):
        resolve(Stack(), on="gpu")
    assert resolve(Stack("bf16"), on=Device("numpy", "gpu", True)).compute == 4
    assert resolve(Stack("bf16"), on=GPU).compute == 2


@pytest.mark.parametrize("sizes", [(50, 8, 16, 2), (50, 8, 16, 2, 2, 9), "50,8,16,2,2", None])
def test_exactness_refuses_sizes_that_are_not_five(sizes):
    # a sixth value was predicted as the dropout (p = 9); four, or a string, raised TypeError
    for call in (exactness.predict, exactness.compare, exactness.measure):
        with pytest.raises(ValueError, match=r"sizes are \(vocab, seq, hidden, heads, layers\)"):
            call(sizes, 2, Stack())


def test_exactness_measure_refuses_a_batch_by_name():
    with pytest.raises(ValueError, match="batch must be a positive integer, got 0"):  # blamed micro_batches
        exactness.measure((50, 8, 16, 2, 2), 0, Stack())


def test_a_refused_call_leaves_the_next_one_unchanged():
    good = Stack("bf16", "Adam8bit", "full", zero=3, ranks=8)
    before = analytic.breakdown(ARCH, 2, good)
    for bad in (Stack(storage="int4"), Stack(zero=5), Stack("bf8"), Stack(ranks=0)):
        with pytest.raises(ValueError):
            analytic.breakdown(ARCH, 2, bad)
    after = analytic.breakdown(ARCH, 2, good)
    assert (after.peak, after.buckets, after.host) == (before.peak, before.buckets, before.host)


def test_two_threads_plan_as_one_does():
    stacks = [Stack("bf16", "Adam8bit", "full", zero=3, ranks=8, offload="zero-offload"),
              Stack("fp32", "Adafactor", "sqrt", storage="int8", zero=1, ranks=4, pipeline=4, micro_batches=4)]
    serial = [analytic.breakdown(ARCH, 4, s).buckets for s in stacks]
    results = [None, None]

    def work(i):
        results[i] = [analytic.breakdown(ARCH, 4, stacks[i]).buckets for _ in range(20)]

    threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(r == serial[i] for i in range(2) for r in results[i])


@pytest.mark.parametrize("path, name", [("tinymem.planner.analytic", "Stack"), ("tinymem.planner.recipe", "Combination"),
                                        ("tinymem.planner.fits", "PIPELINES"), ("tinymem.planner.states", "model_states"),
                                        ("tinymem.planner.sharding", "scratch_bytes"), ("tinymem.planner.plan",
                                                                                        "micro_batch_counts"),
                                        ("tinymem.planner.moments", "packing_bytes"), ("tinymem.planner.probe", "SIZES"),
                                        ("tinymem.planner.stack", "waterfall"), ("tinymem.planner.architectures",
                                                                                 "get_arch"),
                                        ("tinymem.planner.verify", "measure_step")])
def test_the_flat_layouts_dotted_imports_still_work(path, name):
    # lessons, scripts and students wrote "from tinymem.planner.analytic import Stack" (11 files before the move)
    module = importlib.import_module(path)
    assert module.__name__.startswith("tinymem.planner.") and hasattr(module, name)


def test_a_resolved_stack_given_to_an_entry_and_a_stack_given_below_the_door_are_named():
    resolved = resolve(Stack("bf16"))
    with pytest.raises(TypeError, match="resolved already"):  # was "got a Resolved", with no way out
        analytic.breakdown(ARCH, 1, resolved)
    with pytest.raises(TypeError, match="call breakdown"):  # was "'Stack' object has no attribute 'width'"
        analytic.evaluate(architectures.get_arch(ARCH), 1, Stack("bf16"))
    arch = architectures.get_arch(ARCH)
    again = analytic.evaluate(arch, 1, resolve(Stack("bf16"), arch, 1))
    assert again.peak == analytic.breakdown(ARCH, 1, Stack("bf16")).peak


@pytest.mark.parametrize("parameters, match", [((-5, {(5,): 1}), "parameter count"), ((10,), "parameters is"),
                                               ((10, {(5, -1): 2}), "parameter shape"), ([10, {(10,): 1}], "parameters is")])
def test_conventions_rows_refuses_parameters_that_are_not_a_count_and_shapes(parameters, match):
    with pytest.raises(ValueError, match=match):  # -5 gave negative bytes; (10,) "not enough values to unpack"
        conventions.rows(ARCH, Stack("bf16", zero=3, ranks=8), parameters=parameters)
    good = conventions.rows(ARCH, Stack("bf16", zero=3, ranks=8), parameters=(10, {(10,): 1}))
    assert sum(conventions.row_bytes(r) for r in good if r.count == 10) > 0
