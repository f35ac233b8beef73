"""The PyTorch models the planner's ``torch`` mode is held against, and one training step of each.

Two families, built from an architecture's values (any object with the fields of the planner's
``Arch``: layers, hidden, heads, seq, vocab, ffn, mlp, norm, bias, positions, tied, dropout;
this layer does not import the planner):

* **GPT** (nanoGPT's ``model.py``, Karpathy 2022): token and position embeddings and a dropout,
  pre-LN blocks (LayerNorm, causal self-attention with one ``c_attn`` Linear of 3h outputs,
  ``c_proj``, dropout; LayerNorm, Linear-GELU-Linear, dropout), a final LayerNorm and a head
  tied to the token table (or its own Linear, with a bias when the Linears have one, as the
  planner's untied head), cross-entropy over the logits.
* **LLaMA** (``norm="rmsnorm"``, ``mlp="swiglu"``, ``positions="rotary"``, no biases): RMSNorm
  (``torch.nn.RMSNorm``), q, k, v and o Linears with rotary positions applied to q and k the
  Hugging Face way (``q·cos + rotate_half(q)·sin``), a SwiGLU MLP ``down(silu(gate x) · up x)``.

Attention is "math" (nanoGPT's: ``q @ kᵀ``, ``masked_fill`` with a causal buffer of s×s float32
ones, softmax, dropout, ``@ v``) or "sdpa" (``scaled_dot_product_attention(is_causal=True)``,
no buffer). With ``checkpoint`` every block runs under ``torch.utils.checkpoint(use_reentrant=False)``.

:func:`build` returns a :class:`TorchStep`: the model, its AdamW (for-loop, foreach or fused),
the token ids and targets, and ``step()``, one training step (forward under bf16 autocast when
asked, loss, backward, ``optimizer.step()``, ``zero_grad()`` to None) that returns the logits
when the caller holds them (as nanoGPT's ``logits, loss = model(X, Y)`` does) and None else.
``torch`` is imported when a model is built, never at import.
"""
from collections import namedtuple

OPTIMIZERS = ("for-loop", "foreach", "fused")  # AdamW's implementations
ATTENTIONS = ("math", "sdpa")
PRECISIONS = ("fp32", "bf16-autocast")

TorchStep = namedtuple("TorchStep", "model optimizer step inputs")
TorchStep.__doc__ = """One PyTorch training step ready to run: ``model`` (an ``nn.Module``),
``optimizer`` (its AdamW), ``step()`` (one whole step; returns the logits the caller holds, or
None), ``inputs`` (the token ids and targets, int64 (B, s))."""


def build(arch, batch, *, optimizer=None, hold_logits=True, attention="math", checkpoint=False,
          precision="fp32", device="cpu", seed=0):
    """A :class:`TorchStep` of ``arch`` (an Arch-like object) on ``batch`` sequences of
    ``arch.seq`` tokens. ``optimizer``: AdamW's implementation, "for-loop" | "foreach" |
    "fused" (None: PyTorch's default, foreach on CUDA and the for-loop on the CPU);
    ``hold_logits``: ``step()`` returns the logits; ``attention``: "math" | "sdpa";
    ``checkpoint``: every block recomputed in backward; ``precision``: "fp32" |
    "bf16-autocast" (the forward and loss under ``torch.autocast(bfloat16)``: fp32 weights,
    gradients and state). Memory: the model's parameters (4 B each) and 2·8·B·s of token ids
    and targets; the step allocates the rest."""
    import torch

    for name, value, choices in (("optimizer", optimizer, (None,) + OPTIMIZERS),
                                 ("attention", attention, ATTENTIONS), ("precision", precision, PRECISIONS)):
        if value not in choices:
            raise ValueError(f"torch_models.build: {name} must be one of {', '.join(map(str, choices))}, "
                             f"got {value!r}")
    torch.manual_seed(seed)
    model = model_of(arch, attention=attention, checkpoint=checkpoint).to(device)
    model.train()
    flags = {"for-loop": dict(foreach=False), "foreach": dict(foreach=True), "fused": dict(fused=True),
             None: {}}[optimizer]
    adamw = torch.optim.AdamW(model.parameters(), lr=1e-3, **flags)
    ids = torch.randint(0, arch.vocab, (batch, arch.seq), device=device)
    targets = torch.randint(0, arch.vocab, (batch, arch.seq), device=device)
    autocast = precision == "bf16-autocast"

    def step():
        with torch.autocast(torch.device(device).type, dtype=torch.bfloat16, enabled=autocast):
            logits, loss = model(ids, targets)
            if not hold_logits:  # nothing but the graph keeps them: freed once the loss has its input
                logits = None
        loss.backward()
        adamw.step()
        adamw.zero_grad(set_to_none=True)
        return logits

    return TorchStep(model, adamw, step, (ids, targets))


def model_of(arch, *, attention="math", checkpoint=False):
    """The ``nn.Module`` of ``arch``: :class:`GPT`'s layout, or LLaMA's when ``arch.norm`` is
    "rmsnorm" (then SwiGLU, rotary positions and no biases are required: mixed layouts are not
    built). Refuses grouped-query attention and mixtures of experts."""
    from . import torch_layers

    llama = arch.norm == "rmsnorm"
    want = ("swiglu", "rmsnorm", False, "rotary") if llama else ("gelu", "layernorm", None, "learned")
    have = (arch.mlp, arch.norm, False if llama else None, arch.positions)
    if llama and arch.bias or have != want:
        raise ValueError(f"torch_models: {arch.name} mixes GPT and LLaMA layouts (mlp={arch.mlp}, norm={arch.norm}, "
                         f"bias={arch.bias}, positions={arch.positions}); build GPT (gelu, layernorm, learned) "
                         "or LLaMA (swiglu, rmsnorm, rotary, no bias)")
    if llama and arch.dropout:
        raise ValueError(f"torch_models: {arch.name} is LLaMA-style, which trains without dropout; got dropout "
                         f"{arch.dropout} (give 0.0)")
    if getattr(arch, "kv_heads", None) not in (None, arch.heads) or getattr(arch, "experts", 1) != 1:
        raise ValueError(f"torch_models: {arch.name} has grouped-query attention or experts; not built")
    return torch_layers.Model(arch, attention=attention, checkpoint=checkpoint, llama=llama)
