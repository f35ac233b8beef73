"""Lesson 14, one plausible wrong answer: 2 bytes a value, as if the step ran in bf16."""
TARGET = "cross_entropy_backward_bytes"


def cross_entropy_backward_bytes(tokens, vocab, hold_logits):
    return 2 * tokens * vocab * (3 + bool(hold_logits))
