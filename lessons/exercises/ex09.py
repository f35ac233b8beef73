"""Lesson 9 exercises: find the leak, log without leaking, attribute the peak, share a device.
Replace each body."""


def leaked_bytes_per_step(step_fn, steps=4):
    """Run ``step_fn()`` once as a warm-up, then ``steps`` times, and return the ledger's growth
    per measured step in bytes (every bucket and place: ``tm.memory.live_bytes(None, None)``).
    Collect garbage (``gc.collect()``) before each reading, so that only what is still
    referenced counts."""
    raise NotImplementedError("exercise 09.1")


def logged_step(model, opt, x, y, log):
    """One training step (zero the gradients, cross-entropy of ``model(x)`` against ``y``,
    backward, ``opt.step()``) that appends the loss to ``log`` as a Python float, so that the
    log keeps no graph and no array alive."""
    raise NotImplementedError("exercise 09.2")


def activation_bytes_by_module(tracker, depth):
    """``{module path: bytes}`` of the ``activation`` bucket at the tracker's peak, with paths cut
    to their first ``depth`` parts (``blocks.3.attn`` -> ``blocks.3`` at depth 2). Arrays made
    outside every module keep their name, ``(no module: activation)``. Use ``tracker.top``."""
    raise NotImplementedError("exercise 09.3")


def micro_batches_for(peaks, budget, fraction):
    """The fewest micro-batches ``k`` (a key of ``peaks``, ``{k: peak bytes of one step with k
    micro-batches}``) whose peak fits this process's share of the device, ``fraction * budget``;
    ``None`` when none fits."""
    raise NotImplementedError("exercise 09.4")
