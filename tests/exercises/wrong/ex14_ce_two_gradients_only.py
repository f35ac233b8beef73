"""Lesson 14, one plausible wrong answer: dlogp and dlogits (and the held logits), but not
log_softmax's saved output, which its backward still needs while it writes dlogits."""
TARGET = "cross_entropy_backward_bytes"


def cross_entropy_backward_bytes(tokens, vocab, hold_logits):
    return 4 * tokens * vocab * (2 + bool(hold_logits))
