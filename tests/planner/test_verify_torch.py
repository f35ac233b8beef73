"""``tinymem plan --verify-torch``: the torch mode's prediction beside a PyTorch step of the same
model run here, per bucket; a model too large for this CPU, or options the torch mode refuses,
are refused before anything is built."""
import json

import pytest

from tinymem import cli

TINY = ["--arch", "gpt2", "--layers", "1", "--hidden", "64", "--heads", "2", "--seq", "32", "--vocab", "300",
        "--batch", "2", "--gpus", "1"]


@pytest.mark.torch
def test_verify_torch_prints_the_torch_mode_beside_the_measured_step(capsys, monkeypatch):
    tables = []
    monkeypatch.setattr(cli, "print_table", tables.append)
    assert cli.main(["plan", *TINY, "--verify-torch", "fused,sdpa"]) == 0
    out = capsys.readouterr().out
    assert "== --verify-torch: the torch mode (fused AdamW, sdpa attention)" in out
    rows = {r["bucket"]: r for r in tables[-1]}
    assert list(rows) == ["parameter", "buffer", "optimizer", "input", "gradient", "activation", "in_flight",
                          "temporary", "peak"]
    for column in ("predicted", "measured"):  # the buckets at the peak add up to it
        assert sum(r[column] for b, r in rows.items() if b != "peak") == rows["peak"][column]
    # what is there before the step: 1 layer of GPT-2's shape at h=64, V=300, s=32; AdamW's two moments
    parameters = 4 * (300 * 64 + 32 * 64 + (12 * 64 * 64 + 13 * 64) + 2 * 64)
    assert rows["parameter"]["measured"] == rows["parameter"]["predicted"] == parameters
    assert rows["input"]["measured"] == 2 * 8 * 2 * 32  # int64 ids and targets
    assert abs(rows["peak"]["predicted"] / rows["peak"]["measured"] - 1) <= 0.01, rows["peak"]
    assert "peak predicted at '" in out and "of the measured peak); measured in " in out


@pytest.mark.parametrize("args,message", [
    (["--arch", "gpt2", "--verify-torch"], "--verify-torch runs gpt2 on this CPU, and its step would peak at"),
    (TINY + ["--verify-torch", "adam"], "--verify-torch: unknown word 'adam'"),  # the flag it came in
    (TINY + ["--verify-torch", "foreach,fused"], "--verify-torch: 'foreach' and 'fused' both set the optimizer"),
    (TINY + ["--verify-torch", "cuda"], "--verify-torch runs the step on this machine's CPU"),
    (["--arch", "llama2-70b", "--layers", "1", "--hidden", "256", "--heads", "32", "--seq", "16", "--vocab", "100",
      "--verify-torch"], "grouped-query attention and experts are not in the torch mode"),
    (TINY[:-2] + ["--tensor-parallel", "2", "--verify-torch"], "--verify-torch applies to --arch or --config"),
])
def test_verify_torch_refuses_before_building_anything(capsys, args, message):
    assert cli.main(["plan", *args]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.startswith("tinymem plan: ") and message in captured.err, captured.err


@pytest.mark.torch
def test_verify_torch_goes_into_the_json_too(capsys):
    assert cli.main(["plan", *TINY, "--verify-torch", "--json"]) == 0
    rows = {r["bucket"]: r for r in json.loads(capsys.readouterr().out)["verify_torch"]}
    assert rows["peak"]["predicted"] - rows["peak"]["measured"] == rows["peak"]["predicted - measured"]
    assert abs(rows["peak"]["predicted - measured"]) <= 0.01 * rows["peak"]["measured"]


@pytest.mark.torch
def test_verify_torch_in_the_torch_mode_measures_the_step_its_torch_words_name(capsys):
    assert cli.main(["plan", *TINY[:-2], "--mode", "torch", "--torch", "foreach,checkpoint", "--verify-torch",
                     "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["options"]["optimizer"] == "foreach" and doc["options"]["checkpoint"] is True
    rows = {r["bucket"]: r for r in doc["verify_torch"]}
    assert rows["peak"]["predicted"] == doc["peak"]
    assert abs(rows["peak"]["predicted - measured"]) <= 0.01 * rows["peak"]["measured"]
    assert cli.main(["plan", *TINY[:-2], "--mode", "torch", "--verify-torch", "fused"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "--torch gives the step's options" in captured.err
