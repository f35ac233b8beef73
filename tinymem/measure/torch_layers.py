"""The layers of :mod:`.torch_models`' GPT and LLaMA, in PyTorch (imported only when a model is built).

Every op is the one nanoGPT or Hugging Face's LLaMA runs, because the planner's ``torch`` mode
counts what those ops save for backward: a different but equivalent formula (a fused RMSNorm,
rotary positions as complex numbers) would save other tensors.
"""
import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint as recompute


class Attention(nn.Module):
    """Causal self-attention: q, k, v from one Linear (GPT) or three (LLaMA, rotary q and k),
    then "math" (nanoGPT's masked_fill of a causal s×s float32 buffer, softmax, dropout) or
    "sdpa", then the output projection and its dropout."""

    def __init__(self, arch, attention, llama):
        super().__init__()
        h = arch.hidden
        self.heads, self.attention, self.llama, self.p = arch.heads, attention, llama, arch.dropout
        if llama:
            self.q, self.k, self.v = (nn.Linear(h, h, bias=False) for _ in range(3))
            self.o = nn.Linear(h, h, bias=False)
            d = h // arch.heads
            inverse = 1.0 / 10000 ** (torch.arange(0, d, 2).float() / d)
            angles = torch.outer(torch.arange(arch.seq).float(), inverse)
            angles = torch.cat([angles, angles], dim=-1)  # (s, d), as Hugging Face's rotary embedding
            self.register_buffer("cos", angles.cos(), persistent=False)
            self.register_buffer("sin", angles.sin(), persistent=False)
        else:
            self.c_attn = nn.Linear(h, 3 * h, bias=arch.bias)
            self.o = nn.Linear(h, h, bias=arch.bias)
            self.attn_dropout = nn.Dropout(arch.dropout)
        self.resid_dropout = nn.Dropout(arch.dropout)
        if attention == "math":
            self.register_buffer("mask", torch.tril(torch.ones(arch.seq, arch.seq)).view(1, 1, arch.seq, arch.seq))

    def forward(self, x):
        b, s, h = x.shape
        heads = lambda t: t.view(b, s, self.heads, h // self.heads).transpose(1, 2)  # noqa: E731
        if self.llama:
            q, k, v = heads(self.q(x)), heads(self.k(x)), heads(self.v(x))
            q, k = rotate(q, self.cos[:s], self.sin[:s]), rotate(k, self.cos[:s], self.sin[:s])
        else:
            q, k, v = (heads(t) for t in self.c_attn(x).split(h, dim=2))
        if self.attention == "sdpa":
            y = F.scaled_dot_product_attention(q, k, v, dropout_p=self.p if self.training else 0.0, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            att = att.masked_fill(self.mask[:, :, :s, :s] == 0, float("-inf"))
            att = F.softmax(att, dim=-1)
            if not self.llama:
                att = self.attn_dropout(att)
            y = att @ v
        y = y.transpose(1, 2).contiguous().view(b, s, h)
        return self.resid_dropout(self.o(y))


def rotate(x, cos, sin):
    """Rotary positions the Hugging Face way: ``x·cos + rotate_half(x)·sin``."""
    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin


class MLP(nn.Module):
    """GPT: Linear-GELU-Linear-dropout; LLaMA: ``down(silu(gate x) · up x)``."""

    def __init__(self, arch, llama):
        super().__init__()
        h, f = arch.hidden, arch.ffn or 4 * arch.hidden
        self.llama = llama
        if llama:
            self.gate, self.up, self.down = nn.Linear(h, f, bias=False), nn.Linear(h, f, bias=False), \
                nn.Linear(f, h, bias=False)
        else:
            self.c_fc, self.c_proj = nn.Linear(h, f, bias=arch.bias), nn.Linear(f, h, bias=arch.bias)
            self.dropout = nn.Dropout(arch.dropout)

    def forward(self, x):
        if self.llama:
            return self.down(F.silu(self.gate(x)) * self.up(x))
        return self.dropout(self.c_proj(F.gelu(self.c_fc(x))))


def norm(arch, llama):
    return nn.RMSNorm(arch.hidden, eps=1e-6) if llama else nn.LayerNorm(arch.hidden)  # the Arch: always a bias


class Block(nn.Module):
    """Pre-norm block: ``x + attn(norm(x))``, then ``x + mlp(norm(x))``."""

    def __init__(self, arch, attention, llama):
        super().__init__()
        self.ln_1, self.attn = norm(arch, llama), Attention(arch, attention, llama)
        self.ln_2, self.mlp = norm(arch, llama), MLP(arch, llama)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class Model(nn.Module):
    """The whole model: ``forward(ids, targets) -> (logits, loss)`` as nanoGPT's ``GPT``."""

    def __init__(self, arch, attention, checkpoint, llama):
        super().__init__()
        self.checkpoint, self.llama = checkpoint, llama
        self.wte = nn.Embedding(arch.vocab, arch.hidden)
        if not llama:
            self.wpe = nn.Embedding(arch.seq, arch.hidden)
            self.drop = nn.Dropout(arch.dropout)
        self.blocks = nn.ModuleList(Block(arch, attention, llama) for _ in range(arch.layers))
        self.ln_f = norm(arch, llama)
        self.lm_head = nn.Linear(arch.hidden, arch.vocab, bias=arch.bias and not arch.tied)
        if arch.tied:
            self.lm_head.weight = self.wte.weight
        self.apply(_init)

    def forward(self, ids, targets):
        x = self.wte(ids)
        if not self.llama:
            x = self.drop(x + self.wpe(torch.arange(ids.shape[1], device=ids.device)))
        for block in self.blocks:
            x = recompute(block, x, use_reentrant=False) if self.checkpoint else block(x)
        logits = self.lm_head(self.ln_f(x))
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
        return logits, loss


def _init(module):
    """nanoGPT's initialisation (normal 0.02, zero biases): the values do not move the memory,
    but a step with them is the step nanoGPT runs."""
    if isinstance(module, (nn.Linear, nn.Embedding)):
        nn.init.normal_(module.weight, mean=0.0, std=0.02)
    if isinstance(module, nn.Linear) and module.bias is not None:
        nn.init.zeros_(module.bias)
