"""Selective recomputation: a checkpoint that keeps the outputs of chosen ops and recomputes the rest.

Full recomputation runs a segment's whole forward again in backward. Most of that time is in a
few ops (matmuls, convolutions) and most of the saved bytes in many cheap ones (norms,
activations, softmax, elementwise arithmetic): Korthikanti et al. (2022, "Reducing Activation
Recomputation in Large Transformer Models") keep the first and recompute the second, and
PyTorch offers it as selective activation checkpointing. Here a :class:`Policy` names ops by
their Function class: ``Policy(save=["linear", "matmul", "conv2d"])`` keeps the outputs of
those ops, ``Policy(recompute=["layer_norm"])`` keeps every op that can be kept except those.

How: the checkpoint's forward runs the segment through an :class:`~tinymem.autograd.op_hook`
that stores the outputs of the kept ops (in the order they ran) and saves them for backward
with the segment's inputs. In backward the recomputation runs through a hook that hands each
kept op its stored output and only calls the op's ``keep_for_backward`` (what its forward
saves, without the arithmetic); every other op runs again. The stored outputs are the values
the recomputation would have produced, so gradients are bit-identical to the plain run.

Memory: the segment's inputs plus every kept output (the ledger's ``activation`` bucket), and
during backward one recomputed segment's saved arrays. Time: the recomputation minus the kept
ops. An op can be kept only if its Function defines ``keep_for_backward`` (Linear, MatMul,
Conv2d); a policy naming another is refused with the list of those that can.
"""
from ...autograd import Function


def _normal(name):
    return name.replace("_", "").lower()


def _op_classes():
    """Every Function subclass, by normalised name (``layer_norm`` finds ``LayerNorm``)."""
    found, todo = {}, [Function]
    while todo:
        cls = todo.pop()
        for sub in cls.__subclasses__():
            found.setdefault(_normal(sub.__name__), sub)
            todo.append(sub)
    return found


class Policy:
    """Which ops' outputs a selective checkpoint keeps: ``save=`` names exactly those, or
    ``recompute=`` names those not kept among the ops that can be (names of Function
    classes, any case, underscores ignored: "linear", "matmul", "conv2d", "layer_norm", ...)."""

    def __init__(self, save=None, recompute=None):
        if (save is None) == (recompute is None):
            raise ValueError("Policy takes either save=[ops to keep] or recompute=[ops to recompute]")
        ops = _op_classes()
        keepable = sorted(name for name, cls in ops.items() if cls.keep_for_backward is not None)
        names = [_normal(n) for n in (save if save is not None else recompute)]
        unknown = [n for n in names if n not in ops]
        if unknown:
            raise ValueError(f"unknown op(s) {unknown}; ops are Function classes such as {', '.join(keepable)}")
        if save is not None:
            cannot = [n for n in names if ops[n].keep_for_backward is None]
            if cannot:
                raise ValueError(f"cannot keep the output of {cannot}: only ops that define keep_for_backward "
                                 f"can be kept ({', '.join(keepable)}); leave the others to recomputation")
            self.kept = frozenset(ops[n] for n in names)
        else:
            self.kept = frozenset(ops[n] for n in keepable if n not in names)
        self.save = save is not None
        self.names = tuple(names)

    def keeps(self, op_class):
        return op_class in self.kept

    def __repr__(self):
        return f"Policy({'save' if self.save else 'recompute'}={list(self.names)})"


def as_policy(policy):
    """``None`` (full recomputation), a :class:`Policy`, or a list of op names (a save list)."""
    if policy is None or isinstance(policy, Policy):
        return policy
    if isinstance(policy, str):
        policy = [policy]
    return Policy(save=list(policy))


class StoreOutputs:
    """The forward's hook: runs kept ops as usual and stores their outputs, in order."""

    def __init__(self, policy):
        self.policy, self.ops, self.outputs = policy, [], []

    def wants(self, op_class):
        return self.policy.keeps(op_class)

    def run(self, op_class, ctx, arrays, kwargs):
        out = op_class.forward(ctx, *arrays, **kwargs)
        if isinstance(out, tuple):
            raise TypeError(f"selective checkpoint: {op_class.__name__} has several outputs; keep only "
                            f"single-output ops")
        self.ops.append(op_class)
        self.outputs.append(out)
        return out


class ReplayOutputs:
    """The recomputation's hook: hands each kept op its stored output instead of computing it."""

    def __init__(self, policy, ops, outputs):
        self.policy, self.ops, self.outputs, self.next = policy, ops, outputs, 0

    def wants(self, op_class):
        return self.policy.keeps(op_class)

    def run(self, op_class, ctx, arrays, kwargs):
        i = self.next
        if i >= len(self.ops) or self.ops[i] is not op_class:
            raise RuntimeError("selective checkpoint: the recomputation ran other ops than the forward "
                               f"(at kept op {i}: {op_class.__name__}); the checkpointed function must "
                               "run the same ops each time")
        self.next += 1
        op_class.keep_for_backward(ctx, self.outputs[i], *arrays, **kwargs)
        return self.outputs[i]

    def check_done(self):
        if self.next != len(self.ops):
            raise RuntimeError(f"selective checkpoint: the recomputation ran {self.next} of the "
                               f"{len(self.ops)} kept ops of the forward; the checkpointed function "
                               "must run the same ops each time")
