"""`tinymem figures --quick` writes every figure of every family, each with the JSON behind it.

Each family's PNGs are then drawn a second time from the JSON alone (what a reader does to
restyle a figure): that proves the records hold every quantity the figure plots. The claims
meant to hold at quick sizes must hold; the committed (full-mode) records must carry the claims
the code states today, judged on those records (read as committed: tests/committed.py).
"""
import json
import os
import pathlib
import sys
import warnings

import pytest

import background_runs
from committed import committed_records, is_committed
from tinymem import plots
from tinymem.experiments import families
from tinymem.measure.claims import evaluate

ROOT = pathlib.Path(__file__).resolve().parents[2]

# Families whose figures pass plots.layout_problems (no small, clipped or overprinted text, no
# legend on the data); a family joins once its figures do.
LAYOUT_CHECKED = ["memory_timeline", "checkpoint", "precision", "quantization", "offload", "optimizers", "stack",
                  "workload_resolution", "workload_seq_len", "workload_embeddings",
                  "edge", "what_fits", "plan", "rl", "watching", "partition", "lora", "torch_conventions"]


def _family_params():
    """Every family, as a test parameter; one whose run needs MPI (``REQUIRES = "mpi"``) carries the
    ``mpi`` marker: without mpi4py it skips (fails under CI=true), as the other MPI tests do."""
    return [pytest.param(name, marks=pytest.mark.mpi) if getattr(module, "REQUIRES", None) == "mpi" else name
            for name, module in families().items()]


BACKGROUND_ORDER = 1  # after the stand-in's runs (longer), before the lessons
BACKGROUND_FIXTURE = "quick_figures"


def background_jobs(root):
    """`tinymem figures --quick` on the CPU, one process per family, each into its own folder
    (tests/background_runs.py starts them at collection, beside the in-process tests). The CPU
    run, whatever the default device: the committed figures and their claims are the CPU's (RSS,
    tracemalloc); tests/test_standin_runs.py runs the families on "cuda"."""
    env = dict(os.environ, MPLBACKEND="Agg")
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return [(name, [sys.executable, "-m", "tinymem", "figures", "--quick", "--device", "cpu", "--only", name,
                    "--out", os.path.join(root, name)], os.path.join(root, name), env) for name in families()]


@pytest.fixture(scope="module")
def quick_figures():
    """``quick_figures[family]``: the folder its quick run wrote, once it has run (and passed)."""
    runs = background_runs.results(sys.modules[__name__])

    class Folders:
        def __getitem__(self, name):
            done, folder = runs[name]
            assert done.returncode == 0, f"tinymem figures --quick --only {name} failed:\n{done.stderr[-3000:]}"
            return pathlib.Path(folder)
    return Folders()


@pytest.mark.parametrize("name", _family_params())
def test_family_writes_its_figures_and_records(quick_figures, name, tmp_path):
    module = families()[name]
    for png in module.FIGURES:
        assert os.path.getsize(quick_figures[name] / png) > 5_000, f"{name}: {png} missing or empty"
    records = json.loads((quick_figures[name] / "data" / f"{name}.json").read_text())
    meta = records["meta"]
    assert meta["quick"] is True and meta["device"] == "cpu" and meta["machine"] and meta["date"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", plots.LayoutWarning)
        redrawn = module.plot(records, str(tmp_path))
    assert sorted(os.path.basename(p) for p in redrawn) == sorted(module.FIGURES)
    if name in LAYOUT_CHECKED:
        problems = [str(w.message) for w in caught if issubclass(w.category, plots.LayoutWarning)]
        assert problems == [], f"{name}: " + "; ".join(problems)


@pytest.mark.parametrize("name", _family_params())
def test_claims_meant_for_quick_sizes_hold(quick_figures, name):
    records = json.loads((quick_figures[name] / "data" / f"{name}.json").read_text())
    assert [r["name"] for r in records.get("claims", [])] == [c.name for c in getattr(families()[name], "CLAIMS", [])]
    failing = [f"{r['text']} (measured {r['value']})" for r in records.get("claims", []) if r["holds"] is False]
    assert failing == [], f"{name}: claims that do not hold at quick sizes: {failing}"


def test_committed_figures_are_the_full_mode_ones():
    for name, module in families().items():
        assert committed_records(name)["meta"]["quick"] is False, f"figures/data/{name}.json was made in quick mode"
        for png in module.FIGURES:
            assert is_committed(f"figures/{png}"), f"figures/{png} is not committed"


def _same_claims(have, want):
    """The same rows, each measured value equal to 12 significant digits: a value recomputed
    from the same records moves in its last bits with the machine's LAPACK (np.polyfit's
    least squares gave 0.9943972937706302 here for a committed 0.9943972937706272)."""
    def without_values(rows):
        return [{k: v for k, v in row.items() if k != "value"} for row in rows]
    values = [(a.get("value"), b.get("value")) for a, b in zip(have, want)]
    return without_values(have) == without_values(want) and all(
        a == pytest.approx(b, rel=1e-12, abs=0) if isinstance(b, float) else a == b for a, b in values)


@pytest.mark.parametrize("name", list(families()))
def test_committed_records_carry_todays_claims(name):
    """What `tinymem figures --replot --only NAME` would write: the claims of the code, judged
    on the committed records. A claim added, reworded or changed since is caught here."""
    records = committed_records(name)
    expected = evaluate(getattr(families()[name], "CLAIMS", []), records, quick=False)
    assert _same_claims(records.get("claims", []), json.loads(json.dumps(expected))), (
        f"figures/data/{name}.json holds other claims than the code states: run "
        f"`tinymem figures --replot --only {name}` (or the full sweep) and commit it")
