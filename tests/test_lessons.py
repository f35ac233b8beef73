"""Lessons are tests: every lesson runs as a script in quick mode."""
import os
import pathlib
import subprocess
import sys

import pytest

LESSONS = sorted((pathlib.Path(__file__).resolve().parents[1] / "lessons").glob("[0-9][0-9]_*.py"))


@pytest.mark.parametrize("lesson", LESSONS, ids=[p.stem for p in LESSONS])
def test_lesson_runs_in_quick_mode(lesson, tmp_path):
    env = dict(os.environ, TINYMEM_QUICK="1", MPLBACKEND="Agg", TINYMEM_LESSON_OUT=str(tmp_path))
    root = str(lesson.parents[1])
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    result = subprocess.run([sys.executable, str(lesson)], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, f"{lesson.name} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
