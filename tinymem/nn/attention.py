"""MultiheadAttention: PyTorch's layer, with plain or chunked attention inside."""
import math

import numpy as np

from .. import backend, random
from .. import functional as F
from ..checks import positive_int
from .linear import Linear
from .module import Module, Parameter


class MultiheadAttention(Module):
    """PyTorch's ``nn.MultiheadAttention`` (parameters ``in_proj_weight`` (3E, E),
    ``in_proj_bias`` (3E,), ``out_proj``), without attention masks other than causal.

    ``forward(query, key=None, value=None, is_causal=False)`` returns ``(output, None)`` like
    PyTorch with ``need_weights=False``: the averaged weights are never built. ``key`` and
    ``value`` default to ``query`` (self-attention: one projection matmul, q, k and v are views
    of its output). Inputs are (L, B, E), or (B, L, E) with ``batch_first=True``.

    ``chunk_size=None`` uses :func:`F.scaled_dot_product_attention`, which saves the weights,
    4·B·H·L·S bytes; an integer uses :func:`F.chunked_attention` with that block size, which
    saves the output and 4·B·H·L bytes of log-sum-exp instead (see ``tinymem/ops/attention.py``).
    Besides attention itself it saves the input of each projection (4·B·L·E bytes each).
    """

    def __init__(self, embed_dim, num_heads, bias=True, batch_first=False, chunk_size=None, device=None):
        super().__init__()
        positive_int("MultiheadAttention: embed_dim", embed_dim)
        positive_int("MultiheadAttention: num_heads", num_heads)
        if chunk_size is not None:
            positive_int("MultiheadAttention: chunk_size (None for plain attention)", chunk_size)
        if embed_dim % num_heads:
            raise ValueError(f"embed_dim ({embed_dim}) must be divisible by num_heads ({num_heads})")
        device = backend.check_device(device)
        self.embed_dim, self.num_heads, self.batch_first = embed_dim, num_heads, batch_first
        self.chunk_size = chunk_size
        # PyTorch's init: xavier-uniform projection, zero biases.
        bound = math.sqrt(6.0 / (embed_dim + embed_dim))
        self.in_proj_weight = Parameter(random.uniform(-bound, bound, (3 * embed_dim, embed_dim), device))
        xp = backend.array_module(device)
        self.in_proj_bias = Parameter(xp.zeros(3 * embed_dim, np.float32)) if bias else None
        self.out_proj = Linear(embed_dim, embed_dim, bias=bias, device=device)
        if bias:
            self.out_proj.bias = Parameter(xp.zeros(embed_dim, np.float32))

    def _heads(self, x):
        B, L, _ = x.shape
        return x.reshape(B, L, self.num_heads, -1).permute(0, 2, 1, 3)

    def forward(self, query, key=None, value=None, is_causal=False):
        if not self.batch_first:
            query, key, value = (None if t is None else F.transpose(t, 0, 1) for t in (query, key, value))
        E = self.embed_dim
        w, b = self.in_proj_weight, self.in_proj_bias
        if key is None and value is None:
            B, L, _ = query.shape
            qkv = F.linear(query, w, b).reshape(B, L, 3, self.num_heads, -1).permute(2, 0, 3, 1, 4)
            q, k, v = qkv[0], qkv[1], qkv[2]
        else:
            key = query if key is None else key
            value = key if value is None else value
            part = lambda i: (w[i * E:(i + 1) * E], None if b is None else b[i * E:(i + 1) * E])  # noqa: E731
            q, k, v = (self._heads(F.linear(x, *part(i))) for i, x in enumerate((query, key, value)))
        if self.chunk_size is None:
            out = F.scaled_dot_product_attention(q, k, v, is_causal=is_causal)
        else:
            out = F.chunked_attention(q, k, v, self.chunk_size, is_causal=is_causal)
        B, H, L, Dh = out.shape
        out = self.out_proj(out.permute(0, 2, 1, 3).reshape(B, L, H * Dh))
        return (out if self.batch_first else F.transpose(out, 0, 1)), None

    def extra_repr(self):
        return f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, chunk_size={self.chunk_size}"
