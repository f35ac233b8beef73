"""Lesson 14 exercises: the bytes of a PyTorch step that the formulas of lesson 12 forget.
Replace each body."""


def cross_entropy_backward_bytes(tokens, vocab, hold_logits):
    """Bytes of N x V float32 arrays alive when ``log_softmax``'s backward writes dlogits in
    PyTorch's ``cross_entropy`` (N = ``tokens``, V = ``vocab``), with the logits held by the
    caller when ``hold_logits`` (nanoGPT's ``logits, loss = model(X, Y)``)."""
    raise NotImplementedError("exercise 14.1")


def adamw_temporary_bytes(sizes, implementation):
    """The most bytes of float32 temporaries AdamW's update holds at once, for parameters of
    ``sizes`` values each (in ``model.parameters()`` order) and ``implementation`` "for-loop"
    (``_single_tensor_adamw``), "foreach" (``_multi_tensor_adamw``) or "fused"."""
    raise NotImplementedError("exercise 14.2")
