"""Paged optimizer state (QLoRA): state leaves the device when memory spikes, and comes back.

``opt = paged(tm.optim.Adam(lora_params))`` keeps the optimizer's state on the device as usual,
but registers the optimizer as a *pager* of the ledger: when an allocation (an activation spike
in a long sequence, say) would exceed the device budget, the ledger asks it to move state to
the host first, least recently used parameter first, and only raises ``OutOfMemoryError`` if
that was not enough. At ``step()`` each parameter's state is brought back to the device just
before its update, and stays there until the next spike. bitsandbytes' paged optimizers get
the same effect from CUDA unified memory, which pages on demand; here each move is explicit and
counted, a whole parameter's state at a time.

Contract:
- The arithmetic is the wrapped optimizer's own ``update_parameter`` on the same arrays: the
  copies are exact, so a paged run is bit for bit the unpaged one.
- The state of the parameter being updated is never paged out from under its update.
- Only a budget (``tinymem.track(budget=...)``) triggers paging; without one nothing moves.
- ``state_dict()`` is the wrapped optimizer's, wherever each array is at the time (paged-out
  state is saved like the rest), plus the paging order; ``load_state_dict`` puts all state on
  the device, as a plain optimizer's load does. Either loads the other's state dict, so a paged
  fine-tune resumes bit for bit, paged or not.

Memory: at most the wrapped optimizer's state on the device (less while paged out: those
bytes are counted at place ``host``); during a page-in, the state of one parameter on both
sides. Traffic: the paged bytes out, and back in at the next step. On NumPy the device and the
host are the same RAM: the move is the ledger's accounting and a memcpy, not a saving.
"""
import numpy as np

from ... import backend, memory
from ...checks import is_int
from ...optim.optimizer import OptimizerWrapper


class PagedOptimizer(OptimizerWrapper):
    """Wraps a tinymem optimizer; see the module docstring. ``stats()`` counts what moved."""

    def __init__(self, optimizer):
        if not hasattr(optimizer, "update_parameter"):
            raise TypeError(f"paged() wraps a tinymem optimizer (e.g. optim.Adam(params)), got a "
                            f"{type(optimizer).__name__}")
        super().__init__(optimizer)
        self._order = {}  # id -> parameter, by last update, oldest first: the first to page out
        self._pinned = None
        self.bytes_out = self.bytes_in = 0
        memory.add_pager(self)

    def zero_grad(self, set_to_none=True):
        self.optimizer.zero_grad(set_to_none)

    def state_bytes(self):
        return self.optimizer.state_bytes()

    def stats(self):
        return {"bytes_paged_out": self.bytes_out, "bytes_paged_in": self.bytes_in}

    def state_dict(self):
        """The wrapped optimizer's state dict (arrays copied to the CPU from the device or the
        host), with ``"paging_order"``: the parameters' indices, least recently updated first."""
        state = self.optimizer.state_dict()
        index = {id(p): i for i, p in enumerate(p for g in self.param_groups for p in g["params"])}
        state["paging_order"] = [index[key] for key in self._order]
        return state

    def load_state_dict(self, state_dict):
        """Load a paged or plain optimizer's state dict; all state lands on the device."""
        params = [p for g in self.param_groups for p in g["params"]]
        order = state_dict.get("paging_order", range(len(params))) if isinstance(state_dict, dict) else ()
        if not isinstance(order, (list, tuple, range)) or not all(is_int(i) and 0 <= i < len(params) for i in order):
            raise ValueError(f"load_state_dict: paging_order must list parameter indices below {len(params)}, "
                             f"got {order!r:.80}")
        self.optimizer.load_state_dict(state_dict)
        self._order = {id(params[i]): params[i] for i in order if self.state.get(params[i]) is not None}

    def step(self):
        memory.mark("optimizer")
        for group in self.optimizer.param_groups:  # every gradient checked before any update
            for p in group["params"]:
                if (p.grad is not None and getattr(p.grad.data, "is_sparse", False)
                        and not self.optimizer.accepts_sparse_grad):
                    raise TypeError(
                        f"paged {type(self.optimizer).__name__} does not take sparse gradients (parameter of shape "
                        f"{tuple(p.shape)}): use optim.RowWiseAdagrad, or make the lookup with sparse=False")
        for group in self.optimizer.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                self._pinned = p
                try:
                    state = self._page_in(p, dict(self.optimizer.state.get(p, ())))
                    self.optimizer.update_parameter(p, p.grad.data, state, group)
                    self.optimizer.state[p] = state
                finally:
                    self._pinned = None
                self._order.pop(id(p), None)  # by id: a Tensor's == is elementwise
                self._order[id(p)] = p

    def page_out(self, nbytes):
        """Move whole parameters' state to the host, oldest first, until ``nbytes`` are freed."""
        freed = 0
        for p in list(self._order.values()):
            if freed >= nbytes:
                break
            state = self.optimizer.state.get(p)
            if p is self._pinned or state is None:
                continue
            for key, value in state.items():
                if _on_device(value):
                    host = memory.register(np.array(backend.to_numpy(value), copy=True), "optimizer", "host")
                    state[key] = host
                    freed += host.nbytes
                    self.bytes_out += host.nbytes

    def _page_in(self, p, state):
        xp = backend.array_module(p.data)
        for key, value in state.items():
            if hasattr(value, "nbytes") and memory.locate(value) == ("optimizer", "host"):
                state[key] = memory.register(xp.array(value, copy=True), "optimizer")
                self.bytes_in += value.nbytes
        return state

    def close(self):
        """Stop paging (the state stays where it is)."""
        memory.remove_pager(self)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


def _on_device(value):
    return hasattr(value, "nbytes") and memory.locate(value) == ("optimizer", "device")


def paged(optimizer):
    """Wrap ``optimizer`` so its state pages to the host under memory pressure; see
    :class:`PagedOptimizer`."""
    return PagedOptimizer(optimizer)
