"""The planner's edges as a user with bad inputs meets them: each refused with one line that
says what was wrong, and the table's rows consistent with the summary under them."""
import pytest

from tinymem.planner import analytic


@pytest.mark.parametrize("params", [[(-3, 4)], {(3, -4): 2}, {(3, 4): -2}, [(2.5, 4)], -100])
def test_model_states_refuses_negative_or_fractional_sizes(params):
    with pytest.raises(ValueError, match="whole"):
        analytic.model_states(params)


@pytest.mark.parametrize("params", ["100", None, b"12"])
def test_model_states_refuses_a_string_or_none_for_the_parameters(params):
    # "100" was read as three shapes ('1',), ('0',), ('0',); None raised a raw TypeError
    with pytest.raises(ValueError, match="a parameter count, a list of shapes"):
        analytic.model_states(params)


@pytest.mark.parametrize("stage", [True, False, 1.5])
def test_model_states_refuses_a_stage_that_is_not_a_whole_number(stage):
    with pytest.raises(ValueError, match="ZeRO stage"):  # True was stage 1
        analytic.model_states(100, stage=stage, ranks=2)


def test_model_states_refuses_negative_flat_buffer_units():
    with pytest.raises(ValueError, match="units"):
        analytic.model_states(100, stage=1, ranks=2, units=[-3])
    assert analytic.model_states(100, stage=1, ranks=2, units=[4])["parameter"] == 8


# --- the command line: every flag its mode ignores is refused in one line ------------------

from tinymem import cli  # noqa: E402
from tinymem.planner import fits  # noqa: E402
from tinymem.planner.terms.analytic import Stack  # noqa: E402

PROBE = ["--model", "mlp", "--sizes", "4,8,2", "--batch", "4"]


def _refused(capsys, args, *words):
    assert cli.main(["plan"] + args) == 2
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert captured.out == "" and err.startswith("tinymem plan:") and "\n" not in err, captured
    assert "Traceback" not in err and "usage:" not in err
    for word in words:
        assert word in err, (word, err)


@pytest.mark.parametrize("args,flag", [
    (["--arch", "llama2-70b", "--inference", "--tensor-parallel", "8"], "--tensor-parallel"),
    (["--arch", "llama2-70b", "--inference", "--gpus", "4"], "--gpus"),
    (["--arch", "llama2-70b", "--inference", "--convention", "deepspeed"], "--convention"),
    (["--arch", "llama2-70b", "--inference", "--finetune"], "--finetune"),
    (["--arch", "llama2-70b", "--inference", "--micro-batches", "2"], "--micro-batches"),
    (["--arch", "llama2-7b", "--finetune", "--zero", "3"], "--zero"),
    (["--arch", "llama2-7b", "--recompute", "full"], "--recompute"),
    (["--arch", "llama2-7b", "--context", "100"], "--context"),
    (["--arch", "llama2-7b", "--weights", "int8"], "--weights"),
    (["--arch", "llama2-7b", "--kv-cache", "int8"], "--kv-cache"),
    (["--arch", "llama2-7b", "--budget", "1GB"], "--budget"),
    (["--arch", "llama2-7b", "--model", "mlp"], "--model"),
    (["--arch", "llama2-7b", "--verify"], "--verify"),
    (["--arch", "llama2-7b", "--tensor-parallel", "2", "--gpus", "4"], "--gpus"),
    (["--arch", "llama2-7b", "--tensor-parallel", "2", "--finetune"], "--finetune"),
    (PROBE + ["--gpus", "2"], "--gpus"),
    (PROBE + ["--explain"], "--explain"),
    (PROBE + ["--gpu-memory", "80GB"], "--gpu-memory"),
    (PROBE + ["--convention", "deepspeed"], "--convention"),
    # the stray layout flag is blamed, not --model (the flags were read as a layout)
    (PROBE + ["--sequence-parallel"], "plan: --sequence-parallel applies"),
    (PROBE + ["--tensor-parallel", "2"], "plan: --tensor-parallel applies"),
    (["--model", "mlp", "--pipeline", "2"], "plan: --pipeline applies"),
])
def test_a_flag_the_mode_ignores_is_refused_in_one_line(capsys, args, flag):
    _refused(capsys, args, flag, "leave it out")


def test_lora_rank_needs_finetune_and_a_rank_of_at_least_one(capsys):
    _refused(capsys, ["--arch", "llama2-7b", "--lora-rank", "8"], "--finetune")
    _refused(capsys, ["--arch", "llama2-7b", "--finetune", "--lora-rank", "0"], "--lora-rank", ">= 1")


@pytest.mark.parametrize("args,words", [
    (["--gpu-memory", "80"], ["80 bytes", "did you mean 80GB?"]),
    (["--gpu-memory", "-5GB"], ["--gpu-memory", "'-5GB'", "80GB"]),
    (["--gpu-memory", "0GB"], ["--gpu-memory", "more than 0"]),
    (["--cuda-context", "0.5"], ["did you mean 0.5GB?"]),
    (["--gpu-memory", "8e4"], ["8e4 is 80000 bytes", "did you mean 8e4GB?"]),
    (["--tensor-parallel", "0"], ["--tensor-parallel must be a whole number >= 1"]),
    (["--pipeline", "-2"], ["--pipeline must be a whole number >= 1"]),
    (["--gpus", "0"], ["--gpus must be a whole number >= 1"]),
    (["--batch", "0"], ["--batch must be a whole number >= 1, got 0"]),
    (["--micro-batches", "-2"], ["--micro-batches must be a whole number >= 1, got -2"]),
    (["--pipeline", "4", "--micro-batches", "0"], ["--micro-batches must be a whole number >= 1, got 0"]),
    (["--sequence-parallel"], ["--sequence-parallel", "give --tensor-parallel"]),
    (["--tensor-parallel", "1", "--sequence-parallel"], ["--sequence-parallel", "give --tensor-parallel"]),
])
def test_bad_sizes_and_counts_name_the_flag_not_an_internal_field(capsys, args, words):
    _refused(capsys, ["--arch", "llama2-7b"] + args, *words)
    assert "None for no limit" not in capsys.readouterr().err


def test_the_memory_is_shown_as_the_user_wrote_it(capsys):
    assert cli.main(["plan", "--arch", "llama2-7b", "--gpu-memory", "80GiB"]) == 0
    out = capsys.readouterr().out
    assert "fits 8x80GiB" in out and "8 x 80GiB" in out and "86GB" not in out


def test_one_gpu_lists_no_zero_or_pipeline_rows_but_says_how_many_they_need(capsys):
    assert cli.main(["plan", "--arch", "llama2-7b", "--gpus", "1", "--gpu-memory", "24GB"]) == 1
    out = capsys.readouterr().out
    table = out.split("on more GPUs")[0]
    assert "+ ZeRO-1 " not in table and "1F1B pipeline" not in table and "+ full recompute" in table
    assert "+ ZeRO-Offload" in table  # ZeRO-Offload does something on one GPU
    rows, _ = fits.plan_arch("llama2-7b", 1, (24e9 - 0.5e9) / 1.05)
    zero3 = next(r for r in rows if r.name == "+ ZeRO-3")
    assert f"+ ZeRO-3 {zero3.fewest_gpus}" in out


def test_finetuning_that_fits_is_success_and_said_so(capsys):
    args = ["plan", "--arch", "llama2-7b", "--finetune", "--gpus", "1", "--gpu-memory", "24GB"]
    assert cli.main(args) == 0  # was 1, under "no stack fits" beside LoRA rows saying "fits: yes"
    out = capsys.readouterr().out
    assert "no full-training stack fits 1 x 24GB" in out and "fine-tuning fits 1 x 24GB with lora and qlora" in out
    assert cli.main(args[:-1] + ["8GB"]) == 1
    assert "no fine-tuning method fits" in capsys.readouterr().out


def test_plan_help_has_groups_examples_and_exit_codes(capsys):
    with pytest.raises(SystemExit):
        cli.main(["plan", "--help"])
    out = capsys.readouterr().out
    for heading in ("probe a tinymem model", "the model of the closed form", "one 3D layout", "inference",
                    "examples:", "exit codes:", "0  something fits", "1  nothing fits", "2  bad arguments"):
        assert heading in out, heading


@pytest.mark.parametrize("stack,why", [
    (Stack("bf16", recompute="selective"), "selective"),
    (Stack("bf16", recompute="selective", zero=1, ranks=1, tensor=8, sequence_parallel=True), "tensor"),
    (Stack("bf16", recompute="full", tensor=2), "tensor"),
])
def test_refusal_judges_the_stacks_own_recompute_and_tensor_parallelism(stack, why):
    assert why in fits.refusal(stack)


def test_refusal_still_builds_what_tinymem_builds():
    for recompute in ("none", "full", "sqrt"):
        assert fits.refusal(Stack("bf16", recompute=recompute, zero=3, ranks=8)) is None
    assert fits.refusal(Stack("bf16", recompute="full", pipeline=4, micro_batches=16)) is None
    assert fits.refusal(Stack("bf16", offload="zero-offload")) is not None


@pytest.mark.parametrize("name,gpus,memory", [("llama2-7b", 1, 35.3e9), ("llama2-7b", 8, 80e9), ("llama-65b", 8, 80e9),
                                              ("gpt3-13b", 8, 24e9)])
def test_the_proposal_is_never_a_stack_tinymem_refuses(name, gpus, memory):
    rows, proposal = fits.plan_arch(name, gpus, memory)
    assert proposal is None or fits.refusal(proposal.stack) is None
    assert proposal is None or (proposal.stack.recompute != "selective" and proposal.stack.tensor == 1)


def test_probe_table_headers_are_whole_words_not_truncated_bucket_names():
    from tinymem import planner
    result = planner.plan("mlp", "8,16,4", 4, None, schedules=["none"], precisions=["fp32"], optimizers=["SGD"],
                          offloads=["none"])
    header = list(planner.table_rows(result)[0])
    assert {"param", "grad", "optim", "activ", "work"} <= set(header)
    assert "gradi" not in header and "works" not in header


def test_explain_without_a_proposal_explains_the_summarys_fewest_gpus_there(capsys):
    # LLaMA-2 70B on 1 x 80 GB: "fewest GPUs: 20 with + ZeRO-3"; --explain showed ZeRO-3 on d=1 (1383 GB)
    assert cli.main(["plan", "--arch", "llama2-70b", "--gpus", "1", "--explain"]) == 1
    out = capsys.readouterr().out
    fewest = int(out.split("fewest GPUs: ")[-1].split()[0])
    header = out.split("== --explain: ")[1].splitlines()[0]
    assert f"d={fewest} GPUs" in header, header
    peak = float(out.split("GPU's share of the model; peak ")[1].split()[0])
    usable = float(out.split("a step may peak at ")[1].split()[0])
    assert peak <= usable


def test_explain_says_when_nothing_fits_on_any_number_of_gpus(capsys):
    assert cli.main(["plan", "--arch", "mixtral-8x7b", "--gpus", "1", "--explain"]) == 1
    assert "--explain: no stack fits any number of GPUs of 80GB" in capsys.readouterr().out


def test_explain_gives_deepspeeds_estimate_only_for_the_mixed_precision_adam_it_counts(capsys):
    # the 13B proposal on 1 x 80 GB is pure bf16 + 8-bit Adam, ZeRO-3: DeepSpeed's 18n/N (234.94 GB)
    # is not "this stack", whose deepspeed-convention states are 52.77 GB
    assert cli.main(["plan", "--arch", "llama2-13b", "--gpus", "1", "--explain", "--convention", "deepspeed"]) == 0
    out = capsys.readouterr().out
    header = out.split("== --explain: ")[1].splitlines()[0]
    assert header.startswith("pure bf16 (no masters), 8-bit Adam") and "ZeRO-3" in header, header
    assert "estimate_zero3_model_states_mem_needs" not in out
    assert cli.main(["plan", "--arch", "llama2-70b", "--gpus", "64", "--explain"]) == 0
    out = capsys.readouterr().out
    header = out.split("== --explain: ")[1].splitlines()[0]
    assert header.startswith("bf16,") and "ZeRO-" in header and "8-bit" not in header, header
    assert "estimate_zero" in out


@pytest.mark.parametrize("budget", ["-5MB", "nanMB", "lots"])
def test_a_probe_budget_that_cannot_be_read_names_the_flag(capsys, budget):
    # it said "cannot read '-5MB' as a size; ... (None for no limit)", naming no flag
    _refused(capsys, PROBE + ["--budget", budget], "--budget", repr(budget), "64MB")
    assert "None for no limit" not in capsys.readouterr().err
