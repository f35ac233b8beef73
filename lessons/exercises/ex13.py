"""Lesson 13 exercises: count a LoRA fine-tune's bytes, build NF4, price double quantization,
and predict then measure a QLoRA step under a budget. Replace each body."""


def lora_step_bytes(layers, r):
    """``{"parameter": ..., "gradient": ..., "optimizer": ...}``: the bytes of those buckets
    after one Adam step of ``nn.Sequential`` of float32 Linears (with biases) of ``(in, out)``
    shapes ``layers``, every one wrapped by a rank-``r`` LoRALinear (``apply_lora``)."""
    raise NotImplementedError("exercise 13.1")


def nf4_levels():
    """The 16 NF4 levels, sorted, as a NumPy array: 8 positive quantiles of N(0, 1) at 9
    probabilities evenly spaced from delta down to 1/2 (the last dropped), 7 negative ones from
    8 such probabilities, and 0; all divided by the largest. delta = ((1 - 1/30) + (1 - 1/32)) / 2.
    (``statistics.NormalDist().inv_cdf`` is Phi^-1.)"""
    raise NotImplementedError("exercise 13.2")


def nf4_bits_per_weight(n, double_quant=True):
    """Stored bits per weight of ``n`` weights in NF4: 4-bit codes two per byte (an odd count
    padded), blocks of 64 values (the last may be short) with one scale each: a float32 without
    double quantization; with it, one byte per scale, plus a float32 per 256 scales (the last
    group may be short) and one float32 mean."""
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
