"""Lessons and figure families run whole on "cuda" served by the stand-in for CuPy, as they run
on a GPU: a fresh process with ``TINYMEM_CUDA_STANDIN=1`` (the backend installs
tests/standin_cupy.py) and ``TINYMEM_DEVICE=cuda`` or ``--device cuda``, nothing else changed.
The longer ones are marked slow. Not here: lesson 07 and the partition family (MPI ranks),
09 and watching (NVML reads a real GPU), 10 and rl, 11 and edge (they refuse cuda by design)."""
import json
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]

QUICK_LESSONS = ["00_the_memory_ledger"]
SLOW_LESSONS = ["01_gradient_checkpointing", "02_mixed_precision", "03_int8_quantization", "04_offloading",
                "05_optimizer_state", "06_workloads_language_and_recsys", "06_workloads_vision",
                "08_planning_and_stacking", "12_planning_past_the_machine"]
QUICK_FAMILIES = ["memory_timeline", "checkpoint", "what_fits"]
SLOW_FAMILIES = ["precision", "quantization", "offload", "stack", "workload_embeddings"]


def _run(args, cwd, **env):
    env = dict(os.environ, TINYMEM_CUDA_STANDIN="1", TINYMEM_QUICK="1", MPLBACKEND="Agg", **env)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    done = subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{args} failed on the stand-in:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    return done


@pytest.mark.parametrize("lesson", QUICK_LESSONS + [pytest.param(n, marks=pytest.mark.slow) for n in SLOW_LESSONS])
def test_a_lesson_runs_on_the_default_device_cuda(lesson, tmp_path):
    done = _run([str(ROOT / "lessons" / f"{lesson}.py")], tmp_path, TINYMEM_DEVICE="cuda",
                TINYMEM_LESSON_OUT=str(tmp_path / "out"))
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("family", QUICK_FAMILIES + [pytest.param(n, marks=pytest.mark.slow) for n in SLOW_FAMILIES])
def test_a_figure_family_runs_with_device_cuda(family, tmp_path):
    _run(["-m", "tinymem", "figures", "--quick", "--device", "cuda", "--only", family, "--out", str(tmp_path)],
         tmp_path)
    records = json.loads((tmp_path / "data" / f"{family}.json").read_text())
    assert records["meta"]["device"] == "cuda" and records["meta"]["cupy"] == "standin"
