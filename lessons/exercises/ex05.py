"""Lesson 5 exercises: optimizer state by formula, Adafactor's second moment, one 8-bit block, Lion.
Replace each body."""


def state_bytes_for(optimizer, shape):
    """Bytes of state for one float32 parameter of ``shape`` under ``optimizer``, one of
    "sgd", "sgd_momentum", "adam", "adafactor", "adam8bit" (block 2048, < 4096 elements: 32-bit)."""
    raise NotImplementedError("exercise 05.1")


def adafactor_second_moment(grads, eps1=1e-30, beta2_decay=-0.8):
    """The (m, n) second-moment estimate torch.optim.Adafactor divides by after seeing the
    gradients ``grads`` (a list of (m, n) arrays, in order) of one matrix parameter: its
    factored running averages of g², rebuilt into a matrix (``eps1``: Adafactor's eps[0])."""
    raise NotImplementedError("exercise 05.2")


def quantize_block(x, qmap):
    """(codes, absmax): one block x of 8-bit state, as tinymem.optim.Adam8bit stores it — the
    block's absolute maximum (a float) and, per value, the uint8 index of the entry of the
    256-value map ``qmap`` that best represents it (codes of x's shape)."""
    raise NotImplementedError("exercise 05.3")


def lion_step(p, m, g, lr, betas=(0.9, 0.99), weight_decay=0.0):
    """One Lion update; return (new p, new m) without modifying the inputs."""
    raise NotImplementedError("exercise 05.4")
