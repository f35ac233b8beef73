"""Every lesson and every figure family runs whole on "cuda" served by the strict stand-in for
CuPy, as they run on a GPU: a fresh process with ``TINYMEM_CUDA_STANDIN=1`` (the backend installs
tests/standin_cupy.py) and ``TINYMEM_DEVICE=cuda`` or ``--device cuda``, in quick mode, nothing
else changed. An implicit conversion (``np.asarray`` of a device array, a device array handed to
matplotlib, ``json`` or ``np.testing``), a NumPy array where a device array was meant, or a host
index in a device op fails here, on the CPU, as it would on a GPU.

All runs start at once, as many at a time as there are cores (each is a single-threaded
script): the added time is about that of the longest few. Not here, once, with why:
``tinymem.experiments.CPU_ONLY_FAMILIES`` (they refuse cuda by design), and ``NEEDS_A_GPU``
below (it runs on cuda, but only where a real GPU can be read)."""
import concurrent.futures
import json
import os
import pathlib
import subprocess
import sys

import pytest

from tinymem.experiments import CPU_ONLY_FAMILIES, families

ROOT = pathlib.Path(__file__).resolve().parents[1]
LESSONS = sorted(p.stem for p in (ROOT / "lessons").glob("[0-9][0-9]_*.py"))
# Families that run on cuda on a GPU but cannot on the stand-in, with why (gpu_check.sh runs them).
NEEDS_A_GPU = {"watching": "its process layer reads the GPU's own memory through NVML or nvidia-smi "
                           "(memory/nvidia.py), which a NumPy stand-in cannot serve"}
FAMILIES = [name for name in families() if name not in CPU_ONLY_FAMILIES and name not in NEEDS_A_GPU]


def _run(args, cwd, **env):
    env = dict(os.environ, TINYMEM_CUDA_STANDIN="1", TINYMEM_QUICK="1", MPLBACKEND="Agg", **env)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    cwd.mkdir(parents=True)
    try:
        return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    except subprocess.TimeoutExpired as exc:
        return subprocess.CompletedProcess(args, -9, str(exc.stdout or ""), f"timed out after 600 s: {args}")


def _lesson(name, folder):
    return _run([str(ROOT / "lessons" / f"{name}.py")], folder, TINYMEM_DEVICE="cuda",
                TINYMEM_LESSON_OUT=str(folder / "out"))


def _family(name, folder):
    return _run(["-m", "tinymem", "figures", "--quick", "--device", "cuda", "--only", name, "--out", str(folder)],
                folder)


@pytest.fixture(scope="module")
def standin_runs(tmp_path_factory):
    """Every run, started at once on a pool as wide as the machine; the longest first."""
    root = tmp_path_factory.mktemp("standin_runs")
    jobs = [("family", n, _family) for n in FAMILIES] + [("lesson", n, _lesson) for n in LESSONS]
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, min(8, os.cpu_count() or 1))) as pool:
        futures = {(kind, name): pool.submit(run, name, root / kind / name) for kind, name, run in jobs}
        return {key: (f.result(), root / key[0] / key[1]) for key, f in futures.items()}


def _passed(done, what):
    assert done.returncode == 0, f"{what} failed on the stand-in:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    assert "Traceback" not in done.stderr, f"{what}:\n{done.stderr[-3000:]}"


@pytest.mark.parametrize("lesson", LESSONS)
def test_a_lesson_runs_on_the_default_device_cuda(lesson, standin_runs):
    _passed(standin_runs[("lesson", lesson)][0], lesson)


@pytest.mark.parametrize("family", FAMILIES)
def test_a_figure_family_runs_with_device_cuda(family, standin_runs):
    done, folder = standin_runs[("family", family)]
    _passed(done, f"figure family {family}")
    records = json.loads((folder / "data" / f"{family}.json").read_text())
    assert records["meta"]["device"] == "cuda" and records["meta"]["cupy"] == "standin"


@pytest.mark.parametrize("family", sorted(CPU_ONLY_FAMILIES))
def test_a_cpu_only_family_refuses_cuda_with_its_one_reason(family):
    with pytest.raises(ValueError, match=f"the {family} figures run on the CPU: {CPU_ONLY_FAMILIES[family]}"):
        families()[family].run(quick=True, device="cuda")
