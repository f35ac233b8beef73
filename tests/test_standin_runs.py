"""Every lesson and every figure family runs whole on "cuda" served by the strict stand-in for
CuPy, as they run on a GPU: a fresh process with ``TINYMEM_CUDA_STANDIN=1`` (the backend installs
tests/standin_cupy.py) and ``TINYMEM_DEVICE=cuda`` or ``--device cuda``, in quick mode, nothing
else changed. An implicit conversion (``np.asarray`` of a device array, a device array handed to
matplotlib, ``json`` or ``np.testing``), a NumPy array where a device array was meant, or a host
index in a device op fails here, on the CPU, as it would on a GPU.

The runs start when the tests are collected and run beside the in-process tests
(tests/background_runs.py); these tests come last and read them. Not here, once, with why:
``tinymem.experiments.CPU_ONLY_FAMILIES`` (they refuse cuda by design), and ``NEEDS_A_GPU``
below (it runs on cuda, but only where a real GPU can be read)."""
import json
import os
import pathlib
import sys

import pytest

import background_runs

from tinymem.experiments import CPU_ONLY_FAMILIES, families

ROOT = pathlib.Path(__file__).resolve().parents[1]
LESSONS = sorted(p.stem for p in (ROOT / "lessons").glob("[0-9][0-9]_*.py"))
# Families that run on cuda on a GPU but cannot on the stand-in, with why (gpu_check.sh runs them).
NEEDS_A_GPU = {"watching": "its process layer reads the GPU's own memory through NVML or nvidia-smi "
                           "(memory/nvidia.py), which a NumPy stand-in cannot serve"}
FAMILIES = [name for name in families() if name not in CPU_ONLY_FAMILIES and name not in NEEDS_A_GPU]


def _env(**extra):
    env = dict(os.environ, TINYMEM_CUDA_STANDIN="1", TINYMEM_QUICK="1", MPLBACKEND="Agg", **extra)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env


BACKGROUND_ORDER = 0  # its figure families are the longest runs: they start first
BACKGROUND_FIXTURE = "standin_runs"


def background_jobs(root):
    """Every family, then every lesson, each in its own folder (tests/background_runs.py starts
    them at collection, beside the in-process tests; the families are the longest)."""
    root = pathlib.Path(root)
    families_ = [(name, [sys.executable, "-m", "tinymem", "figures", "--quick", "--device", "cuda",
                                     "--only", name, "--out", str(root / "family" / name)],
                  root / "family" / name, _env()) for name in FAMILIES]
    lessons = [(name, [sys.executable, str(ROOT / "lessons" / f"{name}.py")], root / "lesson" / name,
                _env(TINYMEM_DEVICE="cuda", TINYMEM_LESSON_OUT=str(root / "lesson" / name / "out")))
               for name in LESSONS]
    return families_ + lessons


@pytest.fixture(scope="module")
def standin_runs():
    """``{family or lesson: (CompletedProcess, its folder)}``, each run waited for when read."""
    return background_runs.results(sys.modules[__name__])


def _passed(done, what):
    assert done.returncode == 0, f"{what} failed on the stand-in:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    assert "Traceback" not in done.stderr, f"{what}:\n{done.stderr[-3000:]}"


@pytest.mark.parametrize("lesson", LESSONS)
def test_a_lesson_runs_on_the_default_device_cuda(lesson, standin_runs):
    _passed(standin_runs[lesson][0], lesson)


@pytest.mark.parametrize("family", FAMILIES)
def test_a_figure_family_runs_with_device_cuda(family, standin_runs):
    done, folder = standin_runs[family]
    _passed(done, f"figure family {family}")
    records = json.loads((folder / "data" / f"{family}.json").read_text())
    assert records["meta"]["device"] == "cuda" and records["meta"]["cupy"] == "standin"


@pytest.mark.parametrize("family", sorted(CPU_ONLY_FAMILIES))
def test_a_cpu_only_family_refuses_cuda_with_its_one_reason(family):
    with pytest.raises(ValueError, match=f"the {family} figures run on the CPU: {CPU_ONLY_FAMILIES[family]}"):
        families()[family].run(quick=True, device="cuda")
