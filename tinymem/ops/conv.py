"""2-D convolution by im2col, in blocks so the column matrix stays small.

im2col turns a convolution into one matrix product. For every output pixel it copies the
C·kh·kw input values under the kernel into one column; stacking the columns gives a matrix
``cols`` of shape (C·kh·kw, B·OH·OW), and the convolution is ``W2 @ cols`` with the weight
flattened to (O, C·kh·kw). The copy is built with kh·kw strided slices (one per kernel offset),
so no index arrays are needed and NumPy and CuPy share the code.

Memory. The full column matrix holds C·kh·kw·OH·OW·B elements: kh·kw times the input (9x for a
3x3 kernel), e.g. 4·32·9·512·512·8 B = 2.4 GB for 32 channels at 512 px, batch 8. It is only a
temporary, so it is built block by block: whole samples at a time while a sample's columns fit
in ``WORKSPACE_ELEMENTS``, otherwise bands of output rows of one sample. Each block's columns
are registered in the ledger's ``workspace`` bucket while they live. The workspace peak is then
at most max(WORKSPACE_ELEMENTS, C·kh·kw·OW) elements, plus a padded copy of the block's samples
(and in backward their padded input gradient).

Saved for backward: the input x (B·C·H·W elements) and the weight (a parameter, no new bytes).
The columns are rebuilt from x in backward rather than saved: saving them would cost kh·kw
times the input for each conv layer.
"""
from .. import memory
from ..autograd import Function
from ..backend import array_module

# Elements of one block of the column matrix (2**22 floats = 16 MiB in float32).
WORKSPACE_ELEMENTS = 2 ** 22


def pair(v, name):
    """An int or a pair of ints as a pair, with a clear error otherwise."""
    if isinstance(v, int):
        return (v, v)
    if isinstance(v, (tuple, list)) and len(v) == 2 and all(isinstance(i, int) for i in v):
        return tuple(v)
    raise ValueError(f"{name} must be an int or a pair of ints, got {v!r}")


def out_size(size, k, s, p):
    return (size + 2 * p - k) // s + 1


def check_window(name, kernel, stride, padding):
    """Refuse a window NumPy would turn into a bare ZeroDivisionError or a wrong slice."""
    if min(kernel) < 1 or min(stride) < 1 or min(padding) < 0:
        raise ValueError(f"{name}: kernel {tuple(kernel)} and stride {tuple(stride)} must be >= 1 and "
                         f"padding {tuple(padding)} >= 0")


def _blocks(batch, out_h, per_row):
    """Yield (b0, b1, r0, r1): sample ranges and output-row ranges whose columns fit the limit."""
    per_sample = per_row * out_h
    if per_sample <= WORKSPACE_ELEMENTS:
        step = max(1, WORKSPACE_ELEMENTS // per_sample)
        for b0 in range(0, batch, step):
            yield b0, min(batch, b0 + step), 0, out_h
    else:
        rows = max(1, WORKSPACE_ELEMENTS // per_row)
        for b0 in range(batch):
            for r0 in range(0, out_h, rows):
                yield b0, b0 + 1, r0, min(out_h, r0 + rows)


def _padded_blocks(xp, x, ph, pw, blocks):
    """Yield (b0, b1, r0, r1, padded x[b0:b1]) (None when x is None); the bands of rows of
    one sample share one padded copy."""
    padded = (None, None)
    for b0, b1, r0, r1 in blocks:
        if x is not None and padded[0] != b0:
            part = x[b0:b1]
            padded = (b0, memory.register(xp.pad(part, ((0, 0), (0, 0), (ph, ph), (pw, pw)))) if ph or pw else part)
        yield b0, b1, r0, r1, padded[1]


def _im2col(xp, xpad, kh, kw, sh, sw, r0, r1, out_w):
    """Columns of the output rows r0:r1, shape (C, kh, kw, b, rows, OW)."""
    b, c = xpad.shape[:2]
    cols = xp.empty((c, kh, kw, b, r1 - r0, out_w), xpad.dtype)
    memory.register(cols, "workspace")
    for i in range(kh):
        top = i + sh * r0
        for j in range(kw):
            patch = xpad[:, :, top:top + sh * (r1 - r0 - 1) + 1:sh, j:j + sw * (out_w - 1) + 1:sw]
            cols[:, i, j] = patch.transpose(1, 0, 2, 3)
    return cols


class Conv2d(Function):
    """y[b, o] = sum_c W[o, c] * x[b, c] (2-D cross-correlation, as PyTorch) + bias[o].

    Shapes: x (B, C, H, W), weight (O, C, kh, kw), bias (O,), y (B, O, OH, OW) with
    OH = (H + 2·ph - kh) // sh + 1. Time: 2·B·O·C·kh·kw·OH·OW flops each way.
    """

    def keep_for_backward(ctx, out, x, weight, bias=None, stride=(1, 1), padding=(0, 0)):
        if x.ndim != 4 or weight.ndim != 4 or x.shape[1] != weight.shape[1]:
            raise ValueError(f"conv2d: input {x.shape} (B, C, H, W) and weight {weight.shape} "
                             f"(O, C, kh, kw) must be 4-D with the same C")
        (sh, sw), (ph, pw) = stride, padding
        o, c, kh, kw = weight.shape
        check_window("conv2d", (kh, kw), stride, padding)
        if x.dtype.kind != "f" or weight.dtype.kind != "f":
            # The output takes the input's dtype: an integer image would truncate every sum.
            raise TypeError(f"conv2d: input of dtype {x.dtype} with weight of dtype {weight.dtype}; "
                            "both must be floating, e.g. x.float()")
        if bias is not None and bias.shape != (o,):
            raise ValueError(f"conv2d: bias of shape {bias.shape} for {o} output channels; it must be ({o},)")
        out_h, out_w = out_size(x.shape[2], kh, sh, ph), out_size(x.shape[3], kw, sw, pw)
        if out_h < 1 or out_w < 1:
            raise ValueError(f"conv2d: kernel {kh}x{kw} is larger than the padded input {x.shape[2:]}")
        ctx.geometry = (kh, kw, sh, sw, ph, pw, out_h, out_w)
        ctx.x_shape = x.shape
        gx, gw = ctx.needs_input_grad[:2]
        ctx.save_for_backward(x if gw else None, weight if gx else None)

    def forward(ctx, x, weight, bias=None, stride=(1, 1), padding=(0, 0)):
        xp = array_module(x)
        Conv2d.keep_for_backward(ctx, None, x, weight, bias, stride, padding)
        kh, kw, sh, sw, ph, pw, out_h, out_w = ctx.geometry
        o, c = weight.shape[:2]
        w2 = weight.reshape(o, -1)
        y = memory.register(xp.empty((x.shape[0], o, out_h, out_w), x.dtype))  # the output, filled by blocks
        blocks = _blocks(x.shape[0], out_h, c * kh * kw * out_w)
        for b0, b1, r0, r1, xpad in _padded_blocks(xp, x, ph, pw, blocks):
            cols = _im2col(xp, xpad, kh, kw, sh, sw, r0, r1, out_w)
            out = memory.register(w2 @ cols.reshape(w2.shape[1], -1))
            y[b0:b1, :, r0:r1] = out.reshape(o, b1 - b0, r1 - r0, out_w).transpose(1, 0, 2, 3)
            del cols, out  # before the next band's: else two column blocks live at once
        if bias is not None:
            y += bias.reshape(1, -1, 1, 1)
        return y

    def backward(ctx, g):
        x, weight = ctx.saved_tensors
        needs = ctx.needs_input_grad
        xp = array_module(g)
        kh, kw, sh, sw, ph, pw, out_h, out_w = ctx.geometry
        bsz, c, h, w = ctx.x_shape
        o = g.shape[1]
        gx = memory.register(xp.empty(ctx.x_shape, g.dtype)) if needs[0] else None  # filled by blocks
        gw = xp.zeros((o, c * kh * kw), g.dtype) if needs[1] else None
        w2 = weight.reshape(o, -1) if needs[0] else None
        blocks = _blocks(bsz, out_h, c * kh * kw * out_w)
        for b0, b1, r0, r1, xpad in _padded_blocks(xp, x, ph, pw, blocks):
            gblock = memory.register(g[b0:b1, :, r0:r1].transpose(1, 0, 2, 3).reshape(o, -1))  # a copy
            if needs[1]:
                cols = _im2col(xp, xpad, kh, kw, sh, sw, r0, r1, out_w)
                gw += gblock @ cols.reshape(gw.shape[1], -1).T
                del cols
            if needs[0]:
                gcols = (w2.T @ gblock).reshape(c, kh, kw, b1 - b0, r1 - r0, out_w)
                memory.register(gcols, "workspace")
                if r0 == 0:  # the bands of a sample run top to bottom into one padded gradient
                    gpad = memory.register(xp.zeros((b1 - b0, c, h + 2 * ph, w + 2 * pw), g.dtype))
                for i in range(kh):
                    top = i + sh * r0
                    for j in range(kw):
                        gpad[:, :, top:top + sh * (r1 - r0 - 1) + 1:sh,
                             j:j + sw * (out_w - 1) + 1:sw] += gcols[:, i, j].transpose(1, 0, 2, 3)
                if r1 == out_h:
                    gx[b0:b1] = gpad[:, :, ph:ph + h, pw:pw + w]
                del gcols
            del gblock
        gb = g.sum(axis=(0, 2, 3)) if len(needs) > 2 and needs[2] else None
        return gx, (gw.reshape(o, c, kh, kw) if gw is not None else None), gb
