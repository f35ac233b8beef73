"""Batch-size finder: the largest batch whose training step fits a device budget.

PyTorch Lightning's ``BatchSizeFinder`` runs training steps at growing batch sizes on a real GPU
until CUDA reports out-of-memory. Here the device is the ledger's budget: a trial step runs
inside ``memory.track(budget=...)``, which raises :class:`~tinymem.memory.OutOfMemoryError` the
moment the live device bytes (parameters, gradients, optimizer state, activations, workspace,
and the batch itself) would pass it.

Search: double the batch from ``start`` until a step fails, then bisect between the last size
that fitted and the first that did not. That takes about 2·log2(answer) trial steps, and
assumes the peak grows with the batch (it does: activations are per sample).

Every trial leaves the model as it found it: the weights (and BatchNorm's running statistics)
are saved with ``state_dict()`` before and loaded back after, gradients are dropped, and each
trial builds a fresh optimizer so that its state is counted from zero, as on the first real
step. Pitfalls: the answer is for *this* step function: evaluation, a larger model or another
optimizer need their own search; and leave headroom on a real GPU, where fragmentation makes
the usable memory smaller than the budget.
"""
import gc

from .. import memory


def default_loss(model, x, y):
    """Cross-entropy of ``model(x)`` against integer targets ``y`` (rows, or pixels of images)."""
    from .. import functional as F
    out = model(x)
    if out.ndim == 4:  # (B, K, H, W) segmentation logits
        out = out.permute(0, 2, 3, 1).reshape(-1, out.shape[1])
    return F.cross_entropy(out, y.reshape(-1))


def fits(model, budget, batch_size, make_batch, loss_fn=default_loss, optimizer_fn=None):
    """Run one training step at ``batch_size`` under ``budget``; True if it did not run out of
    memory. ``make_batch(n)`` returns the inputs of one batch (a tuple, on the device);
    ``loss_fn(model, *batch)`` a scalar loss; ``optimizer_fn(params)`` an optimizer or None."""
    state = model.state_dict()
    try:
        with memory.track(budget=budget, measure=False, timeline=False):
            batch = make_batch(batch_size)
            optimizer = optimizer_fn(model.parameters()) if optimizer_fn is not None else None
            loss = loss_fn(model, *batch)
            loss.backward()
            if optimizer is not None:
                optimizer.step()
        return True
    except memory.OutOfMemoryError:
        gc.collect()  # frees whatever the interrupted step left in reference cycles
        return False
    finally:
        batch = optimizer = loss = None
        model.zero_grad(set_to_none=True)
        model.load_state_dict(state)


def find_max_batch(model, budget, make_batch, loss_fn=default_loss, optimizer_fn=None,
                   start=1, max_batch=2 ** 20):
    """The largest batch size (<= ``max_batch``) whose training step fits in ``budget`` bytes
    (or a string like ``"64MB"``). Raises OutOfMemoryError if even ``start`` does not fit."""
    budget = memory.parse_bytes(budget)

    def ok(n):
        return fits(model, budget, n, make_batch, loss_fn, optimizer_fn)

    if not ok(start):
        raise memory.OutOfMemoryError(
            f"find_max_batch: even batch size {start} does not fit in {memory.format_bytes(budget)}; "
            f"the model alone holds {memory.format_bytes(memory.live_bytes())} on the device")
    good, bad = start, None
    while bad is None:
        nxt = min(2 * good, max_batch)
        if nxt == good:
            return good
        if ok(nxt):
            good = nxt
        else:
            bad = nxt
    while bad - good > 1:
        mid = (good + bad) // 2
        if ok(mid):
            good = mid
        else:
            bad = mid
    return good
