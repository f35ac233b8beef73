"""Lesson 14, one plausible wrong answer: the loss moment as tinymem's closed form counts it,
one N x V array (tinymem's loss writes its gradient into the probabilities it saved)."""
TARGET = "cross_entropy_backward_bytes"


def cross_entropy_backward_bytes(tokens, vocab, hold_logits):
    return 4 * tokens * vocab
