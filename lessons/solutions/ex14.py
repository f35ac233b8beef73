"""Lesson 14: reference answers."""


def cross_entropy_backward_bytes(tokens, vocab, hold_logits):
    arrays = 3 + bool(hold_logits)  # log_softmax's saved output, dlogp, dlogits (+ the held logits)
    return 4 * tokens * vocab * arrays


def adamw_temporary_bytes(sizes, implementation):
    if implementation == "fused":
        return 0
    if implementation == "foreach":  # _foreach_sqrt of every exp_avg_sq at once
        return 4 * sum(sizes)
    # for-loop: sqrt(exp_avg_sq) and the denominator of parameter i, while the denominator of
    # parameter i - 1 has not been freed yet
    return max(4 * (2 * size + before) for size, before in zip(sizes, [0] + list(sizes[:-1])))
