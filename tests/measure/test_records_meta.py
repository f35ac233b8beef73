"""A run's ``meta`` names the PyTorch it ran beside without importing it: the import took about
2 s per lesson and figure process and put PyTorch's objects on the heap that every
``gc.collect()`` before a measurement walks (lesson 08 spent 19 s of 33 there)."""
import importlib.util
import subprocess
import sys

import pytest

CODE = ("import sys; from tinymem.measure.records import meta; info = meta(); "
        "print(info.get('torch'), 'torch' in sys.modules)")


def test_meta_does_not_import_torch():
    done = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[-1] == "False", f"meta() imported torch: {done.stdout}"


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="PyTorch is not installed")
def test_meta_names_the_installed_torch_as_torch_does():
    import torch
    done = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, timeout=120)
    assert done.stdout.split()[0] == torch.__version__
