"""Lesson 5 exercises: optimizer state by formula, Adafactor's factors, one 8-bit block, Lion.
Replace each body."""


def state_bytes_for(optimizer, shape):
    """Bytes of state for one float32 parameter of ``shape`` under ``optimizer``, one of
    "sgd", "sgd_momentum", "adam", "adafactor", "adam8bit" (block 2048, < 4096 elements: 32-bit)."""
    raise NotImplementedError("exercise 05.1")


def adafactor_variance(row_var, col_var, eps1):
    """Adafactor's second moment from row_var (m, 1) and col_var (1, n): R C / max(mean(R), eps1)."""
    raise NotImplementedError("exercise 05.2")


def quantize_block(x, qmap):
    """(codes as uint8 of x's shape, absmax as a float) for one block: nearest value of qmap to x / absmax."""
    raise NotImplementedError("exercise 05.3")


def lion_step(p, m, g, lr, betas=(0.9, 0.99), weight_decay=0.0):
    """One Lion update; return (new p, new m) without modifying the inputs."""
    raise NotImplementedError("exercise 05.4")
