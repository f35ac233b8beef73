"""The rl family's learning runs give the same records in parallel as one after another."""
import json

import pytest

from tinymem.experiments import rl

pytest.importorskip("gymnasium")


def test_learning_runs_in_parallel_give_the_records_of_runs_in_turn():
    strip = lambda runs: json.dumps([{k: v for k, v in r.items() if k != "seconds"} for r in runs])  # noqa: E731
    parallel, in_turn = rl.run_learning(True, [0], workers=2), rl.run_learning(True, [0], workers=1)
    assert [r["label"] for r in parallel] == ["naive", "compact"]
    assert strip(parallel) == strip(in_turn)
