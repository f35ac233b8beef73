"""``tinymem plan --json``: every mode prints one JSON object whose bytes are the table's numbers
before rounding, and whose exit code is the table's."""
import json

import pytest

from tinymem import cli
from tinymem.memory import format_bytes

BUCKETS = {"param": "parameter", "grad": "gradient", "optim": "optimizer", "activ": "activation", "work": "workspace"}


def _both(capsys, monkeypatch, args):
    """(exit code, tables printed, text) of the plain run; (exit code, document) of --json."""
    tables = []
    monkeypatch.setattr(cli, "print_table", tables.append)
    code = cli.main(["plan", *args])
    text = capsys.readouterr().out
    json_code = cli.main(["plan", *args, "--json"])
    out = capsys.readouterr().out
    document = json.loads(out)
    assert out.rstrip("\n") == json.dumps(document, indent=2, sort_keys=True)  # one object, nothing else
    assert json_code == code == document["exit_code"]
    return tables, text, document


def _gb(x, digits=1):
    return f"{x / 1e9:.{digits}f}"


def _same_stack_rows(table, rows):
    by_name = {r["stack"]: r for r in rows}
    for shown in table:
        row = by_name[shown["stack"]]
        assert {k: shown[k] for k in BUCKETS} == {k: _gb(row["buckets"][b]) for k, b in BUCKETS.items()}
        assert (shown["host"], shown["peak GB"]) == (_gb(row["host"]), _gb(row["peak"]))
        assert shown["fewest GPUs"] == ("-" if row["fewest_gpus"] is None else row["fewest_gpus"])
        assert shown["time x"] == f"{row['time']:.2f}" and (shown["tinymem builds it"] == "no") == bool(row["refused"])
        assert [v for k, v in shown.items() if k.startswith("fits ")] == ["yes" if row["fits"] else "no"]


@pytest.mark.parametrize("args", [["--arch", "llama2-7b", "--gpus", "8", "--explain"],
                                  ["--arch", "gpt2", "--layers", "2", "--gpus", "1", "--finetune"]])
def test_training_json_holds_every_row_of_the_table_in_bytes(capsys, monkeypatch, args):
    tables, text, doc = _both(capsys, monkeypatch, args)
    assert doc["mode"] == "training" and doc["gpus"] == int(args[args.index("--gpus") + 1])
    _same_stack_rows(tables[0], doc["rows"])
    assert len(doc["rows"]) >= len(tables[0])  # on one GPU the table folds the ZeRO and pipeline rows
    assert doc["model"]["layers"] == (2 if "--layers" in args else 32) and doc["model"]["parameters"] > 0
    if "--explain" in args:
        assert [t["term"] for t in doc["explain"]] == [t["term"] for t in tables[1]]
        assert [t["GB"] for t in tables[1]] == [_gb(t["bytes"], 2) for t in doc["explain"]]
    if "--finetune" in args:
        assert [r["peak GB"] for r in tables[1]] == [_gb(r["peak"], 2) for r in doc["finetune"]]


def test_layout_json_is_its_one_row_and_its_terms(capsys, monkeypatch):
    tables, _, doc = _both(capsys, monkeypatch, ["--arch", "llama2-70b", "--tensor-parallel", "8", "--pipeline",
                                                 "4", "--data-parallel", "2"])
    assert doc["mode"] == "layout" and doc["layout"] == {"tensor": 8, "pipeline": 4, "data": 2}
    _same_stack_rows(tables[0], doc["rows"])
    assert [t["GB"] for t in tables[1]] == [_gb(t["bytes"], 2) for t in doc["explain"]]


def test_inference_json_is_its_terms(capsys, monkeypatch, tmp_path):
    tables, text, doc = _both(capsys, monkeypatch, ["--arch", "llama3-8b", "--inference", "--context", "32768"])
    assert doc["mode"] == "inference" and doc["context"] == 32768
    assert [(t["term"], t["GB"]) for t in tables[0][:-1]] == [(t["term"], _gb(t["bytes"], 3)) for t in doc["terms"]]
    assert f"total {_gb(doc['need'], 2)} GB" in text and doc["total"] == sum(t["bytes"] for t in doc["terms"])


def test_probe_json_is_every_combination_in_bytes(capsys, monkeypatch):
    tables, _, doc = _both(capsys, monkeypatch, ["--model", "mlp", "--sizes", "8,16,4", "--batch", "4",
                                                 "--optimizers", "SGD", "Adam", "--precisions", "fp32", "bf16",
                                                 "--offloads", "none", "--schedules", "none", "--all"])
    assert doc["mode"] == "probe" and len(doc["rows"]) == len(tables[0]) > 1
    shown = {(r["ckpt"], r["prec"], r["optimizer"], r["offload"], r["k"]): r for r in tables[0]}
    for row in doc["rows"]:
        cells = shown[(row["checkpoint"], row["precision"], row["optimizer"], row["offload"], row["micro_batches"])]
        assert cells["peak"] == format_bytes(row["peak"]) and cells["param"] == format_bytes(row["buckets"]["parameter"])
        assert sum(row["buckets"].values()) >= row["buckets"]["parameter"] and row["peak"] > 0


def test_torch_mode_json_is_its_moments_and_terms(capsys, monkeypatch, tmp_path):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"block_size": 64, "vocab_size": 300, "n_layer": 2, "n_head": 2, "n_embd": 64}))
    tables, text, doc = _both(capsys, monkeypatch, ["--config", str(config), "--mode", "torch", "--torch", "sdpa",
                                                    "--batch", "2"])
    assert doc["mode"] == "torch" and doc["options"]["attention"] == "sdpa" and doc["model"]["seq"] == 64
    assert text.startswith(f"--config {config}: read as the nanogpt family")
    assert doc["peak"] == sum(doc["buckets"].values()) == max(sum(m.values()) for m in doc["moments"].values())
    assert f"peak {doc['peak'] / 1e6:.3f} MB at '{doc['moment']}'" in text
    assert {r["moment"]: r["total"] for r in tables[0]} == {m: f"{sum(b.values()) / 1e6:.3f}"
                                                            for m, b in doc["moments"].items()}
    assert sorted(t["MB"] for t in tables[1]) == sorted(f"{t['bytes'] / 1e6:.3f}" for t in doc["terms"])
