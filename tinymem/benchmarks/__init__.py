"""Benchmarks for ``tinymem bench``: one module per benchmark, found automatically.

A benchmark module defines ``NAME``, a one-line ``DESCRIPTION`` and ``run(quick) -> list[dict]``
(rows of a table that ``tinymem bench`` prints). Timings are always taken side by side in one
run and reported as ratios, because machines are noisy.
"""
import importlib
import pkgutil


def benchmarks():
    found = {}
    for info in pkgutil.iter_modules(__path__):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        if hasattr(module, "run") and hasattr(module, "NAME"):
            found[module.NAME] = module
    return dict(sorted(found.items()))
