"""The three conventions of :mod:`tinymem.planner.conventions` against their sources.

DeepSpeed's estimators are re-stated here from their source (``estimate_zero2_model_states_
mem_needs`` in ``deepspeed/runtime/zero/stage_1_and_2.py`` and ``estimate_zero3_model_states_
mem_needs`` in ``stage3.py``: their GPU bytes), independently of the planner's term rows; the
ZeRO paper's numbers are its Figure 1."""
import pytest

from tinymem import cli
from tinymem.planner import analytic, architectures, conventions
from tinymem.planner.analytic import Stack

MODELS = ["gpt3-1.3b", "gpt3-2.7b", "llama2-7b", "gpt3-13b", "llama2-70b", "gpt3-175b"]
GPUS = [1, 2, 8, 16, 64]


def deepspeed_zero2_gpu(total_params, total_gpus, cpu_offload):
    if cpu_offload:
        return 2 * total_params
    return 4 * total_params + int(16 * total_params / total_gpus)


def deepspeed_zero3_gpu(total_params, largest_layer_params, total_gpus, cpu_offload, cpu_offload_params):
    largest_layer_memory = 4 * largest_layer_params
    if cpu_offload and cpu_offload_params:
        return largest_layer_memory
    if cpu_offload:
        return largest_layer_memory + int(2 * total_params / total_gpus)
    return largest_layer_memory + int(18 * total_params / total_gpus)


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
            for stage in (1, 2):
                assert ours(arch, stage, gpus, offload) == pytest.approx(
                    deepspeed_zero2_gpu(n, gpus, bool(offload)), rel=1e-3), (stage, gpus, offload)
            assert ours(arch, 3, gpus, offload) == pytest.approx(
                deepspeed_zero3_gpu(n, big, gpus, bool(offload), False), rel=1e-3), (gpus, offload)
        assert ours(arch, 3, gpus, "zero-offload-params") == pytest.approx(
            deepspeed_zero3_gpu(n, big, gpus, True, True), rel=1e-3)


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
