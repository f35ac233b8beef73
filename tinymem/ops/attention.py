"""Attention: the plain op and the memory-efficient (chunked, online-softmax) op.

Shapes follow PyTorch's ``F.scaled_dot_product_attention``: query (..., L, E), key (..., S, E),
value (..., S, Ev) -> output (..., L, Ev), with the same leading (batch, head) dims ``...``
(call their product N). ``is_causal`` masks key j for query i when j > i (top-left aligned, as
PyTorch's ``is_causal``). ``scale`` defaults to 1/sqrt(E).

Memory (float32 = 4 bytes; q, k, v counted because backward keeps them alive):

- :class:`ScaledDotProductAttention` saves q, k, v and the attention weights P (N, L, S):
  4·N·(L·E + S·E + S·Ev + L·S) bytes. The L·S term is quadratic in the sequence length and
  dominates as soon as L is larger than a few head dims. Forward computes the weights in place
  in the score buffer; backward needs one more (N, L, S) temporary (dP, reused for dS), so the
  allocator sees about 2 · 4·N·L·S at the peak of backward.
- :class:`ChunkedAttention` saves q, k, v, the output O (N, L, Ev) and one log-sum-exp per row
  (N, L): 4·N·(L·E + S·E + S·Ev + L·Ev + L) bytes, linear in the sequence length. Its
  temporaries are one (chunk x chunk) block of scores per step: 4·N·c² bytes.
  The ratio chunked/plain for self-attention (L = S, E = Ev) is (4E + 1) / (3E + L): below 0.1
  once L > 37·E (E = 16: from L = 600 on; E = 64: from L = 2400 on).

The chunked op is the FlashAttention idea (Dao et al., 2022) written in NumPy: forward walks the
key blocks with an *online softmax* (a running row max m and running sum l, rescaling what was
accumulated whenever the max grows), so the full score matrix never exists; backward recomputes
each block's weights from the saved log-sum-exp, P = exp(S - lse), instead of storing them. The
price is compute: backward does the score matmul a second time. In NumPy the small working set
(blocks that stay in cache) outweighs it from L of about 512 on, and causal masking skips the
blocks above the diagonal; at short lengths the Python loop over blocks costs more
(``figures/workload_seq_len.png`` has the times).

Pitfalls: a fully masked row would have an empty softmax (NaN); with top-left causal masking the
first key is always visible, so it cannot happen here. In float16 the running sums overflow:
compute attention in float32 (as FlashAttention does in its accumulators).
"""
import math

from ..autograd import Function
from ..backend import array_module
from ..checks import positive_int


def check_attention_shapes(q, k, v):
    """Raise a clear error unless q (..., L, E), k (..., S, E), v (..., S, Ev) fit together."""
    if q.ndim < 2 or k.ndim != q.ndim or v.ndim != q.ndim:
        raise ValueError(f"attention expects query (..., L, E), key (..., S, E) and value (..., S, Ev) "
                         f"with the same number of dims, got {q.shape}, {k.shape} and {v.shape}")
    if q.shape[:-2] != k.shape[:-2] or q.shape[:-2] != v.shape[:-2]:
        raise ValueError(f"attention: query, key and value must share their leading (batch, head) "
                         f"dims, got {q.shape[:-2]}, {k.shape[:-2]} and {v.shape[:-2]}")
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"attention: query and key need the same feature size E, got "
                         f"{q.shape[-1]} and {k.shape[-1]}")
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(f"attention: key and value need the same length S, got "
                         f"{k.shape[-2]} and {v.shape[-2]}")
    if q.dtype.kind != "f" or k.dtype.kind != "f" or v.dtype.kind != "f":  # exp() cannot cast to int
        raise TypeError(f"attention: query, key and value must be floating, got {q.dtype}, {k.dtype} "
                        f"and {v.dtype}; convert them first, e.g. q.float()")


def _scale(q, scale):
    return 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)


def _causal_bias(xp, q0, q1, k0, k1, dtype):
    """(q1-q0, k1-k0) array added to the scores: 0 where key j <= query i, -inf above the
    diagonal. One per call, shared by every head (adding it avoids a per-head mask copy)."""
    visible = xp.arange(k0, k1)[None, :] <= xp.arange(q0, q1)[:, None]
    return xp.where(visible, dtype.type(0), dtype.type(-xp.inf))


class ScaledDotProductAttention(Function):
    """softmax(q k^T · scale [+ causal mask]) v, saving the weights P for backward (see module doc)."""

    def forward(ctx, q, k, v, is_causal=False, scale=None):
        xp = array_module(q)
        check_attention_shapes(q, k, v)
        ctx.scale = _scale(q, scale)
        s = q @ k.swapaxes(-1, -2)
        s *= q.dtype.type(ctx.scale)
        if is_causal:
            s += _causal_bias(xp, 0, q.shape[-2], 0, k.shape[-2], s.dtype)
        s -= s.max(axis=-1, keepdims=True)
        p = xp.exp(s, out=s)
        p /= p.sum(axis=-1, keepdims=True)
        ctx.save_for_backward(q, k, v, p)
        return p @ v

    def backward(ctx, g):
        q, k, v, p = ctx.saved_tensors
        xp = array_module(q)
        scale = q.dtype.type(ctx.scale)
        gv = p.swapaxes(-1, -2) @ g
        # In place on dP, so backward holds one (N, L, S) temporary besides P.
        gs = g @ v.swapaxes(-1, -2)
        gs -= xp.einsum("...ij,...ij->...i", gs, p)[..., None]
        gs *= p
        gq = (gs @ k) * scale
        gk = (gs.swapaxes(-1, -2) @ q) * scale
        return gq, gk, gv


class ChunkedAttention(Function):
    """Memory-efficient attention: blocks of ``chunk_size`` queries x ``chunk_size`` keys with an
    online softmax; saves q, k, v, the output and the per-row log-sum-exp (see module doc)."""

    def forward(ctx, q, k, v, chunk_size=128, is_causal=False, scale=None):
        xp = array_module(q)
        check_attention_shapes(q, k, v)
        ctx.chunk = positive_int("chunked_attention: chunk_size", chunk_size)
        ctx.causal, ctx.scale = bool(is_causal), _scale(q, scale)
        scale = q.dtype.type(ctx.scale)
        L, S, c = q.shape[-2], k.shape[-2], ctx.chunk
        out = xp.empty(q.shape[:-1] + (v.shape[-1],), q.dtype)
        lse = xp.empty(q.shape[:-1], q.dtype)
        for q0 in range(0, L, c):
            q1 = min(q0 + c, L)
            qi = q[..., q0:q1, :]
            m = xp.full(qi.shape[:-1] + (1,), -xp.inf, q.dtype)
            l = xp.zeros_like(m)
            acc = xp.zeros(qi.shape[:-1] + (v.shape[-1],), q.dtype)
            for k0, k1 in ctx._key_blocks(q0, q1, S):
                s = (qi @ k[..., k0:k1, :].swapaxes(-1, -2)) * scale
                if ctx.causal and k1 - 1 > q0:
                    s += _causal_bias(xp, q0, q1, k0, k1, s.dtype)
                m_new = xp.maximum(m, s.max(axis=-1, keepdims=True))
                p = xp.exp(s - m_new)
                # Rescale what was summed under the old max so every term shares the new one.
                correction = xp.exp(m - m_new)
                l = l * correction + p.sum(axis=-1, keepdims=True)
                acc = acc * correction + p @ v[..., k0:k1, :]
                m = m_new
            out[..., q0:q1, :] = acc / l
            lse[..., q0:q1] = (m + xp.log(l))[..., 0]
        ctx.save_for_backward(q, k, v, out, lse)
        return out

    def _key_blocks(ctx, q0, q1, S):
        """Key blocks a query block sees; with a causal mask those right of the diagonal are skipped."""
        stop = min(S, q1) if ctx.causal else S
        return [(k0, min(k0 + ctx.chunk, stop)) for k0 in range(0, stop, ctx.chunk)]

    def backward(ctx, g):
        q, k, v, out, lse = ctx.saved_tensors
        xp = array_module(q)
        scale = q.dtype.type(ctx.scale)
        L, S, c = q.shape[-2], k.shape[-2], ctx.chunk
        # D_i = sum_j P_ij dP_ij = dO_i . O_i: the softmax backward's row term, without P.
        d = (g * out).sum(axis=-1, keepdims=True)
        gq, gk, gv = xp.zeros_like(q), xp.zeros_like(k), xp.zeros_like(v)
        for q0 in range(0, L, c):
            q1 = min(q0 + c, L)
            qi, gi, di = q[..., q0:q1, :], g[..., q0:q1, :], d[..., q0:q1, :]
            lse_i = lse[..., q0:q1, None]
            for k0, k1 in ctx._key_blocks(q0, q1, S):
                kj, vj = k[..., k0:k1, :], v[..., k0:k1, :]
                s = (qi @ kj.swapaxes(-1, -2)) * scale
                if ctx.causal and k1 - 1 > q0:
                    s += _causal_bias(xp, q0, q1, k0, k1, s.dtype)
                p = xp.exp(s - lse_i)
                gv[..., k0:k1, :] += p.swapaxes(-1, -2) @ gi
                gs = p * (gi @ vj.swapaxes(-1, -2) - di)
                gq[..., q0:q1, :] += (gs @ kj) * scale
                gk[..., k0:k1, :] += (gs.swapaxes(-1, -2) @ qi) * scale
        return gq, gk, gv


def scaled_dot_product_attention(query, key, value, is_causal=False, scale=None):
    """PyTorch's ``F.scaled_dot_product_attention`` (no ``attn_mask`` or dropout): saves the
    (..., L, S) weights, 4·N·L·S bytes in float32 on top of q, k, v."""
    return ScaledDotProductAttention.apply(query, key, value, is_causal=is_causal, scale=scale)


def chunked_attention(query, key, value, chunk_size=128, is_causal=False, scale=None):
    """Same result as :func:`scaled_dot_product_attention` (to rounding), computed in blocks of
    ``chunk_size`` with an online softmax: saves q, k, v, the output and one float per row,
    never the (L, S) weights. Backward recomputes each block."""
    return ChunkedAttention.apply(query, key, value, chunk_size=chunk_size, is_causal=is_causal,
                                  scale=scale)
