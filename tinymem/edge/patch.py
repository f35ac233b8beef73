"""Patch-based inference (MCUNetV2, Lin et al. 2021): the first layers of a CNN, one tile at a time.

The first layers of a CNN hold the largest activations (high resolution, and already several
channels), so they set the per-layer peak. Patch-based inference runs those layers, the *patch
stage*, on one spatial tile of the stage's output at a time: trace the tile back through the
stage to the input rows and columns it depends on (its receptive field: the tile plus a *halo*
of (k - 1)/2 pixels per 3 x 3 conv, times the strides), compute only that region, write the
tile into the stage's output, and drop everything else. Alive at once: the input image, the
stage's output, and one tile's activations.

Tracing a tile back through a layer with kernel k, stride s and padding p: output rows [a, b)
read input rows [a·s - p, (b - 1)·s - p + k). Where that range leaves the feature map, the
tile pads with zeros itself, exactly as the layer's own padding would, and runs the layer with
padding 0; so every output value sees the same inputs as in whole-layer execution, and the
result is bit-for-bit the same (each output element is one dot product over the same values in
the same order).

Cost: overlapping halos are computed once per tile that needs them. ``macs`` counts the
multiply-accumulates of the stage both ways; the ratio minus one is the recomputed work.
"""
import gc
import numbers

import numpy as np

from .. import memory
from ..autograd import Tensor, no_grad
from ..backend import array_module
from ..checks import positive_int
from .chain import as_chain, run_chain
from .peak import layer_row


def out_extent(size, layer):
    """Output size of ``layer`` along one axis of ``size`` input pixels."""
    return (size + 2 * layer.padding - layer.kernel) // layer.stride + 1


def trace_back(stop, layers, sizes):
    """Per-axis ranges a tile needs, from the stage output back to the input.

    ``stop`` = (a, b): the tile's rows (or columns) in the stage output. ``sizes[l]`` is the
    extent of the input of ``layers[l]`` (``sizes[-1]`` the stage output's). Returns, for each
    layer l, ``(lo, hi, pad_lo, pad_hi)``: the rows of its input that exist and are read, and
    the zero rows to add before and after them.
    """
    a, b = stop
    needs = []
    for layer, size in zip(reversed(layers), reversed(sizes[:-1])):
        lo, hi = a * layer.stride - layer.padding, (b - 1) * layer.stride - layer.padding + layer.kernel
        needs.append((max(lo, 0), min(hi, size), max(0, -lo), max(0, hi - size)))
        a, b = needs[-1][:2]
    return needs[::-1]


def tiles(extent, count):
    """``count`` near-equal ranges covering [0, extent)."""
    edges = np.linspace(0, extent, count + 1).round().astype(int)
    return [(int(a), int(b)) for a, b in zip(edges[:-1], edges[1:]) if b > a]


def patch_inference(model, x, split, grid=4):
    """Run the first ``split`` layers of ``model`` in a ``grid`` x ``grid`` of output tiles, the
    rest layer by layer; ``x`` is one input (1, C, H, W) array.

    Returns ``{"output", "peak", "stage_peak", "layers", "macs_patch", "macs_whole"}``: peaks
    in bytes of activations from the ledger (parameters excluded, as in ``inference_peak``),
    one dict per layer of the stage with its largest per-tile ``peak``, and the stage's
    multiply-accumulates computed by tiles against whole layers.
    """
    layers = as_chain(model)
    if not (isinstance(split, numbers.Integral) and 1 <= split <= len(layers)):
        raise ValueError(f"patch_inference: split must be 1..{len(layers)} (layers run by tiles), got {split!r}")
    positive_int("patch_inference: grid", grid)
    stage, rest = layers[:split], layers[split:]
    xp_in = np.asarray(x, np.float32)
    if xp_in.ndim != 4 or xp_in.shape[0] != 1:
        raise ValueError(f"patch_inference runs one input of shape (1, C, H, W), got {xp_in.shape}")
    heights, widths = [xp_in.shape[2]], [xp_in.shape[3]]
    for i, layer in enumerate(stage):
        heights.append(out_extent(heights[-1], layer))
        widths.append(out_extent(widths[-1], layer))
        if heights[-1] < 1 or widths[-1] < 1:  # no tile to run: the output would be None
            raise ValueError(f"patch_inference: the input {xp_in.shape[2]}x{xp_in.shape[3]} is too small "
                             f"for layer {i} ({layer!r}): it gets {heights[-2]}x{widths[-2]} pixels")
    gc.collect()  # garbage of earlier work freed inside a window would lower the peaks read
    base = memory.live_bytes()
    rows = [{"name": repr(layer), "peak": 0} for layer in stage]
    macs_patch = 0
    with no_grad(), memory.track(measure=False, timeline=False) as whole:
        h = Tensor(xp_in.copy())
        out = None
        for r in tiles(heights[-1], grid):
            for c in tiles(widths[-1], grid):
                need_r, need_c = trace_back(r, stage, heights), trace_back(c, stage, widths)
                (r0, r1, _, _), (c0, c1, _, _) = need_r[0], need_c[0]
                t = Tensor(h.data[:, :, r0:r1, c0:c1])
                for i, layer in enumerate(stage):
                    (_, _, pt, pb), (_, _, pl, pr) = need_r[i], need_c[i]
                    with memory.track(measure=False, timeline=False) as step:
                        t = _pad(t, pt, pb, pl, pr)
                        t = layer(t, padding=0)
                    rows[i]["peak"] = max(rows[i]["peak"], step.peak() - base)
                    macs_patch += layer.macs(t.shape[2], t.shape[3])
                if out is None:
                    out = memory.register(array_module(t.data).empty((1, t.shape[1], heights[-1], widths[-1]),
                                                                     np.float32),
                                          "workspace", label="patch stage output")
                out[:, :, r[0]:r[1], c[0]:c[1]] = t.data
                del t
        stage_peak = whole.peak() - base
        h = Tensor(out)  # the stage's input goes; its output is the rest's input, held once
        del out
        peak = stage_peak
        for layer in rest:
            row, h = layer_row(layer, h)
            rows.append(row)
            peak = max(peak, row["peak"])
    macs_whole = sum(layer.macs(hh, ww) for layer, hh, ww in zip(stage, heights[1:], widths[1:]))
    return {"output": h.data, "peak": peak, "stage_peak": stage_peak,
            "layers": rows, "macs_patch": macs_patch, "macs_whole": macs_whole}


def _pad(t, top, bottom, left, right):
    """Zero-pad a tile where its receptive field leaves the feature map (a copy only then)."""
    if not (top or bottom or left or right):
        return t
    xp = array_module(t.data)
    return Tensor(xp.pad(t.data, ((0, 0), (0, 0), (top, bottom), (left, right))))


def whole_and_patch_equal(model, x, split, grid=4):
    """True when patch-based and whole-layer execution give bit-identical outputs on ``x``."""
    layers = as_chain(model)
    with no_grad():
        whole = run_chain(layers, Tensor(np.asarray(x, np.float32))).data
    return bool(np.array_equal(whole, patch_inference(layers, x, split, grid)["output"]))
