"""Records: the JSON behind each figure, with the machine, versions and date it came from."""
import datetime
import importlib.metadata
import json
import os
import platform

import numpy as np

from .. import backend
from ..version import __version__


def machine_name(device="cpu"):
    """The CPU model (from /proc/cpuinfo where it exists) or the GPU's name."""
    if device == "cuda":
        cupy = backend.get_cupy()
        props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
        name = props["name"]
        return name.decode() if isinstance(name, bytes) else str(name)
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip() + f" ({os.cpu_count()} cores)"
    except OSError:
        pass
    return (platform.processor() or platform.machine()) + f" ({os.cpu_count()} cores)"


def meta(device="cpu", quick=False):
    info = {"machine": machine_name(device), "device": device, "quick": bool(quick),
            "date": datetime.date.today().isoformat(), "tinymem": __version__,
            "numpy": np.__version__, "python": platform.python_version()}
    if device == "cuda":
        info["cupy"] = backend.get_cupy().__version__
    # PyTorch's version read from its installed metadata, not by importing it: the import took
    # about 2 s and left some 20,000 of its functions on the heap, where every gc.collect() of a
    # measurement (the planner's probe, the leak finder) walked them (lesson 08: 19 s of its 33).
    try:
        info["torch"] = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        pass
    return info


def _plain(value):
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    # An array on either device, or a Tensor (not imported: measure sits below autograd)
    if isinstance(value, np.ndarray) or hasattr(value, "__cuda_array_interface__") or hasattr(value, "requires_grad"):
        return backend.to_numpy(value).tolist()
    return value


def write_records(records, outdir, name):
    """Write ``outdir/data/name.json`` atomically (a temporary file renamed into place)."""
    folder = os.path.join(outdir, "data")
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"{name}.json")
    tmp = path + ".tmp"
    try:
        with open(tmp, "w") as f:
            json.dump(_plain(records), f, indent=1)
        os.replace(tmp, path)
    except BaseException:  # a value JSON cannot hold, a full disk, Ctrl-C: no half-written file left
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
    return path


def read_records(outdir, name):
    with open(os.path.join(outdir, "data", f"{name}.json")) as f:
        return json.load(f)
