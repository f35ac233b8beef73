"""Figure families: one module per family, found automatically.

A family module defines
    NAME     the family's name (``tinymem figures --only NAME``)
    ORDER    a number that places it in the run (foundation first, the course last)
    FIGURES  the PNG file names it writes
    run(quick, device) -> dict   the sweep; returns JSON-able records (config, memory, time, quality)
    plot(records, outdir) -> list[str]   draws the PNGs from the records alone
so every figure can be redrawn from its JSON without rerunning the sweep. Adding a family is
adding a file; nothing else needs editing.
"""
import importlib
import pkgutil

from .. import backend

# The families that run on the CPU only, each with why: their run() refuses another device with
# this reason, `tinymem figures --device cuda` skips them, and the tests run every other family on
# "cuda". The one list of them; every family not named here runs on either device.
CPU_ONLY_FAMILIES = {
    "rl": "the replay buffer is host memory by design, and the CartPole network is too small for a GPU to matter",
    "edge": "ONNX Runtime's CPU kernels and a microcontroller's memory are the subject",
    "torch_conventions": "it measures PyTorch steps with the CPU profiler; the CUDA prediction is unmeasured until "
                         "a GPU confirms it",
}


def refuse_device(name, device):
    """Raise ValueError when the CPU-only family ``name`` is asked to run on ``device`` (any
    spelling of a device that is not the CPU: "cuda", "cuda:0", "CUDA"; ``None`` is the default)."""
    if (backend.default_device() if device is None else str(device).lower()) != "cpu":
        raise ValueError(f"the {name} figures run on the CPU: {CPU_ONLY_FAMILIES[name]}")


def families():
    """``{name: module}`` for every family, in run order."""
    found = []
    for info in pkgutil.iter_modules(__path__):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        if hasattr(module, "run") and hasattr(module, "NAME"):
            found.append(module)
    found.sort(key=lambda m: (getattr(m, "ORDER", 50), m.NAME))
    return {m.NAME: m for m in found}
