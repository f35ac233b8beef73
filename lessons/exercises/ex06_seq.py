"""Lesson 6 (language and recommenders) exercises. Replace each body (NumPy only)."""
import numpy as np  # noqa: F401  (you will need it)


def merge_partials(a, b):
    """Merge two online-softmax partial results over disjoint key sets of the same query rows.

    Each of ``a`` and ``b`` is ``(m, l, acc)``: the row max m (n,), the sum l (n,) of
    exp(s - m) over its keys, and acc (n, Ev) = sum of exp(s - m) * v. Return the ``(m, l, acc)``
    of all keys together, so that acc / l[:, None] is the attention output."""
    raise NotImplementedError("exercise 06.1")


def attention_saved_bytes(batch, heads, L, head_dim, chunked, itemsize=4):
    """Bytes a causal self-attention call (q, k, v of shape (batch, heads, L, head_dim), new
    arrays) keeps for backward: plain saves q, k, v and the (L, L) weights per head; chunked
    saves q, k, v, the output and one log-sum-exp per row."""
    raise NotImplementedError("exercise 06.2")


def coalesce_rows(indices, values):
    """Return ``(rows, summed)``: the distinct ``indices`` in increasing order and, for each,
    the sum of the ``values`` rows (n, D) that carry it."""
    raise NotImplementedError("exercise 06.3")


def rowwise_adagrad_rows(weight, accumulator, indices, grad_rows, lr, eps=1e-10):
    """One row-wise Adagrad step, in place, on the distinct rows ``indices`` of ``weight`` (R, D)
    with gradient rows ``grad_rows`` (n, D): accumulator[r] += mean(g_r²), then
    weight[r] -= lr * g_r / (sqrt(accumulator[r]) + eps). Other rows stay untouched."""
    raise NotImplementedError("exercise 06.4")
