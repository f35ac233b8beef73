"""TransformerLM: a tiny GPT-style character language model, built of pre-LayerNorm blocks.

Where the memory goes:
- :class:`TransformerLM` with B sequences of T tokens, width d, h heads, n blocks: each block
  saves about 4·B·T·(8d + ...) bytes of linear/LayerNorm/GELU inputs (linear in T) plus, with
  plain attention, the weights 4·B·h·T² (quadratic in T). ``chunk_size`` switches every block
  to chunked attention, which drops the T² term. Blocks take and return (B, T, d), so
  ``model.blocks`` is a Sequential that checkpointing can cut into segments.
"""
import numpy as np

from .. import backend, nn
from .. import functional as F
from ..autograd import Tensor, no_grad


class TransformerBlock(nn.Module):
    """Pre-LayerNorm block: x + attn(ln1(x)), then x + mlp(ln2(x)); causal self-attention."""

    def __init__(self, d_model, n_heads, d_ff=None, chunk_size=None, dropout=0.0, device=None):
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model, device=device)
        self.attn = nn.MultiheadAttention(d_model, n_heads, batch_first=True, chunk_size=chunk_size,
                                          device=device)
        self.ln2 = nn.LayerNorm(d_model, device=device)
        d_ff = 4 * d_model if d_ff is None else d_ff
        self.mlp = nn.Sequential(nn.Linear(d_model, d_ff, device=device), nn.GELU(),
                                 nn.Linear(d_ff, d_model, device=device), nn.Dropout(dropout))

    def forward(self, x):
        x = x + self.attn(self.ln1(x), is_causal=True)[0]
        return x + self.mlp(self.ln2(x))


class TransformerLM(nn.Module):
    """Decoder-only Transformer over token ids (B, T) -> logits (B, T, vocab_size).

    Token and learned position embeddings (init N(0, 0.02²) as GPT-2), ``n_layers`` blocks, a
    final LayerNorm and a linear head. ``context`` is the longest sequence it accepts.
    """

    def __init__(self, vocab_size, context, d_model=64, n_heads=4, n_layers=2, d_ff=None,
                 chunk_size=None, dropout=0.0, device=None):
        super().__init__()
        self.vocab_size, self.context = vocab_size, context
        self.tok_emb = nn.Embedding(vocab_size, d_model, device=device)
        self.pos_emb = nn.Embedding(context, d_model, device=device)
        for emb in (self.tok_emb, self.pos_emb):
            emb.weight.data = emb.weight.data * np.float32(0.02)
        self.blocks = nn.Sequential(*[TransformerBlock(d_model, n_heads, d_ff, chunk_size, dropout, device)
                                      for _ in range(n_layers)])
        self.ln_f = nn.LayerNorm(d_model, device=device)
        self.head = nn.Linear(d_model, vocab_size, device=device)

    def embed(self, ids):
        """Token plus position embeddings, (B, T, d)."""
        ids = ids.data if isinstance(ids, Tensor) else ids
        T = ids.shape[-1]
        if T > self.context:
            raise ValueError(f"sequence of {T} tokens is longer than the model's context of {self.context}")
        xp = backend.array_module(self.tok_emb.weight.data)
        return self.tok_emb(xp.asarray(ids)) + self.pos_emb(xp.arange(T))

    def logits(self, h):
        """Final LayerNorm and head on the blocks' output."""
        return self.head(self.ln_f(h))

    def forward(self, ids):
        return self.logits(self.blocks(self.embed(ids)))

    def loss(self, ids, targets):
        """Mean next-token cross-entropy (nats per token)."""
        logits = self(ids)
        targets = targets.data if isinstance(targets, Tensor) else targets
        xp = backend.array_module(logits.data)
        return F.cross_entropy(logits.reshape(-1, self.vocab_size), xp.asarray(targets).reshape(-1))

    def generate(self, prompt_ids, max_new_tokens, temperature=1.0, seed=0):
        """Sample ``max_new_tokens`` ids after ``prompt_ids`` (1-D); returns prompt + sample as a
        NumPy array. Runs under ``no_grad`` in eval mode; sampling is seeded."""
        rng = np.random.default_rng(seed)
        ids = list(np.asarray(prompt_ids).reshape(-1))
        was_training = self.training
        self.eval()
        with no_grad():
            for _ in range(max_new_tokens):
                window = np.array(ids[-self.context:], dtype=np.int64)[None]
                last = backend.to_numpy(self(window).data[0, -1]).astype(np.float64) / temperature
                p = np.exp(last - last.max())
                ids.append(int(rng.choice(len(p), p=p / p.sum())))
        self.train(was_training)
        return np.array(ids, dtype=np.int64)
