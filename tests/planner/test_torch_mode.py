"""The torch mode's named terms, each by itself (arithmetic only, no PyTorch here: the
measured comparison is tests/measure/test_torch_mode.py)."""
import pytest

from tinymem import cli
from tinymem.planner.inputs import TorchOptions, parse_torch, resolve_torch
from tinymem.planner.model.architectures import LLAMA, custom, get_arch, parameter_count
from tinymem.planner.terms import analytic, torch_step

GPT = custom(2, 48, 4, 20, 100, tied=True)  # N = 2·20 = 40 tokens at batch 2


def named(result, moment, name):
    """Bytes of the tensors called ``name`` alive at ``moment``'s largest total."""
    return sum(t.bytes for _, t in result.moment_terms[moment] if t.name.split(" (x")[0] == name)


@pytest.mark.parametrize("held", [True, False])
def test_the_cross_entropy_moment_is_12_NV_bytes_and_4_NV_more_with_held_logits(held):
    result = torch_step.breakdown(GPT, 2, TorchOptions(hold_logits=held))
    NV = 40 * 100
    loss = sum(named(result, "loss backward", n) for n in
               ("log_softmax output", "dlogp (nll_loss backward)", "dlogits (log_softmax backward)"))
    assert loss == 12 * NV
    assert named(result, "loss backward", "logits (held by the caller)") == (4 * NV if held else 0)
    assert named(result, "optimizer step", "logits (held by the caller)") == (4 * NV if held else 0)


def test_adamw_temporaries_follow_the_implementation():
    sizes = torch_step.parameter_sizes(GPT)
    n = sum(sizes)
    assert n == parameter_count(GPT)
    temps = {}
    for impl in ("for-loop", "foreach", "fused"):
        result = torch_step.breakdown(GPT, 2, TorchOptions(optimizer=impl, hold_logits=False))
        temps[impl] = result.moments["optimizer step"]["temporary"]
        assert result.moments["optimizer step"]["gradient"] == 4 * n
    assert temps["foreach"] == 4 * n  # _foreach_sqrt of every parameter
    assert temps["fused"] == 0
    # sqrt and denominator of one parameter beside the previous parameter's denominator
    assert temps["for-loop"] == max(8 * b + 4 * a for a, b in zip([0] + sizes, sizes))


def test_a_tied_table_adds_its_two_gradients_out_of_place():
    tied = torch_step.breakdown(GPT, 2, TorchOptions(optimizer="fused", hold_logits=False))
    untied = torch_step.breakdown(GPT._replace(tied=False, bias=False), 2, TorchOptions(optimizer="fused",
                                                                                         hold_logits=False))
    Vh = 4 * 100 * 48
    end = {n: named(tied, "end of backward", n) for n in
           ("head weight gradients", "token table gradient (dense)",
            "tied table: head + embedding gradients, added out of place")}
    assert list(end.values()) == [Vh, Vh, Vh]
    assert named(untied, "end of backward", "token table gradient (dense)") == Vh
    assert named(untied, "end of backward", "tied table: head + embedding gradients, added out of place") == 0
    # the addends wait in flight, the sum is the engine's until AccumulateGrad makes it the .grad
    assert tied.moments["end of backward"]["in_flight"] >= 2 * Vh
    assert tied.moments["optimizer step"]["gradient"] == 4 * sum(torch_step.parameter_sizes(GPT))


def test_cpu_dropout_saves_float_noise_and_cuda_a_bool_mask():
    drop = GPT._replace(dropout=0.1)
    N, h, a, s, L = 40, 48, 4, 20, 2
    elements = N * h + L * (a * 2 * s * s + 2 * N * h)  # embedding, then attention weights, two residuals
    cpu = torch_step.breakdown(drop, 2, TorchOptions())
    assert named(cpu, "forward", "dropout noise (float, CPU)") == 4 * elements
    cuda = torch_step.breakdown(drop, 2, TorchOptions(device="cuda"))
    assert not cuda.measured and cpu.measured
    masks = [t.bytes for _, t in cuda.moment_terms["forward"] if t.name.startswith("dropout mask (bool, CUDA)")]
    # one byte per element, each mask rounded up to the caching allocator's 512 B
    assert sum(masks) == sum(-(-n // 512) * 512 for n in [N * h] + L * [a * 2 * s * s, N * h, N * h])


def test_autocast_saves_bf16_casts_and_the_loss_reads_fp32_logits():
    result = torch_step.breakdown(GPT, 2, TorchOptions(precision="bf16-autocast"))
    N, h, V, L = 40, 48, 100, 2
    loss = result.moment_terms["loss backward"]
    assert named(result, "loss backward", "logits (held by the caller)") == 2 * N * V  # bf16, as the caller holds them
    assert named(result, "loss backward", "log_softmax output") == 4 * N * V
    weights = sum(t.bytes for _, t in loss if t.name.startswith("weight cast to bf16"))
    assert weights == 2 * (L * (3 * h * h + h * h + 2 * 4 * h * h) + V * h)  # every Linear's weight, saved
    inputs = sum(t.bytes for _, t in loss if t.name.startswith("input cast to bf16"))
    assert inputs == 2 * N * h * (2 * L + 1)  # the inputs of c_attn, c_fc and the head: the norms' outputs


def test_autocast_sdpa_saves_the_bf16_casts_of_the_rotated_q_and_k():
    llama = custom(2, 48, 4, 20, 100, ffn=72, **LLAMA)
    result = torch_step.breakdown(llama, 2, TorchOptions(precision="bf16-autocast", attention="sdpa"))
    N, h, L = 40, 48, 2
    assert named(result, "loss backward", "rotated q or k cast to bf16") == L * 2 * 2 * N * h
    assert named(result, "loss backward", "rotary q or k (fp32)") == 0  # let go once cast
    fp32 = torch_step.breakdown(llama, 2, TorchOptions(attention="sdpa"))
    assert named(fp32, "loss backward", "rotary q or k") == L * 2 * 4 * N * h  # saved as they are


def test_the_buckets_at_the_peak_add_up_to_it_and_name_their_moment():
    for arch, options in ((GPT, TorchOptions()), (custom(3, 64, 4, 32, 32, ffn=96, **LLAMA), TorchOptions(
            attention="sdpa", checkpoint=True, optimizer="foreach"))):
        result = torch_step.breakdown(arch, 4, options)
        assert sum(result.buckets.values()) == result.peak == sum(t.bytes for _, t in result.terms)
        assert result.buckets == result.moments[result.moment]


def test_the_options_are_refused_at_the_door_naming_the_field():
    with pytest.raises(ValueError, match="TorchOptions.optimizer"):
        torch_step.breakdown(GPT, 2, TorchOptions(optimizer="sgd"))
    with pytest.raises(ValueError, match="TorchOptions.hold_logits"):
        torch_step.breakdown(GPT, 2, TorchOptions(hold_logits="yes"))
    with pytest.raises(ValueError, match="SDPA with dropout under bf16 autocast"):
        torch_step.breakdown(GPT._replace(dropout=0.1), 2, TorchOptions(attention="sdpa", precision="bf16-autocast"))
    with pytest.raises(ValueError, match="grouped-query"):
        torch_step.breakdown("llama2-70b", 1)
    with pytest.raises(ValueError, match="batch"):
        torch_step.breakdown(GPT, 0)
    with pytest.raises(ValueError, match="unknown word 'adam'"):
        parse_torch("sdpa,adam")
    assert parse_torch("fused, sdpa,no-hold-logits,cuda") == TorchOptions("fused", False, "sdpa", device="cuda")
    for words, message in (("foreach,fused", "'foreach' and 'fused' both set the optimizer"),
                           ("sdpa,math", "'sdpa' and 'math' both set the attention"),
                           ("hold-logits,no-hold-logits", "'hold-logits' and 'no-hold-logits' both set the hold_logits")):
        with pytest.raises(ValueError, match=message):  # before, the last word won without a word
            parse_torch(words)
    assert parse_torch("foreach,foreach") == TorchOptions("foreach")  # said twice is said once
    assert resolve_torch(TorchOptions(), GPT, 1).optimizer == "for-loop"  # PyTorch's default on the CPU
    assert resolve_torch(TorchOptions(device="cuda"), GPT, 1).optimizer == "foreach"
    with pytest.raises(ValueError, match="mode='torch'"):
        analytic.breakdown(GPT, 2, mode="torch", backend="numpy")
    assert analytic.breakdown(GPT, 2, mode="torch").peak == torch_step.breakdown(GPT, 2).peak


def test_cli_mode_torch_prints_the_moments_and_the_peak_tensors(capsys):
    assert cli.main(["plan", "--arch", "gpt2", "--batch", "8", "--mode", "torch", "--torch", "sdpa"]) == 0
    out = capsys.readouterr().out
    peak = torch_step.breakdown(get_arch("gpt2"), 8, TorchOptions(attention="sdpa")).peak
    assert f"peak {peak / 1e6:.3f} MB at 'loss backward'" in out
    assert "dlogits (log_softmax backward)" in out
    assert cli.main(["plan", "--arch", "gpt2", "--mode", "torch", "--torch", "adam"]) == 2
    assert "unknown word 'adam'" in capsys.readouterr().err
    assert cli.main(["plan", "--arch", "gpt2", "--mode", "torch", "--gpus", "4"]) == 2


def test_the_torch_mode_imports_no_torch():
    import subprocess
    import sys

    code = ("import sys; from tinymem.planner.terms import analytic; from tinymem.planner.report import command; "
            "analytic.breakdown('gpt2', 1, mode='torch'); print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
