"""Inference memory layer by layer, as a microcontroller runs a CNN: the peak is one layer's worth.

Without training nothing is saved for backward: a layer needs its input, its output and its
scratch space, and the input can be freed as soon as the output exists. Executed that way the
peak activation memory is (MCUNet's per-layer profile, Lin et al. 2020)

    peak = max over layers of (input + output + workspace)

:func:`inference_peak` runs a chain that way at batch size 1 and reads each term from the
ledger: a tracking window around each layer gives the output and the op's transient workspace
(for tinymem's im2col convolution, the column blocks and the padded input copy) on top of the
input that is live when it starts. Parameters are not counted: on a microcontroller they stay
in flash, and only activations take SRAM.
"""
import gc

import numpy as np

from .. import memory
from ..autograd import Tensor, no_grad
from .chain import as_chain


def inference_peak(model, input_shape, x=None):
    """Peak activation bytes of running ``model`` layer by layer on one input of ``input_shape``.

    ``model`` is a tinymem model :func:`~tinymem.edge.chain.chain` understands, or a chain.
    Returns ``{"peak": bytes, "layers": [...], "output": array}``, one dict per layer with
    ``name``, ``input``, ``output``, ``workspace`` and ``peak`` bytes (float32 activations).
    ``x`` gives the input values (random normal otherwise).
    """
    layers = as_chain(model)
    if not layers:
        raise ValueError("inference_peak: the model has no layers to run")
    if len(input_shape) == 3:
        input_shape = (1,) + tuple(input_shape)
    if len(input_shape) != 4:
        raise ValueError(f"inference_peak: input_shape must be (C, H, W) or (1, C, H, W), got {input_shape}")
    if x is None:
        x = np.random.default_rng(0).standard_normal(input_shape).astype(np.float32)
    elif tuple(np.shape(x)) != tuple(input_shape):
        raise ValueError(f"inference_peak: x of shape {np.shape(x)} does not match input_shape {tuple(input_shape)}")
    rows = []
    gc.collect()  # garbage of earlier work freed inside a layer's window would read as negative workspace
    with no_grad():
        h = Tensor(np.array(x, np.float32))
        for layer in layers:
            row, h = layer_row(layer, h)  # rebinding ``h`` releases the input here
            rows.append(row)
    return {"peak": max(r["peak"] for r in rows), "layers": rows, "output": h.data}


def layer_row(layer, h):
    """Run ``layer`` on the Tensor ``h``: ``(row, output)``, the row as :func:`inference_peak`
    gives it. The row's peak assumes ``h`` is the only activation live: the caller holds no
    other array of its own, and drops ``h`` once it has the output."""
    in_bytes = h.data.nbytes
    with memory.track(measure=False, timeline=False) as t:
        out = layer(h)
    return {"name": repr(layer), "shape": list(out.shape), "input": in_bytes, "output": out.data.nbytes,
            "workspace": t.peak_delta() - out.data.nbytes, "peak": in_bytes + t.peak_delta()}, out
