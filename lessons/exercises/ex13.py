"""Lesson 13 exercises: count a LoRA fine-tune's bytes, build NormalFloat levels, price the
block scales, and predict then measure a QLoRA step under a budget. Replace each body."""


def lora_step_bytes(layers, r, adapted):
    """``{"parameter": ..., "gradient": ..., "optimizer": ...}``: the bytes of those buckets
    after one Adam step of ``nn.Sequential`` of float32 Linears (with biases, GELUs between) of
    ``(in, out)`` shapes ``layers``, after ``apply_lora`` gave a rank-``r`` adapter to the
    Linears whose positions in ``layers`` are in ``adapted`` (at least one), and to no other."""
    raise NotImplementedError("exercise 13.1")


def nf_levels(bits):
    """The ``2**bits`` levels of a ``bits``-bit NormalFloat (2 <= bits <= 8), sorted, as a
    NumPy array, built the way NF4's are. The offset (the largest probability used) for
    ``bits`` bits: 1 - (1/(2(2**bits - 1)) + 1/2**(bits + 1)) / 2, which for 4 bits is the
    paper's ((1 - 1/30) + (1 - 1/32)) / 2."""
    raise NotImplementedError("exercise 13.2")


def nf4_bits_per_weight(n, block=64, block2=256):
    """Stored bits per weight of ``n`` weights in NF4 with ``block`` weights per scale (an even
    number), the scales double-quantized in groups of ``block2`` scales, or kept in float32
    when ``block2`` is None."""
    raise NotImplementedError("exercise 13.3")


def qlora_parameter_bytes(layers, r):
    """The ``parameter`` bucket of ``nn.Sequential`` of Linears of ``(in, out)`` shapes
    ``layers`` (biases, GELUs between) after ``apply_qlora(model, r)`` with double quantization."""
    raise NotImplementedError("exercise 13.4a")


def qlora_step_peak(layers, r, batch, budget):
    """Build that model (``tm.manual_seed(0)`` first, alpha = 2r), apply QLoRA, and train it with
    Adam (lr 1e-3) on ``tm.randn(batch, in_features of the first layer)`` as input and target
    (``F.mse_loss``). Return the device peak (``Tracker.peak()``, the bytes live on entry
    included) of the *second* step, measured in ``memory.track(budget=budget)`` after the model
    is built and the first step is done."""
    raise NotImplementedError("exercise 13.4b")
