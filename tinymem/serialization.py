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

import numpy as np

from . import backend
from .autograd import Tensor
from .measure.files import write_atomically

_FORMAT = "tinymem-checkpoint-1"


class CheckpointError(ValueError):
    """The file is not a tinymem checkpoint, is truncated, or holds something unsupported."""


def _encode(value, arrays):
    if isinstance(value, Tensor):
        arrays.append(_contiguous(value.numpy()))
        return {"tensor": len(arrays) - 1}
    if isinstance(value, np.generic):  # np.float32(1.5) comes back a np.float32, not shape (1,)
        if value.dtype.hasobject:
            raise CheckpointError("object scalars cannot be saved without pickle")
        arrays.append(np.asarray(value))
        return {"scalar": len(arrays) - 1}
    if hasattr(value, "__array_interface__") or hasattr(value, "__cuda_array_interface__"):
        array = backend.to_numpy(value)
        if array.dtype.hasobject:  # also a structured dtype with an object field
            raise CheckpointError("object arrays cannot be saved without pickle")
        arrays.append(_contiguous(array))
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


def _contiguous(array):
    """``array`` in C order with its shape (``np.ascontiguousarray`` turns 0-d into shape (1,))."""
    return array if array.flags.c_contiguous else array.copy(order="C")


def _decode(node, arrays):
    """The value a manifest node stands for; anything malformed raises ``ValueError``."""
    if not isinstance(node, dict) or len(node) != 1:
        raise ValueError(f"a manifest entry must be a one-key object, got {node!r:.60}")
    (kind, payload), = node.items()
    if kind in ("tensor", "array", "scalar"):
        name = f"a{payload}"
        if type(payload) is not int or name not in arrays:
            raise ValueError(f"entry {node!r:.60} names no array of the archive")
        array = arrays[name]
        if kind == "scalar":
            if array.ndim != 0:
                raise ValueError(f"scalar entry {payload} holds an array of shape {array.shape}")
            return array[()]
        return Tensor(array) if kind == "tensor" else array
    if kind == "value":
        if payload is not None and not isinstance(payload, (bool, str)):
            raise ValueError(f"a 'value' entry holds None, a bool or a string, got {payload!r:.60}")
        return payload
    if kind in ("int", "float"):
        if not isinstance(payload, str):
            raise ValueError(f"an '{kind}' entry holds its number as text, got {payload!r:.60}")
        return int(payload) if kind == "int" else float(payload)
    if kind == "dict":
        if not isinstance(payload, list) or not all(isinstance(kv, list) and len(kv) == 2 for kv in payload):
            raise ValueError("a 'dict' entry holds a list of [key, value] pairs")
        out = {}
        for k, v in payload:
            key = _decode(k, arrays)
            if isinstance(key, (dict, list, np.ndarray, Tensor)):
                raise ValueError(f"a dict key cannot be a {type(key).__name__}")
            out[key] = _decode(v, arrays)
        return out
    if kind in ("list", "tuple"):
        if not isinstance(payload, list):
            raise ValueError(f"a '{kind}' entry holds a list of entries")
        items = [_decode(v, arrays) for v in payload]
        return tuple(items) if kind == "tuple" else items
    raise ValueError(f"unknown entry {kind!r} in the manifest")


def save(obj, path):
    """Write ``obj`` (state dicts, arrays, numbers...) to ``path`` atomically.

    A new file gets the usual permissions (0666 less the umask); an overwritten one keeps its own.
    """
    arrays = []
    try:
        manifest = {"format": _FORMAT, "root": _encode(obj, arrays)}
    except RecursionError:
        raise CheckpointError("the object is nested too deeply to save") from None
    members = {f"a{i}": a for i, a in enumerate(arrays)}
    members["manifest"] = np.frombuffer(json.dumps(manifest).encode(), dtype=np.uint8)
    write_atomically(path, lambda f: np.savez(f, **members), suffix=".npz")


def load(path):
    """Read a checkpoint written by :func:`save`. Never unpickles."""
    try:
        archive = np.load(path, allow_pickle=False)
        if not isinstance(archive, np.lib.npyio.NpzFile):  # a bare .npy array
            raise CheckpointError(f"{path} holds a single array ({type(archive).__name__}), not a tinymem "
                                  "checkpoint; read it with numpy.load")
        with archive:
            if "manifest" not in archive.files:
                raise CheckpointError(f"{path} is not a tinymem checkpoint (no manifest)")
            manifest = json.loads(archive["manifest"].tobytes().decode())
            if not isinstance(manifest, dict) or manifest.get("format") != _FORMAT:
                found = manifest.get("format") if isinstance(manifest, dict) else type(manifest).__name__
                raise CheckpointError(f"{path} has format {found!r}, expected {_FORMAT!r}")
            arrays = {name: archive[name] for name in archive.files if name != "manifest"}
    except (CheckpointError, FileNotFoundError, IsADirectoryError, PermissionError, MemoryError):
        raise
    except Exception as exc:  # noqa: BLE001 - a damaged file fails inside zipfile or NumPy's
        # header parser in many ways (BadZipFile, EOFError, an "encrypted" flag's RuntimeError,
        # NotImplementedError for an unknown zip version, tokenize's TokenError, ...): all of
        # them mean the same thing to the caller.
        raise CheckpointError(f"{path} is truncated or not a tinymem checkpoint "
                              f"({type(exc).__name__}: {exc})") from exc
    try:
        return _decode(manifest.get("root"), arrays)
    except (ValueError, TypeError, RecursionError) as exc:
        raise CheckpointError(f"{path} has a damaged manifest: {exc}") from exc
