"""``scripts/gpu_check.sh`` without a GPU: a dry run with a fake ``python`` whose parts pass,
fail, hang past their limit or raise in one bench row, and the summary it must still print."""
import pathlib
import shutil
import subprocess
import sys
import textwrap

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "gpu_check.sh"

BENCH_JSON = """{"rounds": 2, "clock": "wall", "device": "cuda", "meta": {"date": "2026-12-04"}, "rows": [
 {"key": "fp16", "what": "fp16", "target": 0.5, "met": true,
  "contenders": {"tinymem": {"median": 0.31, "q1": 0.3, "q3": 0.32, "min": 0.3, "max": 0.33}}},
 {"key": "bf16", "what": "bf16", "target": 1.1, "met": false, "rounds": 0, "contenders": {},
  "error": "CUDARuntimeError: cudaErrorIllegalAddress"}]}"""


def _fake_python(tmp_path):
    """A ``python`` that answers each of the script's calls as a GPU machine might: no xdist,
    the suite hanging past its limit after three tests, a lesson failing, a bench row raising."""
    fake, bench = tmp_path / "fake_python", tmp_path / "bench_cuda.json"
    bench.write_text(BENCH_JSON)
    fake.write_text(textwrap.dedent(f"""\
        #!/usr/bin/env bash
        case "$*" in
          "-c import xdist"|"-c import pytest_timeout") exit 1 ;;
          "-m tinymem info") echo "cupy 13.6.0 (fake)" ;;
          "-m tinymem.benchmarks.gpu_check"*) exec "{sys.executable}" "$@" ;;
          *"-m cuda tests") echo "args: $*"; echo "tests/a.py::test_gpu PASSED [100%]"; echo "1 passed in 0.50s" ;;
          *"--ignore=tests/test_lessons.py"*)
            echo "args: $*"
            echo "tests/a.py::test_one PASSED [  1%]"
            echo "tests/b.py::test_two FAILED [  2%]"
            echo "tests/c.py::test_three SKIPPED (no GPU here) [  3%]"
            sleep 60 ;;
          *"tests/test_lessons.py"*)
            echo "FAILED tests/test_lessons.py::test_lesson_runs_in_quick_mode[07_zero] - DeviceError: Linear"
            echo "1 failed, 13 passed in 80.00s"; exit 1 ;;
          "-m tinymem bench"*)
            mkdir -p "${{@: -1}}/data"; cp "{bench}" "${{@: -1}}/data/bench_cuda.json"; exit 1 ;;
          "-m tinymem figures"*)
            echo "figure family rl skipped on cuda: it runs on the CPU only (host memory)" >&2
            echo "figure family precision failed:" >&2
            mkdir -p "${{@: -1}}"; : > "${{@: -1}}/offload.png"; exit 1 ;;
          *) echo "unexpected call: $*" >&2; exit 3 ;;
        esac
        """))
    fake.chmod(0o755)
    return fake


@pytest.mark.skipif(shutil.which("timeout") is None or shutil.which("bash") is None, reason="needs bash and timeout")
def test_a_dry_run_brings_back_a_summary_with_a_killed_part_and_a_failed_row(tmp_path):
    out = tmp_path / "out"
    env = {"PATH": "/usr/bin:/bin", "OUT": str(out), "PYTHON": str(_fake_python(tmp_path)), "LIMIT_SUITE_CUDA": "1"}
    done = subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    summary = (out / "summary.txt").read_text()
    lines = summary.splitlines()
    assert "pytest-xdist is missing" in summary
    suite_args = (out / "suite_cuda.log").read_text().splitlines()[0]
    assert "-n" not in suite_args.split() and "-rfEs" in suite_args and "--ignore=tests/test_standin_runs.py" in suite_args
    suite = next(line for line in lines if line.startswith("suite_cuda"))
    assert suite.split()[:7] == ["suite_cuda", "124", suite.split()[2], "1", "1", "0", "1"]
    assert "timed out" in suite
    assert "  tests/b.py::test_two" in lines
    lessons = next(line for line in lines if line.startswith("lessons"))
    assert lessons.split()[1:2] == ["1"] and lessons.split()[3:5] == ["13", "1"]
    assert any("test_lesson_runs_in_quick_mode[07_zero] - DeviceError: Linear" in line for line in lines)
    assert any(line.startswith("fp16") and line.split()[-1] == "yes" for line in lines)
    assert "bf16         error: CUDARuntimeError: cudaErrorIllegalAddress" in lines
    assert "figure families skipped (CPU only): rl" in lines and any("failed: precision" in line for line in lines)
    assert "figures drawn: 1 (offload.png)" in lines
    parts = [line.split()[0] for line in (out / "rc.txt").read_text().splitlines()]
    assert parts == ["info", "cuda_tests", "suite_cuda", "lessons", "bench", "figures"]


@pytest.mark.skipif(shutil.which("timeout") is None or shutil.which("bash") is None, reason="needs bash and timeout")
def test_a_limit_that_is_no_number_is_noted_and_the_part_runs_under_its_default(tmp_path):
    """LIMIT_LESSONS=abc made timeout refuse to start the part (rc 125) and the summary said it
    was not run; an output folder with a space in its name works as any other."""
    out = tmp_path / "gpu out"
    env = {"PATH": "/usr/bin:/bin", "OUT": str(out), "PYTHON": str(_fake_python(tmp_path)),
           "LIMIT_SUITE_CUDA": "1", "LIMIT_LESSONS": "abc"}
    done = subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = (out / "summary.txt").read_text().splitlines()
    assert "note: LIMIT_LESSONS=abc is no whole number of seconds: lessons runs under its default limit of 90 s" in lines
    lessons = next(line for line in lines if line.startswith("lessons"))
    assert lessons.split()[1] == "1" and lessons.split()[3:5] == ["13", "1"]
    assert "lessons 1 " in (out / "rc.txt").read_text() and (out / "rc.txt").read_text().count("\n") == 6


def test_the_script_parses_and_its_limits_fit_in_8_minutes():
    assert subprocess.run(["bash", "-n", str(SCRIPT)]).returncode == 0
    text = SCRIPT.read_text()
    limits = [int(line.split()[2]) for line in text.splitlines() if line.startswith("part ")]
    assert len(limits) == 6 and sum(limits) + 5 * len(limits) <= 480 - 10  # 10 s left for the summary
