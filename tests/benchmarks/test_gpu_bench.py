"""The GPU bench without a GPU: its records' format (the rows run on the CPU, tiny and quick), the
README's GPU section generated from them (or saying that no GPU run is recorded), and the GPU
check's summary table read from a check's logs."""
import json
import pathlib

import pytest
from conftest import requires_torch

from tinymem import cli
from tinymem.benchmarks import gpu_check, readme, targets, targets_cuda
from tinymem.measure.records import write_records

ROOT = pathlib.Path(__file__).resolve().parents[2]
ROWS = ["fp16", "fp16_torch", "bf16", "adam8bit", "mlp", "tiny_op", "checkpoint", "ledger"]


def _fake_records():
    def stats(m):
        return {"median": m, "q1": m, "q3": m, "min": m, "max": m, "ratios": [m]}
    return {"rounds": 7, "clock": targets_cuda.CLOCK, "device": "cuda",
            "meta": {"machine": "NVIDIA H200", "date": "2026-12-04", "cupy": "14.2.0", "torch": "2.11.0"},
            "rows": [{"key": "fp16", "what": "fp16 storage step", "target": 0.5, "met": True,
                      "contenders": {"tinymem": stats(0.31)}},
                     {"key": "checkpoint", "what": "sqrt(n) checkpointing", "target": 1.3, "met": False,
                      "contenders": {"tinymem": stats(1.36), "torch": stats(1.3)}},
                     {"key": "ledger", "what": "ledger vs pool", "band": [0.95, 1.05], "target": 1.05, "met": True,
                      "ledger_peak": 134217728, "allocator_peak": 136000000, "measured_equals_allocator": True,
                      "contenders": {"tinymem": stats(0.987)}}]}


def test_the_readme_gpu_section_is_generated_from_the_committed_records():
    text = (ROOT / "README.md").read_text()
    records = readme.gpu_records(ROOT)
    assert readme.render_gpu(text, records) == text, "README is stale: run python -m tinymem.benchmarks.readme"
    if records is None:
        assert "No GPU run has been recorded yet" in text


def test_the_gpu_section_says_when_no_gpu_run_is_recorded(tmp_path):
    assert readme.gpu_records(tmp_path) is None
    assert readme.gpu_table(None) == [readme.NO_GPU_RUN] and "No GPU run has been recorded yet" in readme.NO_GPU_RUN
    write_records(_fake_records(), tmp_path / "figures", "bench_cuda")
    assert readme.gpu_records(tmp_path)["meta"]["machine"] == "NVIDIA H200"


def test_the_gpu_section_renders_every_row_with_its_target_and_whether_it_was_met():
    lines = readme.gpu_table(_fake_records())
    assert "NVIDIA H200" in lines[0] and "CuPy 14.2.0" in lines[0] and "7 rounds" in lines[0]
    fp16, ckpt, ledger = lines[-3:]
    assert "0.31x" in fp16 and "<= 0.50x" in fp16 and fp16.endswith("| yes |")
    assert "1.36x" in ckpt and "1.30x" in ckpt and ckpt.endswith("| no |")
    assert "0.987" in ledger and "134,217,728 B" in ledger and "equals the pool's" in ledger
    assert "0.95-1.05" in ledger
    text = readme.render_gpu(f"a\n{readme.GPU_START}\nold\n{readme.GPU_END}\nb\n", _fake_records())
    assert "old" not in text and text.startswith("a\n") and text.endswith("b\n")


@requires_torch
def test_the_gpu_bench_records_every_row_in_the_committed_format(tmp_path):
    """The GPU rows, run on the CPU with tiny shapes: the code runs and the records are whole."""
    records = targets_cuda.run(quick=True, device="cpu", rounds=2)
    assert [row["key"] for row in records["rows"]] == ROWS
    for row in records["rows"]:
        mine = row["contenders"]["tinymem"]
        assert mine["min"] <= mine["q1"] <= mine["median"] <= mine["q3"] <= mine["max"]
        assert isinstance(row["met"], bool) and row["target"] > 0
    checkpoint = records["rows"][ROWS.index("checkpoint")]
    assert checkpoint["target"] == checkpoint["contenders"]["torch"]["median"]
    ledger = records["rows"][-1]
    assert ledger["ledger_peak"] > 0 and ledger["allocator_peak"] > 0
    assert ledger["measured_equals_allocator"] is True  # on the CPU both are tracemalloc's
    path = write_records(records, tmp_path, "bench_cuda")
    assert json.loads(pathlib.Path(path).read_text())["rows"][0]["key"] == "fp16"
    assert (tmp_path / "bench_cuda.png") in [pathlib.Path(p) for p in targets.plot(records, tmp_path, "bench_cuda.png")]
    assert [r["row"] for r in targets_cuda.table_rows(records)] == ROWS


def test_bench_on_cuda_runs_only_the_targets_and_says_so(capsys):
    assert cli.main(["bench", "engine", "--device", "cuda"]) == 2
    assert "--device cuda runs the GPU targets only" in capsys.readouterr().err


SUITE_LOG = """\
....s..F
SKIPPED [12] tests/edge/test_onnx_export.py:40: the edge figures run on the CPU
SKIPPED [3] tests/rl/test_dqn.py: the replay buffer is host memory
SKIPPED [1] tests/edge/test_patch_and_peak.py:9: the edge figures run on the CPU
FAILED tests/memory/test_x.py::test_y - assert 0
2 failed, 1803 passed, 16 skipped, 24 warnings, 1 error in 150.02s (0:02:30)
"""


def test_the_check_summary_counts_results_and_skip_reasons(tmp_path):
    assert gpu_check.pytest_counts(SUITE_LOG) == {"passed": 1803, "failed": 2, "errors": 1, "skipped": 16,
                                                  "xfailed": 0, "xpassed": 0}
    assert gpu_check.skip_reasons(SUITE_LOG) == {"the edge figures run on the CPU": 13,
                                                 "the replay buffer is host memory": 3}
    assert gpu_check.pytest_counts("....\n")["passed"] == 0  # killed before its summary line
    (tmp_path / "suite_cuda.log").write_text(SUITE_LOG)
    (tmp_path / "cuda_tests.log").write_text("186 passed in 40.1s\n")
    (tmp_path / "rc.txt").write_text("info 0 2\ncuda_tests 0 41\nsuite_cuda 1 152\nbench 124 100\n")
    (tmp_path / "figures").mkdir()
    (tmp_path / "figures" / "offload.png").write_bytes(b"")
    write_records(_fake_records(), tmp_path / "figs", "bench_cuda")
    lines = gpu_check.summary_lines(str(tmp_path), str(tmp_path / "figs"))
    suite = next(line for line in lines if line.startswith("suite_cuda"))
    assert suite.split() == ["suite_cuda", "1", "152", "1803", "2", "1", "16", "failed"]
    assert "  tests/memory/test_x.py::test_y - assert 0" in lines
    assert next(line for line in lines if line.startswith("cuda_tests")).split()[3] == "186"
    assert "skip reasons, suite_cuda (16 skipped):" in lines
    assert any(line.split()[0] == "13" and "edge figures" in line for line in lines)
    assert "figures drawn: 1 (offload.png)" in lines
    ledger = next(line for line in lines if line.startswith("ledger"))
    assert ledger.split()[-2:] == ["0.95-1.05", "yes"]
    assert gpu_check.bench_lines(str(tmp_path / "nothing"))[0].startswith("bench: no ")


KILLED_LOG = """\
[gw0] [  1%] PASSED tests/a.py::test_one
[gw1] [  2%] FAILED tests/b.py::test_two
[gw0] [  3%] SKIPPED tests/c.py::test_three
[gw1] [  4%] PASSED tests/a.py::test_four
"""


def test_a_killed_part_is_counted_from_its_test_lines_and_marked(tmp_path):
    """No summary line (the part was killed at its limit): the -v lines are counted, the
    failed test is named, and the part says it timed out; a half-written bench JSON is said
    to be unreadable instead of stopping the summary."""
    assert gpu_check.pytest_counts(KILLED_LOG) == {"passed": 2, "failed": 1, "errors": 0, "skipped": 1,
                                                   "xfailed": 0, "xpassed": 0}
    (tmp_path / "suite_cuda.log").write_text(KILLED_LOG)
    (tmp_path / "rc.txt").write_text("suite_cuda 124 145 140\nbench 137\n")
    (tmp_path / "bench" / "data").mkdir(parents=True)
    (tmp_path / "bench" / "data" / "bench_cuda.json").write_text('{"rows": [{"key": "fp')
    lines = gpu_check.summary_lines(str(tmp_path))
    suite = next(line for line in lines if line.startswith("suite_cuda"))
    assert suite.split()[:7] == ["suite_cuda", "124", "145", "2", "1", "0", "1"] and "timed out" in suite
    assert "  tests/b.py::test_two" in lines
    assert any(line.startswith("bench: ") and "unreadable" in line for line in lines)


@requires_torch
def test_one_failing_bench_row_costs_only_itself_and_every_row_is_written_as_it_finishes(tmp_path, monkeypatch):
    def broken(dev):
        raise RuntimeError("planted: the tiny op row cannot be built")
    monkeypatch.setattr(targets_cuda, "_tiny_op_row", broken)
    seen = []
    write = targets_cuda.writer(str(tmp_path), quick=True, device="cpu")

    def on_row(records):
        write(records)
        on_disk = json.loads((tmp_path / "data" / "bench_cuda.json").read_text())
        seen.append([row["key"] for row in on_disk["rows"]])

    records = targets_cuda.run(quick=True, device="cpu", rounds=1, on_row=on_row)
    assert [row["key"] for row in records["rows"]] == ROWS
    assert seen == [ROWS[:i] for i in range(1, len(ROWS) + 1)]  # on disk after each row
    tiny = records["rows"][ROWS.index("tiny_op")]
    assert tiny["met"] is False and tiny["error"] == "RuntimeError: planted: the tiny op row cannot be built"
    assert all("error" not in row for row in records["rows"] if row["key"] != "tiny_op")
    assert "tiny_op      error: RuntimeError" in "\n".join(gpu_check.bench_lines(str(tmp_path)))
    assert any("error: RuntimeError" in line for line in readme.gpu_table(records))
    assert targets.plot(records, tmp_path, "bench_cuda.png")  # the error row is left out of the plot


def test_odd_test_names_and_collection_errors_are_listed():
    """A parameter with spaces ("t[a b]") and a module that fails to collect ("ERROR tests/e.py -
    ...": no ::) were left out of the failed list; a captured log line ("ERROR    root:...") is
    no test. Killed before -rfE, the -v lines name the whole test, spaces included."""
    log = ("tests/a.py::t[a b] FAILED [ 50%]\n[gw1] [ 60%] FAILED tests/b.py::u[x y]\n"
           "ERROR    root:file.py:12 a logged message\nFAILED tests/a.py::t[a b] - AssertionError: 1 != 2\n"
           "ERROR tests/e.py - ModuleNotFoundError: No module named 'x'\nERROR tests/f.py::g - RuntimeError\n"
           "==== 1 failed, 2 errors in 3.0s ====\n")
    assert gpu_check.failed_tests(log) == [("tests/a.py::t[a b]", "AssertionError: 1 != 2"),
                                           ("tests/e.py", "ModuleNotFoundError: No module named 'x'"),
                                           ("tests/f.py::g", "RuntimeError")]
    killed = log.split("ERROR    root")[0]
    assert gpu_check.failed_tests(killed) == [("tests/a.py::t[a b]", ""), ("tests/b.py::u[x y]", "")]


def test_a_bench_file_of_another_shape_or_a_malformed_row_is_said_not_raised(tmp_path):
    """bench_cuda.json is read after a check that may have gone wrong: rows that are no list, a
    meta that is null, a row without its fields each get a line instead of a traceback that
    loses the whole summary."""
    (tmp_path / "data").mkdir()
    path = tmp_path / "data" / "bench_cuda.json"
    good = _fake_records()["rows"][0]
    for content, expected in (({"rows": None}, "unreadable (its rows are a NoneType"),
                              ({"rows": {"a": 1}}, "unreadable (its rows are a dict"),
                              ({"rows": [{"key": "a"}], "meta": None}, "row 0: unreadable (KeyError"),
                              ({"rows": [5, good]}, "row 0: unreadable (TypeError"),
                              ({"rows": [dict(good, target=None)]}, "row 0: unreadable (TypeError")):
        path.write_text(json.dumps(content))
        text = "\n".join(gpu_check.bench_lines(str(tmp_path)))
        assert expected in text, text
    assert text.splitlines()[0].endswith("(bench_cuda.json of ?)")


@requires_torch
def test_a_writer_that_fails_is_not_recorded_as_the_rows_error(monkeypatch):
    """The row was measured; writing it failed. That was caught as the row's own error: the row
    then stood twice in the records, once measured and once as an error it never had."""
    import types
    row = {"key": "a", "contenders": {"tinymem": {"median": 1.0}}, "target": 2.0, "met": True}
    monkeypatch.setattr(targets_cuda, "_Device", lambda device, torch: None)
    monkeypatch.setattr(targets_cuda, "_builders", lambda dev, quick: [
        (("a",), lambda: [types.SimpleNamespace(key="a", label="a", what="a", target=2.0)])])
    monkeypatch.setattr(targets_cuda, "_measure", lambda dev, r, rounds: dict(row))
    seen = []

    def on_row(records):
        seen.append([dict(r) for r in records["rows"]])
        raise OSError("planted: no space left on device")
    with pytest.raises(OSError, match="planted"):  # the writer's failure, said as such
        targets_cuda.run(quick=True, on_row=on_row)
    assert seen == [[row]]


def test_the_summary_without_its_folder_says_how_to_call_it():
    import subprocess
    import sys
    done = subprocess.run([sys.executable, "-m", "tinymem.benchmarks.gpu_check"], capture_output=True, text=True,
                          cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}, timeout=60)
    assert done.returncode == 2 and "usage: python -m tinymem.benchmarks.gpu_check OUT" in done.stderr
