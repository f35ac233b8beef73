"""`tinymem figures --quick` writes every figure of every family, each with the JSON behind it.

Each family's PNGs are then drawn a second time from the JSON alone (what a reader does to
restyle a figure): that proves the records hold every quantity the figure plots.
"""
import json
import os

import pytest

from tinymem import cli
from tinymem.experiments import families


@pytest.fixture(scope="module")
def quick_figures(tmp_path_factory):
    out = tmp_path_factory.mktemp("figures")
    assert cli.main(["figures", "--quick", "--out", str(out)]) == 0
    return out


@pytest.mark.parametrize("name", list(families()))
def test_family_writes_its_figures_and_records(quick_figures, name, tmp_path):
    module = families()[name]
    for png in module.FIGURES:
        assert os.path.getsize(quick_figures / png) > 5_000, f"{name}: {png} missing or empty"
    records = json.loads((quick_figures / "data" / f"{name}.json").read_text())
    meta = records["meta"]
    assert meta["quick"] is True and meta["device"] == "cpu" and meta["machine"] and meta["date"]
    redrawn = module.plot(records, str(tmp_path))
    assert sorted(os.path.basename(p) for p in redrawn) == sorted(module.FIGURES)


def test_committed_figures_are_the_full_mode_ones():
    root = os.path.join(os.path.dirname(__file__), "..", "..", "figures")
    for name, module in families().items():
        with open(os.path.join(root, "data", f"{name}.json")) as f:
            meta = json.load(f)["meta"]
        assert meta["quick"] is False, f"figures/data/{name}.json was made in quick mode"
        for png in module.FIGURES:
            assert os.path.exists(os.path.join(root, png)), f"figures/{png} is not committed"
