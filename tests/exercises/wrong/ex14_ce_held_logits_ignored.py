"""Lesson 14, one plausible wrong answer: the logits the caller holds are forgotten."""
TARGET = "cross_entropy_backward_bytes"


def cross_entropy_backward_bytes(tokens, vocab, hold_logits):
    return 12 * tokens * vocab
