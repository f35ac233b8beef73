"""The optimizer base class: parameter groups, per-parameter state in the ledger, save/load.

Subclasses write ``update_parameter(p, grad, state, group)`` for one parameter and create their state
arrays with :meth:`Optimizer.state_array`, which registers them in the ledger's ``optimizer``
bucket. :meth:`state_bytes` is then the exact size of the state, which the tests check against
the ledger and against each optimizer's bytes-per-parameter formula.
"""
import numpy as np

from .. import backend, memory


class Optimizer:
    """Base class with PyTorch's shape: ``param_groups``, ``state``, ``step()``, ``zero_grad()``."""

    defaults = {}
    # Whether update_parameter takes a tinymem.sparse.RowSparse gradient (embedding_bag(sparse=True)).
    accepts_sparse_grad = False
    # Where the update runs, so where its state arrays and temporaries are counted. Optimizer-
    # state offload sets "host" on an instance and hands ``update_parameter`` host arrays.
    update_place = "device"

    def __init__(self, params, **hyper):
        for key, value in hyper.items():
            if key == "lr" and (not isinstance(value, (int, float)) or value < 0):
                raise ValueError(f"invalid learning rate {value!r}: it must be a number >= 0")
        params = list(params)
        if not params:
            raise ValueError("optimizer got an empty parameter list")
        groups = params if isinstance(params[0], dict) else [{"params": params}]
        self.param_groups = []
        for group in groups:
            full = dict(hyper)
            full.update(group)
            full["params"] = list(full["params"])
            self.param_groups.append(full)
        self.state = {}

    # -- the loop --------------------------------------------------------------------------
    def zero_grad(self, set_to_none=True):
        for group in self.param_groups:
            for p in group["params"]:
                if set_to_none:
                    p.grad = None
                elif p.grad is not None:
                    p.grad.data[...] = 0

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
                state = self.state.setdefault(p, {})
                self.update_parameter(p, p.grad.data, state, group)

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
        """
        return memory.register(array, "workspace", place=self.update_place)

    def _average_square(self, v, g, decay):
        """``v = decay * v + (1 - decay) * g * g`` in place, one ``g``-sized temporary at a time
        (Adam's second moment, RMSprop's square average)."""
        v *= decay
        sq = self.scratch(g * g)
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
            groups.append(entry)
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict):
        params = [p for g in self.param_groups for p in g["params"]]
        groups = state_dict["param_groups"]
        if len(groups) != len(self.param_groups) or any(
                len(a["params"]) != len(b["params"]) for a, b in zip(groups, self.param_groups)):
            raise ValueError("load_state_dict: the saved optimizer has a different parameter layout")
        for mine, saved in zip(self.param_groups, groups):
            mine.update({k: v for k, v in saved.items() if k != "params"})
        self.state = {}
        for i, s in state_dict["state"].items():
            p = params[int(i)]
            restored = {}
            for k, v in s.items():
                if isinstance(v, np.ndarray) and v.ndim > 0:
                    arr = backend.to_device(np.array(v), p.device)
                    restored[k] = memory.register(arr, "optimizer")
                else:
                    restored[k] = v.item() if isinstance(v, np.ndarray) else v
            self.state[p] = restored


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

