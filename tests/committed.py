"""The repository's files as committed, for the tests that hold the committed records and the
README against each other.

`tinymem figures` (the README's first command) rewrites figures/ with this machine's numbers,
and a run with `--out figures` may leave quick-mode records there: neither may change what
these tests read. So they read git's index (what is committed, or staged to be), never the
working tree. Outside a git checkout the committed files cannot be told from a run's, and the
tests that need them skip, saying so.
"""
import functools
import json
import pathlib
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


@functools.lru_cache(maxsize=None)
def _in_git_checkout():
    try:
        top = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--show-toplevel"],
                             capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return top.returncode == 0 and pathlib.Path(top.stdout.strip()).resolve() == ROOT


def _require_git(path):
    if not _in_git_checkout():
        pytest.skip(f"{ROOT} is not a git checkout: the committed {path} cannot be told from what a run left there")


@functools.lru_cache(maxsize=None)
def committed_bytes(path):
    """The file at ``path`` (relative to the repository's root) as git's index holds it."""
    _require_git(path)
    shown = subprocess.run(["git", "-C", str(ROOT), "show", f":{path}"], capture_output=True, timeout=60)
    if shown.returncode:
        raise FileNotFoundError(f"{path} is not committed ({shown.stderr.decode().strip()})")
    return shown.stdout


def committed_text(path):
    return committed_bytes(path).decode()


def committed_records(name, folder="figures"):
    """``folder/data/NAME.json`` as committed (``read_records`` reads the working tree)."""
    return json.loads(committed_text(f"{folder}/data/{name}.json"))


def is_committed(path):
    _require_git(path)
    return subprocess.run(["git", "-C", str(ROOT), "cat-file", "-e", f":{path}"], capture_output=True,
                          timeout=60).returncode == 0
