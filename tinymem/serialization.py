"""``tm.save(obj, path)`` / ``tm.load(path)``: checkpoints without pickle, written atomically.

A checkpoint is a NumPy ``.npz`` archive: every array of ``obj`` is one member, and a JSON
manifest (itself stored as a uint8 array) describes the nesting of dicts, lists, tuples,
numbers, strings, booleans and ``None`` around them. Loading uses ``allow_pickle=False``, so a
checkpoint from a stranger can hand you arrays and plain values, never run code (``torch.load``
had to add ``weights_only=True`` for the same reason).

The write goes to a temporary file in the same folder, is flushed to disk, then renamed over the
target: a crash mid-save leaves the previous checkpoint intact, and the temporary file is removed
when an exception escapes. A truncated or foreign file raises :class:`CheckpointError` naming it.

Memory: saving copies GPU arrays to the host one at a time; loading returns NumPy arrays (move
them with ``model.load_state_dict`` / ``Tensor.to``).
"""
import json
import os
import tempfile
import zipfile

import numpy as np

from . import backend
from .autograd import Tensor

_FORMAT = "tinymem-checkpoint-1"


class CheckpointError(ValueError):
    """The file is not a tinymem checkpoint, is truncated, or holds something unsupported."""


def _encode(value, arrays):
    if isinstance(value, Tensor):
        arrays.append(value.numpy())
        return {"tensor": len(arrays) - 1}
    if hasattr(value, "__array_interface__") or hasattr(value, "__cuda_array_interface__"):
        array = backend.to_numpy(value)
        if array.dtype == object:
            raise CheckpointError("object arrays cannot be saved without pickle")
        arrays.append(np.ascontiguousarray(array))
        return {"array": len(arrays) - 1}
    if value is None or isinstance(value, (bool, str)):
        return {"value": value}
    if isinstance(value, (int, np.integer)):
        return {"int": str(int(value))}  # as text: JSON numbers lose precision past 2**53
    if isinstance(value, (float, np.floating)):
        return {"float": repr(float(value))}  # repr round-trips, inf and nan included
    if isinstance(value, dict):
        return {"dict": [[_encode(k, arrays), _encode(v, arrays)] for k, v in value.items()]}
    if isinstance(value, (list, tuple)):
        return {"tuple" if isinstance(value, tuple) else "list": [_encode(v, arrays) for v in value]}
    raise CheckpointError(f"cannot save a {type(value).__name__}: checkpoints hold arrays, Tensors, "
                          "numbers, strings, None and dicts/lists/tuples of them")


def _decode(node, arrays):
    (kind, payload), = node.items()
    if kind == "tensor":
        return Tensor(arrays[f"a{payload}"])
    if kind == "array":
        return arrays[f"a{payload}"]
    if kind == "value":
        return payload
    if kind == "int":
        return int(payload)
    if kind == "float":
        return float(payload)
    if kind == "dict":
        return {_decode(k, arrays): _decode(v, arrays) for k, v in payload}
    if kind in ("list", "tuple"):
        items = [_decode(v, arrays) for v in payload]
        return tuple(items) if kind == "tuple" else items
    raise CheckpointError(f"unknown entry {kind!r} in the manifest")


def save(obj, path):
    """Write ``obj`` (state dicts, arrays, numbers...) to ``path`` atomically."""
    arrays = []
    manifest = {"format": _FORMAT, "root": _encode(obj, arrays)}
    members = {f"a{i}": a for i, a in enumerate(arrays)}
    members["manifest"] = np.frombuffer(json.dumps(manifest).encode(), dtype=np.uint8)
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".npz", dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez(f, **members)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def load(path):
    """Read a checkpoint written by :func:`save`. Never unpickles."""
    try:
        with np.load(path, allow_pickle=False) as archive:
            if "manifest" not in archive.files:
                raise CheckpointError(f"{path} is not a tinymem checkpoint (no manifest)")
            manifest = json.loads(archive["manifest"].tobytes().decode())
            if manifest.get("format") != _FORMAT:
                raise CheckpointError(f"{path} has format {manifest.get('format')!r}, expected {_FORMAT!r}")
            arrays = {name: archive[name] for name in archive.files if name != "manifest"}
    except CheckpointError:
        raise
    except FileNotFoundError:
        raise
    except (zipfile.BadZipFile, ValueError, OSError, EOFError, KeyError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"{path} is truncated or not a tinymem checkpoint ({exc})") from exc
    return _decode(manifest["root"], arrays)
