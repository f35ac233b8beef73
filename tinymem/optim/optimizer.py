"""The optimizer base class: parameter groups, per-parameter state in the ledger, save/load.

Subclasses write ``update_parameter(p, grad, state, group)`` for one parameter and create their state
arrays with :meth:`Optimizer.state_array`, which registers them in the ledger's ``optimizer``
bucket. :meth:`state_bytes` is then the exact size of the state, which the tests check against
the ledger and against each optimizer's bytes-per-parameter formula.
"""
import math
import numbers

import numpy as np

from .. import backend, memory

# Hyper-parameters that must not be negative (a negative decay rate or damping trains backwards).
_NON_NEGATIVE = ("lr", "momentum", "dampening", "weight_decay", "eps", "lr_decay",
                 "initial_accumulator_value")


_LAYOUT = ("params", "param_shapes")  # entries of a saved group that are not hyper-parameters


def _groups(params):
    """The parameter groups of ``params``: an iterable of Tensors, or of dicts (one per group)."""
    if hasattr(params, "grad") and hasattr(params, "data"):
        raise TypeError("params must be an iterable of Tensors or of dicts (parameter groups), "
                        f"got one Tensor of shape {tuple(params.shape)}: pass [w] or model.parameters()")
    if isinstance(params, dict):
        raise TypeError("params must be an iterable of Tensors or of dicts, got one dict: pass [group]")
    if hasattr(params, "parameters"):
        raise TypeError(f"params must be an iterable of Tensors, got a {type(params).__name__} module: "
                        "pass model.parameters()")
    if not hasattr(params, "__iter__"):
        raise TypeError(f"params must be an iterable of Tensors or of dicts (parameter groups), got {params!r}")
    params = list(params)
    if not params:
        raise ValueError("optimizer got an empty parameter list")
    if isinstance(params[0], dict):
        if not all(isinstance(g, dict) and "params" in g for g in params):
            raise TypeError("parameter groups must all be dicts with a 'params' entry")
        return params
    return [{"params": params}]


class Optimizer:
    """Base class with PyTorch's shape: ``param_groups``, ``state``, ``step()``, ``zero_grad()``."""

    defaults = {}
    # Whether update_parameter takes a tinymem.sparse.RowSparse gradient (embedding_bag(sparse=True)).
    accepts_sparse_grad = False
    # Where the update runs, so where its state arrays and temporaries are counted. Optimizer-
    # state offload sets "host" on an instance and hands ``update_parameter`` host arrays.
    update_place = "device"

    def __init__(self, params, **hyper):
        self.param_groups = [self._checked_group(group, hyper) for group in _groups(params)]
        seen = set()
        for group in self.param_groups:
            for p in group["params"]:
                if id(p) in seen:
                    raise ValueError(f"a parameter of shape {tuple(p.shape)} is given to the optimizer "
                                     "twice: it would be updated twice per step; pass each parameter once")
                seen.add(id(p))
        self.state = {}

    @staticmethod
    def _checked_group(group, hyper):
        """``hyper`` updated with ``group``, every number checked: NaN or inf would spread into
        every weight at the first step, and a negative rate or decay trains backwards."""
        full = dict(hyper)
        full.update(group)
        params = full["params"]
        full["params"] = [params] if hasattr(params, "grad") and hasattr(params, "data") else list(params)
        for i, p in enumerate(full["params"]):
            if not hasattr(p, "grad") or not hasattr(p, "data"):
                raise TypeError(f"optimizer can only optimize Tensors, but parameter {i} is a "
                                f"{type(p).__name__}")
            if getattr(p, "grad_fn", None) is not None:
                raise ValueError(f"parameter {i} is not a leaf (it was computed by "
                                 f"{type(p.grad_fn).__name__}): optimize the tensors you created, "
                                 "or .detach() it and set requires_grad")
        for key, value in full.items():
            for number in value if isinstance(value, tuple) else (value,):
                if isinstance(number, bool) or not isinstance(number, numbers.Real):
                    continue
                what = f"learning rate lr={value!r}" if key == "lr" else f"{key}={value!r}"
                if not math.isfinite(number):
                    raise ValueError(f"invalid {what}: it must be a finite number")
                if key in _NON_NEGATIVE and number < 0:
                    raise ValueError(f"invalid {what}: it must be >= 0")
        betas = full.get("betas")
        if betas is not None:
            if not (isinstance(betas, (tuple, list)) and len(betas) == 2):
                raise TypeError(f"betas must be a pair (beta1, beta2), got {betas!r}")
            if not all(isinstance(b, numbers.Real) and 0 <= b < 1 for b in betas):
                # Checked per group too: a group's own betas = (0.9, 1.0) made a step NaN.
                raise ValueError(f"invalid betas={betas!r}: each must be a number in [0, 1)")
            full["betas"] = tuple(betas)
        if "lr" in full and (isinstance(full["lr"], bool) or not isinstance(full["lr"], numbers.Real)):
            raise ValueError(f"invalid learning rate {full['lr']!r}: it must be a number >= 0")
        return full

    # -- the loop --------------------------------------------------------------------------
    def zero_grad(self, set_to_none=True):
        for group in self.param_groups:
            for p in group["params"]:
                if set_to_none:
                    p.grad = None
                elif p.grad is not None:
                    data = p.grad.data  # a row-sparse gradient keeps its rows, zeroed
                    (data.values if getattr(data, "is_sparse", False) else data)[...] = 0

    def step(self):
        """Update every parameter that has a gradient (in place: its array keeps its identity)."""
        memory.mark("optimizer")
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                if getattr(p.grad.data, "is_sparse", False) and not self.accepts_sparse_grad:
                    raise TypeError(
                        f"{type(self).__name__} does not take sparse gradients (parameter of shape "
                        f"{tuple(p.shape)}): use optim.RowWiseAdagrad, or make the lookup with sparse=False")
                # The update fills a copy of the state, kept only when it succeeds: an error half
                # way through creating it (an OutOfMemoryError at the second buffer) leaves no
                # half-made state behind, so the retry that the error suggests starts clean.
                state = dict(self.state.get(p, ()))
                self.update_parameter(p, p.grad.data, state, group)
                self.state[p] = state

    def update_parameter(self, p, grad, state, group):
        raise NotImplementedError(f"{type(self).__name__} must define update_parameter")

    # -- state -----------------------------------------------------------------------------
    def state_array(self, like, dtype=None, shape=None, fill=0):
        """A new state array registered in the ``optimizer`` bucket at :attr:`update_place`."""
        xp = backend.array_module(like)
        array = xp.full(like.shape if shape is None else shape, fill,
                        dtype=like.dtype if dtype is None else dtype)
        return memory.register(array, "optimizer", place=self.update_place)

    def scratch(self, array):
        """Count a temporary of the update (``lr * grad``, say) in ``workspace``.

        Temporaries the size of a parameter are what pushes the step's peak above the sum of
        the buckets; registering them keeps the ledger's peak honest against the allocator's.
        Arithmetic on a 0-d NumPy array gives a NumPy scalar, which cannot be written into
        (``out=``, ``+=``); it comes back as a 0-d array, so a scalar parameter steps like any other.
        """
        if isinstance(array, np.generic):
            array = np.asarray(array)
        return memory.register(array, "workspace", place=self.update_place)

    def _average_square(self, v, g, decay, out=None):
        """``v = decay * v + (1 - decay) * g * g`` in place, one ``g``-sized temporary at a time
        (Adam's second moment, RMSprop's square average), or in ``out`` when given."""
        v *= decay
        sq = self.scratch(g * g) if out is None else backend.array_module(g).multiply(g, g, out=out)
        sq *= 1 - decay
        v += sq

    def state_bytes(self):
        """Bytes held by the optimizer state (arrays only; step counters are Python ints)."""
        return sum(v.nbytes for s in self.state.values() for v in s.values() if hasattr(v, "nbytes"))

    def state_dict(self):
        """``{"state": {index: {name: array or number}}, "param_groups": [...]}`` as PyTorch.

        Parameters are named by their position across the groups; arrays are copied to the CPU.
        """
        index = {id(p): i for i, p in enumerate(p for g in self.param_groups for p in g["params"])}
        state = {}
        for p, s in self.state.items():
            state[index[id(p)]] = {k: (backend.to_numpy(v).copy() if hasattr(v, "shape") else v)
                                   for k, v in s.items()}
        groups = []
        for g in self.param_groups:
            entry = {k: v for k, v in g.items() if k != "params"}
            entry["params"] = [index[id(p)] for p in g["params"]]
            entry["param_shapes"] = [list(p.shape) for p in g["params"]]  # checked by load_state_dict
            groups.append(entry)
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict):
        """Restore hyper-parameters and state saved by :meth:`state_dict`.

        The saved state must fit these parameters: the layout (groups, parameters per group)
        and each parameter's state bytes by the optimizer's own formula (``bytes_for``), so a
        state saved from a model of other shapes is refused here, not deep in a later step.
        """
        if not isinstance(state_dict, dict) or not {"state", "param_groups"} <= set(state_dict):
            raise ValueError("load_state_dict expects the dict of optimizer.state_dict(), with "
                             "'state' and 'param_groups' entries")
        params = [p for g in self.param_groups for p in g["params"]]
        groups = state_dict["param_groups"]
        if len(groups) != len(self.param_groups) or any(
                len(a["params"]) != len(b["params"]) for a, b in zip(groups, self.param_groups)):
            raise ValueError("load_state_dict: the saved optimizer has a different parameter layout")
        # checked as the constructor checks its options: a saved lr of NaN would make every weight NaN
        merged = [self._checked_group(dict(mine, **{k: v for k, v in saved.items() if k not in _LAYOUT}), {})
                  for mine, saved in zip(self.param_groups, groups)]
        group_of = [g for g in merged for _ in g["params"]]
        saved_shapes = [s for g in groups for s in g.get("param_shapes", [None] * len(g["params"]))]
        for i, (p, shape) in enumerate(zip(params, saved_shapes)):
            if shape is not None and tuple(shape) != tuple(p.shape):
                raise ValueError(f"load_state_dict: parameter {i} has shape {tuple(p.shape)}, the state "
                                 f"was saved for shape {tuple(shape)}: it comes from a model of other shapes")
        state = {}
        for i, s in state_dict["state"].items():
            if not 0 <= int(i) < len(params):
                raise ValueError(f"load_state_dict: state for parameter {i}, but the optimizer has "
                                 f"{len(params)} parameters")
            p = params[int(i)]
            restored = {}
            for k, v in s.items():
                # state_dict saves buffers as arrays and counters as numbers: a 0-d array is the
                # buffer of a 0-d parameter (made a float, the next step raised or went wrong)
                if isinstance(v, np.ndarray):
                    restored[k] = backend.to_device(np.array(v), p.device)
                else:
                    restored[k] = v.item() if isinstance(v, np.generic) else v
            self._check_loaded(int(i), p, restored, group_of[int(i)])
            state[p] = restored
        for mine, checked in zip(self.param_groups, merged):
            mine.update({k: v for k, v in checked.items() if k != "params"})
        self.state = {p: {k: memory.register(v, "optimizer") if hasattr(v, "shape") else v
                          for k, v in s.items()} for p, s in state.items()}

    def _check_loaded(self, index, p, state, group):
        arrays = {k: v for k, v in state.items() if hasattr(v, "shape")}
        shapes = ", ".join(f"{k} {tuple(v.shape)}" for k, v in arrays.items())
        for k, v in arrays.items():
            if v.size == p.size and tuple(v.shape) != tuple(p.shape):
                raise ValueError(f"load_state_dict: parameter {index} has shape {tuple(p.shape)} but "
                                 f"its saved {k} has shape {tuple(v.shape)}: the state comes from a "
                                 "model of other shapes")
        bytes_for = getattr(type(self), "bytes_for", None)
        if bytes_for is None or not arrays:
            return
        expected = bytes_for(tuple(p.shape), p.dtype.itemsize, group)
        if sum(v.nbytes for v in arrays.values()) != expected:
            raise ValueError(f"load_state_dict: parameter {index} of shape {tuple(p.shape)} needs "
                             f"{expected} B of {type(self).__name__} state, the saved state has "
                             f"{shapes}: it comes from a model of other shapes or dtypes")


class OptimizerWrapper:
    """Base of techniques that wrap an optimizer (fp32 masters, offloaded state).

    ``param_groups`` and ``state`` are the wrapped optimizer's, so learning-rate schedules and
    :class:`~tinymem.techniques.precision.grad_scaler.GradScaler` work on the wrapper unchanged.
    """

    def __init__(self, optimizer):
        self.optimizer = optimizer

    @property
    def param_groups(self):
        return self.optimizer.param_groups

    @property
    def state(self):
        return self.optimizer.state

    @state.setter
    def state(self, value):
        # A wrapper wrapped again (half() around an offloaded optimizer re-keys the state).
        self.optimizer.state = value

