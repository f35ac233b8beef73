"""The three conventions of :mod:`tinymem.planner.conventions` against their sources.

DeepSpeed's estimators are re-stated here from their source (``estimate_zero2_model_states_
mem_needs`` in ``deepspeed/runtime/zero/stage_1_and_2.py`` and ``estimate_zero3_model_states_
mem_needs`` in ``stage3.py``, DeepSpeed v0.19.6, commit edaa7221267243c7be7fb49c5d5f5c4fb97b4641:
both their numbers, every branch), independently of the planner's term rows; the ZeRO paper's
numbers are its Figure 1."""
import pytest

from tinymem import cli
from tinymem.planner import analytic, architectures, conventions
from tinymem.planner.terms.analytic import Stack

MODELS = ["gpt3-1.3b", "gpt3-2.7b", "llama2-7b", "gpt3-13b", "llama2-70b", "gpt3-175b"]
GPUS = [1, 2, 8, 16, 64]


def deepspeed_zero2(total_params, num_gpus_per_node=1, num_nodes=1, cpu_offload=True, additional_buffer_factor=1.5):
    total_gpus = num_nodes * num_gpus_per_node
    if cpu_offload:
        gpu_mem = 2 * total_params
        cpu_mem = total_params * max(4 * total_gpus, 16) * additional_buffer_factor
    else:
        gpu_mem = 2 * total_params + int(18 * total_params / total_gpus)
        cpu_mem = total_params * 4 * num_gpus_per_node * additional_buffer_factor
    return int(cpu_mem), int(gpu_mem)


def deepspeed_zero3(total_params, largest_layer_params, num_gpus_per_node=1, num_nodes=1, cpu_offload=True,
                    cpu_offload_params=True, zero_init=True, additional_buffer_factor=1.5):
    total_gpus = num_nodes * num_gpus_per_node
    gpus_factor = 1 / num_nodes
    largest_layer_memory = (4 * largest_layer_params)
    if cpu_offload:
        if cpu_offload_params:
            gpu_mem = largest_layer_memory
            if zero_init:
                cpu_mem = total_params * 18 * gpus_factor * additional_buffer_factor
            else:
                cpu_mem = total_params * max(4 * num_gpus_per_node, 18 * gpus_factor) * additional_buffer_factor
        else:
            gpu_mem = largest_layer_memory + int(2 * total_params / total_gpus)
            if zero_init:
                cpu_mem = total_params * 16 * gpus_factor * additional_buffer_factor
            else:
                cpu_mem = total_params * max(4 * num_gpus_per_node, 16 * gpus_factor) * additional_buffer_factor
    else:
        gpu_mem = largest_layer_memory + int(18 * total_params / total_gpus)
        if zero_init:
            cpu_mem = largest_layer_params * 4 * num_gpus_per_node * additional_buffer_factor
        else:
            cpu_mem = total_params * 4 * num_gpus_per_node * additional_buffer_factor
    return int(cpu_mem), int(gpu_mem)


def deepspeed_zero2_gpu(total_params, total_gpus, cpu_offload):
    return deepspeed_zero2(total_params, total_gpus, 1, cpu_offload)[1]


def deepspeed_zero3_gpu(total_params, largest_layer_params, total_gpus, cpu_offload, cpu_offload_params):
    return deepspeed_zero3(total_params, largest_layer_params, total_gpus, 1, cpu_offload, cpu_offload_params)[1]


def ours(arch, zero, gpus, offload):
    table = conventions.rows(arch, Stack("bf16", "Adam", zero=zero, ranks=gpus, offload=offload), "deepspeed")
    return conventions.device_bytes(table)


@pytest.mark.parametrize("name", MODELS)
def test_deepspeed_convention_equals_its_estimators(name):
    arch = architectures.get_arch(name)
    n, big = architectures.parameter_count(arch), architectures.largest_module(arch)
    assert 1.3e9 < n < 1.8e11
    for gpus in GPUS:
        for offload in (False, "zero-offload"):
            assert ours(arch, 2, gpus, offload) == pytest.approx(
                deepspeed_zero2_gpu(n, gpus, bool(offload)), rel=1e-3), (gpus, offload)
            assert ours(arch, 3, gpus, offload) == pytest.approx(
                deepspeed_zero3_gpu(n, big, gpus, bool(offload), False), rel=1e-3), (gpus, offload)
        assert ours(arch, 3, gpus, "zero-offload-params") == pytest.approx(
            deepspeed_zero3_gpu(n, big, gpus, True, True), rel=1e-3)
        # ZeRO-1 shards no gradient: the half gradients whole, the rest 16/N (the ZeRO-2
        # estimator's formula before DeepSpeed PR #5099)
        assert ours(arch, 1, gpus, False) == pytest.approx(4 * n + 16 * n / gpus, rel=1e-3)
        assert ours(arch, 1, gpus, "zero-offload") == pytest.approx(2 * n, rel=1e-3)


def test_deepspeed_zero2_estimate_follows_pr_5099_llama2_7b_on_64_gpus():
    # 2n + 18n/N (half weights whole, half gradients sharded with the rest): 15.37 GB; the
    # pre-2024 formula 4n + 16n/N gave 28.64 GB
    arch = architectures.get_arch("llama2-7b")
    assert ours(arch, 2, 64, False) / 1e9 == pytest.approx(15.37, abs=0.01)


@pytest.mark.parametrize("nodes,per_node", [(1, 1), (1, 4), (1, 8), (2, 8), (4, 16)])
@pytest.mark.parametrize("factor", [1.0, 1.5, 2.0])
def test_deepspeed_estimate_reproduces_every_branch_of_both_estimators(nodes, per_node, factor):
    n, big = 6_738_415_616, 262_144_000
    for offload in (False, True):
        assert conventions.deepspeed_estimate(2, n, big, per_node, nodes, offload,
                                              additional_buffer_factor=factor) == pytest.approx(
            deepspeed_zero2(n, per_node, nodes, offload, factor), rel=1e-9)
        for params in (False, True):
            for zero_init in (False, True):
                assert conventions.deepspeed_estimate(3, n, big, per_node, nodes, offload, params, zero_init,
                                                      factor) == pytest.approx(
                    deepspeed_zero3(n, big, per_node, nodes, offload, params, zero_init, factor), rel=1e-9)


@pytest.mark.parametrize("gpus", [1, 2, 4, 8])
def test_deepspeed_host_rows_are_its_offloaded_cpu_estimate_without_the_buffer_factor(gpus):
    # one node: DeepSpeed's CPU number is the node's offloaded states times 1.5 (ZeRO-2: when
    # they outweigh the fp32 model each of the GPUs' processes loads, 4 bytes a parameter)
    arch = architectures.get_arch("llama2-7b")
    n, big = architectures.parameter_count(arch), architectures.largest_module(arch)
    for zero, offload, params in ((3, "zero-offload", False), (3, "zero-offload-params", True), (2, "zero-offload", False)):
        table = conventions.rows(arch, Stack("bf16", "Adam", zero=zero, ranks=gpus, offload=offload), "deepspeed")
        host = conventions.totals(table)["host"] * gpus * 1.5
        cpu = conventions.deepspeed_estimate(zero, n, big, gpus, 1, True, params)[0]
        if zero == 3 or gpus <= 4:
            assert host == pytest.approx(cpu, rel=1e-6), (zero, offload)
        else:
            assert cpu == pytest.approx(4 * n * gpus * 1.5, rel=1e-9) and host < cpu


def test_deepspeed_convention_counts_no_fp32_masters_for_pure_bf16():
    arch = architectures.get_arch("llama2-7b")
    n = architectures.parameter_count(arch)
    for zero in (0, 1, 2, 3):
        mixed, pure = (conventions.device_bytes(conventions.rows(arch, Stack(p, "Adam", zero=zero, ranks=8), "deepspeed"))
                       for p in ("bf16", "bf16-pure"))
        # the masters (4) and fp32 gradients (4) go, and Adam's m and v are bf16 (8 -> 4)
        assert mixed - pure == pytest.approx(12 * n / (8 if zero else 1), rel=1e-6), zero


def test_zero_paper_convention_reproduces_its_figure_for_7_5b_on_64_gpus():
    arch = architectures.get_arch("llama2-7b")  # the shapes do not matter to Adam's count
    n = 7_500_000_000
    gb = [conventions.device_bytes(conventions.rows(arch, Stack("bf16", zero=z, ranks=64), "zero-paper", (n, n))) / 1e9
          for z in range(4)]
    assert [round(x, 1) for x in gb] == [120.0, 31.4, 16.6, 1.9]


@pytest.mark.parametrize("stack", [Stack("bf16", zero=1, ranks=8), Stack("bf16", recompute="full", zero=3, ranks=64),
                                   Stack("fp32", zero=2, ranks=4), Stack("bf16-pure", "Adam8bit", zero=0)])
def test_tinymem_rows_add_up_to_the_breakdowns_model_state_buckets(stack):
    arch = architectures.get_arch("llama2-7b")
    result = analytic.breakdown(arch, 1, stack)
    totals = conventions.totals(conventions.rows(arch, stack, "tinymem"))
    assert totals["parameter"] == pytest.approx(result.buckets["parameter"], rel=1e-12)
    assert totals["optimizer"] == pytest.approx(result.buckets["optimizer"], rel=1e-12)
    assert totals["gradient"] == pytest.approx(result.buckets["gradient"], rel=1e-12)


def test_a_convention_changes_the_plan_and_explain_shows_every_term(capsys):
    args = ["plan", "--arch", "llama2-70b", "--gpus", "64", "--gpu-memory", "80GB", "--explain"]
    assert cli.main(args) == 0
    out = capsys.readouterr().out
    for term in ("weights", "gradients", "fp32 masters", "Adam state", "fp32 master gradients",
                 "activations", "deepspeed", "zero-paper"):
        assert term in out, term
    assert cli.main(args + ["--convention", "deepspeed"]) == 0
    deepspeed = capsys.readouterr().out
    assert "fp32 gradients" in deepspeed and "convention deepspeed" in deepspeed


def test_deepspeed_estimate_is_byte_exact_on_random_shapes_and_nodes():
    # DeepSpeed's stage-3 CPU estimate multiplies n * 18 * (1 / nodes); n * (18 / nodes) rounds
    # differently and int() then gained or dropped a byte (n=77509654458, 107 nodes: 1 B off)
    import random
    rng = random.Random(0)
    for _ in range(3000):
        n, per_node, nodes = rng.randint(1, 10 ** 12), rng.randint(1, 64), rng.randint(1, 512)
        big, factor = rng.randint(0, n), rng.choice([1.0, 1.25, 1.5, 2.0])
        for offload in (False, True):
            assert conventions.deepspeed_estimate(2, n, big, per_node, nodes, offload,
                                                  additional_buffer_factor=factor) == \
                deepspeed_zero2(n, per_node, nodes, offload, factor)
            for params in (False, True):
                for zero_init in (False, True):
                    assert conventions.deepspeed_estimate(3, n, big, per_node, nodes, offload, params, zero_init,
                                                          factor) == \
                        deepspeed_zero3(n, big, per_node, nodes, offload, params, zero_init, factor), \
                        (n, big, per_node, nodes, offload, params, zero_init, factor)


@pytest.mark.parametrize("precision,per_parameter",
                         [("bf16", 2 + 2 + 12), ("fp32", 4 + 4 + 8), ("bf16-pure", 2 + 2 + 4)])
def test_zero_paper_counts_fp32_masters_only_where_the_precision_keeps_them(precision, per_parameter):
    # K = 12 is mixed precision's (masters 4 + Adam 8): fp32 and pure bf16 have no master copy
    # (pure bf16 + Adam counted 2 + 2 + 4 + 4, above the 8 B/param tinymem holds for it)
    arch = architectures.get_arch("llama2-7b")
    n = architectures.parameter_count(arch)
    table = conventions.rows(arch, Stack(precision, "Adam"), "zero-paper")
    assert conventions.device_bytes(table) == pytest.approx(per_parameter * n, rel=1e-6)
    tinymem = conventions.device_bytes(conventions.rows(arch, Stack(precision, "Adam"), "tinymem"))
    assert conventions.device_bytes(table) <= tinymem


@pytest.mark.parametrize("args,kwargs", [
    ((2, 10 ** 9, 0, 0), {}), ((3, 10 ** 9, 10, 8, 0), {}), ((2, -5, 0, 8), {}), ((3, 10 ** 9, -1, 8), {}),
    ((2, 2.5, 0, 8), {}), ((2, float("nan"), 0, 8), {}), ((2, 100, 0, True), {}),
    ((2, 100, 0, 8), {"additional_buffer_factor": -1}), ((3, 100, 0, 8), {"additional_buffer_factor": float("nan")})])
def test_deepspeed_estimate_refuses_counts_that_are_not_whole_and_in_range(args, kwargs):
    # 0 GPUs raised ZeroDivisionError; -5 parameters gave (-240, -21) bytes; a factor of -1, -3200 B
    with pytest.raises(ValueError, match="must be a whole number|allowance"):
        conventions.deepspeed_estimate(*args, **kwargs)


@pytest.mark.parametrize("memory", [float("nan"), -1, 0, float("inf"), None, True, "0GB", "lots"])
def test_plan_arch_refuses_a_memory_that_is_not_a_positive_size(memory):
    # NaN and -1 fitted nothing, silently (no proposal); "80GB" raised a raw TypeError
    from tinymem.planner import fits
    with pytest.raises(ValueError, match="gpu_memory is the bytes of one GPU"):
        fits.plan_arch("gpt2", 8, memory)


def test_plan_arch_reads_a_size_and_refuses_zero_micro_batches():
    from tinymem.planner import fits
    assert fits.plan_arch("gpt2", 8, "80GB")[1] == fits.plan_arch("gpt2", 8, 80e9)[1]
    with pytest.raises(ValueError, match="micro_batches"):  # 0 was taken for "not given": 4 per stage
        fits.plan_arch("gpt2", 8, 80e9, micro_batches=0)
