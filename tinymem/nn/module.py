"""Module, Parameter and Sequential: how a model finds its weights and its sub-modules.

A :class:`Module` finds its :class:`Parameter` s and sub-modules through attribute assignment, as
in PyTorch. Parameters live in the ledger's ``parameter`` bucket.
"""
from collections import OrderedDict

import numpy as np

from .. import backend
from ..autograd import Tensor
from ..checks import is_int, true_or_false
from ..memory import attribution


class Parameter(Tensor):
    """A Tensor that is a weight: it requires a gradient and counts in the ``parameter`` bucket.
    It stays on the device of the array it is given (layers make their arrays where they live)."""

    _bucket = "parameter"

    def __init__(self, data, requires_grad=True):
        data = data.data if isinstance(data, Tensor) else data
        super().__init__(data, requires_grad=requires_grad,
                         device=backend.device_of(data) if hasattr(data, "shape") else None)

    def __repr__(self):
        return "Parameter containing:\n" + super().__repr__()


class Module:
    """Base class: override ``forward``; call the module like a function."""

    def __init__(self):
        object.__setattr__(self, "_parameters", OrderedDict())
        object.__setattr__(self, "_modules", OrderedDict())
        object.__setattr__(self, "training", True)

    def __setattr__(self, name, value):
        if "_parameters" not in self.__dict__:
            raise AttributeError(f"call super().__init__() in {type(self).__name__}.__init__ first")
        # Re-assigning keeps the slot (dict assignment keeps order), as PyTorch does: a
        # Sequential whose layer is swapped must still run its layers in order.
        if not isinstance(value, Parameter):
            self._parameters.pop(name, None)
        if not isinstance(value, Module):
            self._modules.pop(name, None)
        if isinstance(value, Parameter):
            self._parameters[name] = value
        elif isinstance(value, Module):
            self._modules[name] = value
        object.__setattr__(self, name, value)

    def __call__(self, *args, **kwargs):
        if not attribution.ENABLED:
            return self.forward(*args, **kwargs)
        outer = attribution.enter_module(self)  # the ledger stamps new arrays with this path
        try:
            return self.forward(*args, **kwargs)
        finally:
            attribution.leave_module(outer)

    def forward(self, *args, **kwargs):
        raise NotImplementedError(f"{type(self).__name__} must define forward")

    # -- traversal -----------------------------------------------------------------------
    def named_modules(self, prefix="", _seen=None):
        """Every module once, by its first name (a module used twice, as in weight tying or
        ``Sequential(lin, act, lin)``, appears once, as in PyTorch)."""
        seen = set() if _seen is None else _seen
        if id(self) in seen:
            return
        seen.add(id(self))
        yield prefix, self
        for name, module in self._modules.items():
            yield from module.named_modules(f"{prefix}.{name}" if prefix else name, seen)

    def modules(self):
        return [m for _, m in self.named_modules()]

    def children(self):
        return list(self._modules.values())

    def named_children(self):
        """``(name, module)`` for each direct sub-module, in the order they were assigned."""
        yield from self._modules.items()

    def replace_child(self, name, module):
        """Put ``module`` in the slot of the child called ``name`` (the seam that quantization
        uses to swap a Linear for its quantized twin). The slot keeps its place in the order, so a
        Sequential still runs its layers in order. Memory: the old child is freed once nothing
        else holds it."""
        if name not in self._modules:
            raise KeyError(f"{type(self).__name__} has no child module {name!r}; its children are "
                           f"{', '.join(self._modules) or 'none'}")
        if not isinstance(module, Module):
            raise TypeError(f"replace_child: {name!r} must be replaced by a Module, not {type(module).__name__}")
        setattr(self, name, module)

    def named_parameters(self, prefix="", recurse=True):
        """``(dotted name, Parameter)`` for every parameter, each once; ``recurse=False`` gives
        only this module's own parameters."""
        seen = set()
        modules = self.named_modules(prefix) if recurse else [(prefix, self)]
        for mod_name, module in modules:
            for name, p in module._parameters.items():
                if p is not None and id(p) not in seen:
                    seen.add(id(p))
                    yield (f"{mod_name}.{name}" if mod_name else name), p

    def parameters(self):
        return [p for _, p in self.named_parameters()]

    def zero_grad(self, set_to_none=True):
        for p in self.parameters():
            if set_to_none:
                p.grad = None
            elif p.grad is not None:
                # In place, not `* 0`: a NaN or inf gradient (an fp16 overflow) would stay; a
                # row-sparse gradient keeps its rows, zeroed.
                data = p.grad.data
                (data.values if getattr(data, "is_sparse", False) else data)[...] = 0

    def train(self, mode=True):
        mode = true_or_false("train: mode", mode)  # "no" would leave Dropout dropping, by its truth
        for m in self.modules():
            object.__setattr__(m, "training", mode)
        return self

    def eval(self):
        return self.train(False)

    def to(self, device=None, dtype=None):
        """Move (and/or cast) every parameter in place, keeping the Parameter objects; a
        gradient moves and casts with its parameter, as in PyTorch. Each sub-module's extra
        state (running statistics, NF4 codes) moves too, through :meth:`_move_extra_state`, as
        PyTorch's buffers do (a sub-module's own ``to`` is not called when its parent moves).
        ``to("float16")`` and ``to(np.float16)`` cast, as ``Tensor.to`` does."""
        device, dtype = backend.device_or_dtype(device, dtype)
        device = backend.check_device(device) if device is not None else None
        dtype = backend.resolve_dtype(dtype)
        if dtype is not None and dtype.kind != "f":  # float weights cast to int8 would be truncated
            raise TypeError(f"Module.to casts the float parameters to a float dtype (float16, float32, "
                            f"float64), got {dtype.name}: for int8 weights quantize them "
                            "(tinymem.techniques.quantization, or NF4 via techniques.lora)")

        def moved(array):
            array = backend.to_device(array, device) if device is not None else array
            return array.astype(dtype) if dtype is not None and array.dtype.kind == "f" else array

        for p in self.parameters():
            p.data = moved(p.data)
            if p.grad is not None:
                # A row-sparse gradient has no device move: it is dropped, as every gradient was.
                sparse = getattr(p.grad.data, "is_sparse", False)
                p.grad = None if sparse else moved(p.grad.data)
        if device is not None:
            for module in self.modules():
                module._move_extra_state(device)
        return self

    def num_parameters(self):
        return sum(p.size for p in self.parameters())

    # -- state -------------------------------------------------------------------------------
    def state_dict(self):
        """Parameter arrays (copies, on the CPU) by dotted name, plus any extra buffers."""
        state = OrderedDict((name, p.numpy().copy()) for name, p in self.named_parameters())
        for mod_name, module in self.named_modules():
            for name, value in module._extra_state().items():
                state[f"{mod_name}.{name}" if mod_name else name] = np.array(backend.to_numpy(value))
        return state

    def load_state_dict(self, state):
        """Copy arrays into the parameters; names and shapes must match exactly. Extra state that
        a checkpoint lacks takes its module's default if it has one (:meth:`_extra_state_defaults`:
        a flag added after the checkpoint was saved), or is a missing key. Everything is checked
        before anything is copied: a refused load leaves the module as it was."""
        own = dict(self.named_parameters())
        buffers, state = {}, dict(state)
        for mod_name, module in self.named_modules():
            prefix = f"{mod_name}." if mod_name else ""
            for name in module._extra_state():
                buffers[prefix + name] = (module, name)
            for name, value in module._extra_state_defaults().items():
                state.setdefault(prefix + name, value)
        missing = sorted((set(own) | set(buffers)) - set(state))
        unexpected = sorted(set(state) - set(own) - set(buffers))
        if missing or unexpected:
            raise KeyError(f"load_state_dict: missing keys {missing}, unexpected keys {unexpected}")
        for key, (module, name) in buffers.items():
            current = np.shape(module._extra_state()[name])
            if np.shape(state[key]) != current:
                raise ValueError(f"load_state_dict: {key} has shape {np.shape(state[key])}, expected {current}")
            module._check_extra_state(key, name, state[key])
        for name, p in own.items():
            if np.shape(state[name]) != p.shape:
                raise ValueError(f"load_state_dict: {name} has shape {np.shape(state[name])}, expected {p.shape}")
        for name, p in own.items():
            value = np.asarray(state[name])
            p.data = backend.to_device(value.astype(p.dtype), p.device).copy()
        for key, (module, name) in buffers.items():
            module._load_extra_state(name, state[key])

    def _extra_state(self):
        """Non-parameter state to save (running statistics); empty by default."""
        return {}

    def _extra_state_defaults(self):
        """``{name: value}`` for extra state an older checkpoint may lack; none by default."""
        return {}

    def _check_extra_state(self, key, name, value):
        """Refuse (raise ValueError naming ``key``) a value :meth:`_load_extra_state` must not
        take; called before anything is loaded. Any value of the right shape by default."""

    def _load_extra_state(self, name, value):
        setattr(self, name, value)

    def _move_extra_state(self, device):
        """Put the extra state on ``device`` (called by :meth:`to`); nothing to move by default."""

    def __repr__(self):
        lines = [f"{type(self).__name__}({self.extra_repr()}"]
        for name, m in self._modules.items():
            lines.append(f"  ({name}): " + repr(m).replace("\n", "\n  "))
        return lines[0] + (")" if len(lines) == 1 else "\n" + "\n".join(lines[1:]) + "\n)")

    def extra_repr(self):
        return ""


class Sequential(Module):
    """Run modules in order. Indexable and iterable, like PyTorch's."""

    def __init__(self, *modules):
        super().__init__()
        if len(modules) == 1 and isinstance(modules[0], (list, tuple)):
            modules = modules[0]
        for i, m in enumerate(modules):
            if not isinstance(m, Module):  # setattr would keep it as a plain attribute, skipped by forward
                raise TypeError(f"Sequential takes Modules; item {i} is a {type(m).__name__}")
            setattr(self, str(i), m)

    def forward(self, x):
        for m in self._modules.values():
            x = m(x)
        return x

    def __getitem__(self, i):
        mods = list(self._modules.values())
        if isinstance(i, slice):
            return Sequential(*mods[i])
        if not is_int(i):
            raise TypeError(f"Sequential indices are integers or slices, got {type(i).__name__}")
        if not -len(mods) <= i < len(mods):
            raise IndexError(f"Sequential index {i!r} is out of range: it holds {len(mods)} modules "
                             f"(valid: -{len(mods)}..{len(mods) - 1}, or a slice)")
        return mods[i]

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())
