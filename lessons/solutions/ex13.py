"""Lesson 13: reference answers."""
import math
from statistics import NormalDist

import numpy as np


def lora_step_bytes(layers, r, adapted):
    frozen = sum(4 * (d_in * d_out + d_out) for d_in, d_out in layers)
    adapters = sum(4 * r * (d_in + d_out) for i, (d_in, d_out) in enumerate(layers) if i in set(adapted))
    return {"parameter": frozen + adapters, "gradient": adapters, "optimizer": 2 * adapters}


def nf_levels(bits):
    half = 2 ** (bits - 1)
    offset = 1 - (1 / (2 * (2 ** bits - 1)) + 1 / 2 ** (bits + 1)) / 2
    inv = NormalDist().inv_cdf
    positive = [inv(p) for p in np.linspace(offset, 0.5, half + 1)[:-1]]
    negative = [-inv(p) for p in np.linspace(offset, 0.5, half)[:-1]]
    levels = np.sort(np.array(positive + negative + [0.0]))
    return levels / levels.max()


def nf4_bits_per_weight(n, block=64, block2=256):
    blocks = math.ceil(n / block)
    if block2 is None:
        scales = 4 * blocks
    else:
        scales = blocks + 4 * math.ceil(blocks / block2) + 4
    return 8 * (math.ceil(n / 2) + scales) / n


def qlora_parameter_bytes(layers, r):
    total = 0
    for d_in, d_out in layers:
        n = d_in * d_out
        total += nf4_bits_per_weight(n) * n / 8 + 4 * d_out + 4 * r * (d_in + d_out)
    return round(total)


def _qlora_model(layers, r):
    """The QLoRA model of exercise 4 and its Adam optimizer."""
    import tinymem as tm
    from tinymem import nn, optim
    from tinymem.techniques.lora import apply_qlora, trainable_parameters

    tm.manual_seed(0)
    parts = []
    for d_in, d_out in layers:
        parts += [nn.Linear(d_in, d_out), nn.GELU()]
    model = nn.Sequential(*parts[:-1])
    del parts  # it holds the float32 Linears: they must die once quantized
    apply_qlora(model, r, alpha=2 * r)
    return model, optim.Adam(trainable_parameters(model), lr=1e-3)


def _training_step(layers, r, batch):
    """The QLoRA model of exercise 4, ready: a function that runs one training step."""
    import tinymem as tm
    import tinymem.functional as F

    model, opt = _qlora_model(layers, r)
    x = tm.randn(batch, layers[0][0])

    def step():
        opt.zero_grad()
        F.mse_loss(model(x), x).backward()
        opt.step()
    return step


def qlora_step_peak(layers, r, batch, budget):
    from tinymem import memory

    step = _training_step(layers, r, batch)
    step()
    with memory.track(budget=budget) as t:
        step()
    return t.peak()
