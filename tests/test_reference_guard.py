"""A missing reference (PyTorch, mpi4py) skips its tests on a laptop and fails them under
``CI=true``: a CI run must not pass by checking nothing. Also: the markers are applied."""
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
TORCH_TEST = "tests/techniques/precision/test_bfloat16.py::test_back_to_float32_matches_torch"
MPI_TEST = "tests/distributed/test_distributed.py::test_a_failing_rank_stops_the_job_instead_of_hanging[raise]"


def _run_without_references(tmp_path, ci):
    hidden = tmp_path / "hidden"
    hidden.mkdir()
    for name in ("torch", "mpi4py"):
        (hidden / f"{name}.py").write_text(f"raise ImportError('{name} hidden by the test')\n")
    env = dict(os.environ, PYTHONPATH=f"{hidden}{os.pathsep}{ROOT}", CI="true" if ci else "")
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rfs",
                           TORCH_TEST, MPI_TEST], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)


@pytest.mark.parametrize("ci", [False, True], ids=["laptop", "ci"])
def test_missing_references_skip_on_a_laptop_and_fail_in_ci(ci, tmp_path):
    done = _run_without_references(tmp_path, ci)
    out = done.stdout + done.stderr
    if ci:
        assert done.returncode != 0 and "2 errors" in out, out  # failed in setup
        assert "PyTorch is missing and CI=true" in out and "mpi4py or mpiexec is missing" in out, out
    else:
        assert done.returncode == 0 and "2 skipped" in out, out


def test_reference_tests_carry_their_markers(request):
    config = request.config
    markers = {line.split(":")[0] for line in config.getini("markers")}
    assert {"torch", "cuda", "mpi"} <= markers
    from conftest import DEVICES, requires_mpi, requires_torch
    assert requires_torch.name == "torch" and requires_mpi.name == "mpi"
    assert [m.name for m in DEVICES[1].marks] == ["cuda"]
