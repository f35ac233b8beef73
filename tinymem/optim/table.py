"""Bytes of optimizer state per parameter, computed from each optimizer's own formula.

Every optimizer class has ``bytes_for(shape, itemsize, group)``: the state bytes it creates for
one parameter of that shape once the parameter has taken a step. This module turns those
formulas into the table of the lesson and the figure, and predicts an optimizer's
``state_bytes()`` (which the tests hold against the real arrays and the ledger).

    CONFIGS        the optimizer settings compared across tinymem (label -> class and options)
    group_for      a class's PyTorch-style defaults, updated with options
    bytes_per_param(label, shape)   state bytes / elements for one parameter shape
    expected_state_bytes(opt)       the formula summed over an optimizer's parameters
"""
import inspect
import math

from . import (SGD, Adafactor, Adagrad, Adam, Adam8bit, AdamW, GaLore, Lion, RMSprop)

CONFIGS = {
    "SGD": (SGD, {}),
    "SGD momentum": (SGD, {"momentum": 0.9}),
    "Adagrad": (Adagrad, {}),
    "RMSprop": (RMSprop, {}),
    "RMSprop momentum centered": (RMSprop, {"momentum": 0.9, "centered": True}),
    "Adam": (Adam, {}),
    "AdamW": (AdamW, {}),
    "AdamW amsgrad": (AdamW, {"amsgrad": True}),
    "Lion": (Lion, {}),
    "Adafactor": (Adafactor, {}),
    "Adam8bit": (Adam8bit, {}),
    "Adam8bit linear": (Adam8bit, {"qmap": "linear"}),
    "GaLore r=32": (GaLore, {"rank": 32}),
}


def group_for(cls, options=()):
    """The hyper-parameters a group of ``cls`` has: its constructor defaults, then ``options``."""
    group = {name: param.default for name, param in inspect.signature(cls.__init__).parameters.items()
             if param.default is not inspect.Parameter.empty}
    group.update(dict(options))
    return group


def bytes_per_param(label, shape, itemsize=4):
    """State bytes per element of one parameter of ``shape`` under ``CONFIGS[label]``."""
    cls, options = CONFIGS[label]
    return cls.bytes_for(tuple(shape), itemsize, group_for(cls, options)) / math.prod(shape)


def fixed_bytes(optimizer):
    """State that belongs to the optimizer, not to a parameter (Adam8bit's maps, once used)."""
    return sum(a.nbytes for pair in getattr(optimizer, "_maps", {}).values() for a in pair)


def expected_state_bytes(optimizer):
    """What the formulas predict ``optimizer.state_bytes()`` is, once every parameter has stepped."""
    per_param = sum(type(optimizer).bytes_for(p.shape, p.dtype.itemsize, group)
                    for group in optimizer.param_groups for p in group["params"])
    return per_param + fixed_bytes(optimizer)


def table(shapes):
    """Rows ``{"optimizer", "bytes_per_param"}`` for a model given by its parameter shapes."""
    total = sum(math.prod(s) for s in shapes)
    rows = []
    for label, (cls, options) in CONFIGS.items():
        group = group_for(cls, options)
        state = sum(cls.bytes_for(tuple(s), 4, group) for s in shapes)
        if any(math.prod(s) >= group.get("min_8bit_size", math.inf) for s in shapes):
            state += cls.MAP_BYTES  # Adam8bit's two quantization maps, once per optimizer
        rows.append({"optimizer": label, "state_bytes": state, "bytes_per_param": state / total})
    return rows
