"""The ops of one PyTorch training step (the forward here, the backward and update in
:mod:`.torch_backward`), written onto a :class:`~.torch_tape.Tape`: what each
makes, what it saves for backward, and when the engine lets it go.

Read against a profiler trace of torch 2.13 on the CPU (nanoGPT's and LLaMA's ops:
``tinymem.measure.torch_models``). w is 4 bytes (fp32); N = B·s tokens, h hidden, f the MLP's
width, a heads, V the vocabulary. What the step holds beyond what a textbook counts:

* the **cross-entropy backward**: ``log_softmax`` saves its output (w·N·V); ``nll_loss``'s
  backward writes dlogp (w·N·V), ``log_softmax``'s backward dlogits (w·N·V) while the saved
  output is alive: 3·w·N·V, plus the logits (w·N·V) when the caller holds them: 12-16·N·V bytes;
* **math attention** copies q, kᵀ and v for its batched matmuls (``matmul`` reshapes a
  non-contiguous view) and the attention output for ``view``; ``masked_fill`` saves an s×s bool
  mask, the scale an 8-byte scalar; softmax keeps its output beside a dropout's;
* **SDPA on the CPU** (flash) saves q, k, v as the one ``c_attn`` output they view, its output
  (which is also ``c_proj``'s saved input) and a log-sum-exp of a·B·s;
* **dropout on the CPU** saves a float noise tensor (w per element), not a 1-byte mask;
* **LayerNorm** saves mean and 1/std (w·N each); RMSNorm 1/rms (w·N) and its input;
* **a tied embedding**: the token table's dense gradient (V·h) and the head's are added out of
  place into a third;
* **AdamW**: for-loop, ``sqrt`` and ``div`` of each parameter (2 of it) beside the last one's
  ``denom``; foreach, ``_foreach_sqrt`` of every parameter (w·n); fused, none.

Not written (a few bytes each, or a kernel's scratch that depends on the machine's threads):
the 8 + 4-byte scalar copies around ops, LayerNorm backward's w·4h scratch, SDPA's
per-thread buffers, the loss's two 4-byte scalars.
"""



RNG_STATE = 5056  # bytes of torch.get_rng_state() on the CPU (the Mersenne Twister's state); host memory on CUDA


class Forward:
    """Writes the forward of one training step of a GPT or LLaMA onto ``tape``: ``d`` its sizes
    (:class:`~.torch_step.Dims`), ``options`` the resolved :class:`~..inputs.TorchOptions`
    (:class:`.torch_backward.Step` adds the backward and the update)."""

    def __init__(self, tape, d, options):
        self.t, self.d, self.o = tape, d, options
        # SDPA's fused kernels, or with dropout on the CPU PyTorch's math kernel (the fallback)
        self.flash = options.attention == "sdpa" and not (d.p and not d.cuda)
        self.fallback = options.attention == "sdpa" and not self.flash

    def new(self, tag, bucket, name, formula, nbytes):
        return self.t.new(tag, bucket, name, formula, nbytes)

    # -- forward -----------------------------------------------------------------------------
    def dropout(self, tag, x, values, formula, keep=False, width=None):
        """Dropout over ``x``: its noise saved (the CPU's noise in x's dtype, CUDA's
        ``native_dropout`` bool mask), its output made, ``x`` let go unless saved (``keep``)."""
        if not self.d.p:
            return x
        w = self.c if width is None else width
        if self.d.cuda:
            self.new(tag + ".noise", "activation", "dropout mask (bool, CUDA)", formula, values)
        else:
            self.new(tag + ".noise", "activation", "dropout noise (float, CPU)", f"{w}·" + formula, w * values)
        out = self.new(tag + ".out", "activation", "dropout output", f"{w}·" + formula, w * values)
        if not keep:
            self.t.free(x)
        return out

    def embedding(self):
        d, new = self.d, self.new
        tok = new("tok", "temporary", "token embedding output", "4·N·h", 4 * d.N * d.h)
        if d.llama:
            return tok
        new("positions", "activation", "position ids (int64)", "8·s", 8 * d.s)
        pos = new("pos", "temporary", "position embedding output", "4·s·h", 4 * d.s * d.h)
        x = new("x0", "activation", "embedding sum", "4·N·h", 4 * d.N * d.h)
        self.t.free(pos, tok)
        return self.dropout("emb.drop", x, d.N * d.h, "N·h", width=4)

    def norm(self, tag, x):
        d, new = self.d, self.new
        if d.llama:  # torch.rms_norm: x², its mean, 1/rms saved, x·(1/rms) saved, times the weight
            new(tag + ".sq", "temporary", "RMSNorm x²", "4·N·h", 4 * d.N * d.h)
            new(tag + ".ms", "temporary", "RMSNorm mean of x²", "4·N", 4 * d.N)
            new(tag + ".rstd", "activation", "RMSNorm 1/rms", "4·N", 4 * d.N)
            self.t.free(tag + ".ms", tag + ".sq")
            new(tag + ".xhat", "activation", "RMSNorm x/rms", "4·N·h", 4 * d.N * d.h)
            return new(tag + ".out", self.norm_bucket, "RMSNorm output", "4·N·h", 4 * d.N * d.h)
        out = new(tag + ".out", self.norm_bucket, "LayerNorm output", "4·N·h", 4 * d.N * d.h)
        new(tag + ".mean", "activation", "LayerNorm mean", "4·N", 4 * d.N)
        new(tag + ".rstd", "activation", "LayerNorm 1/std", "4·N", 4 * d.N)
        return out

    def block(self, i, x, stop_early=False):
        """One block's forward; returns its output's tag (the next block's saved input). With
        ``stop_early`` (a checkpoint's recomputation) it stops after the last op that saves a
        tensor, as ``torch.utils.checkpoint``'s early stop does: the MLP's last Linear and the
        residual add are not run again (with dropout, the Linear and the dropout are). Tensors
        the Linears compute are c bytes a value (:attr:`c`: 4, or 2 under autocast)."""
        d, new, t, p, c = self.d, self.new, self.t, f"{i}.", self.c
        Nh, cNh, aBss = 4 * d.N * d.h, c * d.N * d.h, c * d.a * d.B * d.s * d.s
        ln1 = self.norm(p + "ln1", x)
        sdpa = self.flash
        if d.llama:
            q, k, v = (self.linear(p + n, ln1, d.h, d.h, f"{n} projection", "temporary") for n in "qkv")
            for n in "qk":
                self.rotate(p, n, sdpa)
            qkv = [p + "qr", p + "kr", p + "v"]
        else:
            qkv = [self.linear(p + "qkv", ln1, d.h, 3 * d.h, "c_attn output (q, k, v)",
                               "activation" if sdpa else "temporary")]
        casts = self.matmul_casts(p, "activation" if sdpa else "temporary") if d.llama else []
        if sdpa:  # CPU flash: q, k, v, the output and the log-sum-exp saved
            y = new(p + "y", "activation", "SDPA output (c_proj's input)", f"{c}·N·h", cNh)
            new(p + "lse", "activation", "SDPA log-sum-exp", "4·a·B·s", 4 * d.a * d.B * d.s)
        elif self.fallback:  # SDPA with dropout on the CPU: PyTorch's math kernel, q and k scaled by √(1/√d)
            new(p + "qs", "temporary", "q scaled", f"{c}·N·h", cNh)
            new(p + "ones", "temporary", "causal mask ones (bool)", "s²", d.s * d.s)
            new(p + "tril", "temporary", "causal mask (bool)", "s²", d.s * d.s)
            t.free(p + "ones")
            new(p + "fmask", "temporary", "causal mask (float, additive)", "4·s²", 4 * d.s * d.s)
            t.free(p + "tril")
            new(p + "ks", "temporary", "k scaled", f"{c}·N·h", cNh)
            new(p + "qc", "activation", "q copied by matmul", f"{c}·N·h", cNh)
            new(p + "kc", "activation", "kᵀ copied by matmul", f"{c}·N·h", cNh)
            new(p + "sc", "temporary", "attention scores (mask added in place)", f"{c}·a·B·s²", aBss)
            t.free(p + "qs")
            att = new(p + "att", "activation", "softmax output", f"{c}·a·B·s²", aBss)
            new(p + "neginf", "temporary", "_safe_softmax's isneginf (bool)", "a·B·s²", aBss // c)
            new(p + "allinf", "temporary", "_safe_softmax's all (bool)", "a·B·s", d.a * d.B * d.s)
            t.free(p + "allinf", p + "neginf", p + "sc")
        else:
            new(p + "qc", "activation", "q copied by matmul", f"{c}·N·h", cNh)
            new(p + "kc", "activation", "kᵀ copied by matmul", f"{c}·N·h", cNh)
            new(p + "sc", "temporary", "attention scores", f"{c}·a·B·s²", aBss)
            t.free(*casts)
            new(p + "scale", "activation", "1/sqrt(d) scalar", "8", 8)
            new(p + "scaled", "temporary", "scaled scores", f"{c}·a·B·s²", aBss)
            t.free(p + "sc")
            new(p + "mask", "activation", "masked_fill's bool mask", "s²", d.s * d.s)
            new(p + "masked", "temporary", "masked scores", f"{c}·a·B·s²", aBss)
            t.free(p + "scaled")
            att = new(p + "att", "activation", "softmax output", f"{c}·a·B·s²", aBss)
            t.free(p + "masked")
        if not sdpa:
            if not d.llama:
                self.dropout(p + "attdrop", att, d.a * d.B * d.s * d.s, "a·B·s²", keep=True)
            new(p + "vc", "activation", "v copied by matmul", f"{c}·N·h", cNh)
            new(p + "yb", "temporary", "attention output", f"{c}·N·h", cNh)
            if self.fallback:
                t.free(p + "ks", p + "fmask")
            y = new(p + "y", "activation", "attention output made contiguous", f"{c}·N·h", cNh)
            t.free(p + "yb")
        proj = self.linear(p + "o", y, d.h, d.h, "attention projection output", "temporary")
        if not sdpa:
            t.free(*qkv)
        elif casts:  # the rotated q and k: SDPA saved their bf16 casts
            t.free(*qkv[:2])
        self.release(ln1)
        proj = self.dropout(p + "rdrop", proj, d.N * d.h, "N·h")
        x1 = self.residual(p + "x1", proj)
        ln2 = self.norm(p + "ln2", x1)
        if d.llama:
            Nf = 4 * d.N * d.f
            self.linear(p + "gate", ln2, d.h, d.f, "gate output", "activation")
            new(p + "silu", "activation", "silu output", f"{c}·N·f", c * d.N * d.f)
            self.linear(p + "up", ln2, d.h, d.f, "up output", "activation")
            new(p + "prod", "activation", "silu·up", f"{c}·N·f", c * d.N * d.f)
        else:
            fc = self.linear(p + "fc", ln2, d.h, d.f, "c_fc output", "activation")
            new(p + "gelu", "activation", "GELU output", f"{c}·N·f", c * d.N * d.f)
        if stop_early and not d.p:
            self.prepare(p + "mlp", d.f, d.h)
            self.release(ln2)
            return None
        out = self.linear(p + "mlp", p + "gelu", d.f, d.h, "MLP output", "temporary")
        self.release(ln2)
        out = self.dropout(p + "mdrop", out, d.N * d.h, "N·h")
        if stop_early:
            t.free(out)
            return None
        return self.residual(p + "x2", out)

    # hooks the autocast step (:mod:`.torch_autocast`) writes its own way
    c = 4  # bytes a value of what a Linear computes
    norm_bucket = "activation"  # a LayerNorm's output: saved by the Linears after it

    def linear(self, tag, x, inp, out, name, bucket, bias=None, output=None):
        """A Linear's output (tag ``output``, default ``tag``), ``bucket`` "activation" when the
        next op saves it (its input ``x`` is the caller's: saved already)."""
        return self.new(output or tag, bucket, name, f"4·N·{self.sym(out)}", 4 * self.d.N * out)

    def loss_input(self, logits):
        """What cross-entropy reads of the logits (fp32: the logits themselves; nothing to free)."""
        return None

    def forward_end(self):
        """The end of the forward (an autocast region's exit)."""

    def prepare(self, tag, inp, out):
        """What a Linear makes before it computes (a recomputation stops there: nothing in fp32)."""

    def cached(self, tag):
        """Whether something other than the graph (autocast's cache) holds ``tag``."""
        return False

    def sym(self, n):
        """The symbol of a width: h, 3h, f or V."""
        d = self.d
        return {d.h: "h", 3 * d.h: "3h", d.f: "f", d.V: "V"}.get(n, str(n))

    def rotate(self, p, n, sdpa):
        """Rotary positions on q or k the Hugging Face way, ``x·cos + cat(-x2, x1)·sin``: the cos
        and sin buffers saved, nothing new; the projection let go."""
        new, t, Nh = self.new, self.t, 4 * self.d.N * self.d.h
        new(p + n + "c", "temporary", "rotary x·cos", "4·N·h", Nh)
        new(p + n + "neg", "temporary", "rotary -x2", "2·N·h", Nh // 2)
        new(p + n + "cat", "temporary", "rotary rotate_half", "4·N·h", Nh)
        t.free(p + n + "neg")
        new(p + n + "s", "temporary", "rotary rotate_half·sin", "4·N·h", Nh)
        t.free(p + n + "cat")
        new(p + n + "r", "activation" if sdpa else "temporary", "rotary q or k", "4·N·h", Nh)
        t.free(p + n + "s", p + n + "c", p + n)

    def matmul_casts(self, p, bucket):
        """Attention's casts of the rotated q and k (none in fp32)."""
        return []

    def release(self, x):
        """A norm's output once its Linears ran: saved by them (fp32), so kept."""

    def residual(self, tag, branch):
        """``x + branch``: the sum (saved by the next norm), the branch let go."""
        x = self.new(tag, "activation", "residual stream", "4·N·h", 4 * self.d.N * self.d.h)
        self.t.free(branch)
        return x

    def checkpointed_block(self, i, x):
        """A block under ``torch.utils.checkpoint(use_reentrant=False)``: the CPU's RNG state
        (5,056 bytes) kept for the recomputation, and nothing the block computes saved: each
        tensor goes once no op holds it (written here as the whole block run, then its tensors
        let go: the forward's peak is below the recomputation's, which holds the same tensors
        beside gradients)."""
        t = self.t
        t.new(f"{i}.rng", "activation", "checkpoint's saved RNG state", "5056", self.d.rng_state)
        start = len(t.events)
        out = self.block(i, x)
        alive = {}
        for _, tag, made in t.events[start:]:
            if made is None:
                alive.pop(tag, None)
            else:
                alive[tag] = made
        t.free(*[tag for tag in alive if tag != out and not self.cached(tag)])
        return out

    def recompute(self, i, x):
        """Block ``i``'s forward again, saving, as its backward begins, between a copy of the
        RNG state of the moment (restored after) and the block's own (kept until its backward
        is done: :meth:`block_backward` lets it go)."""
        self.new(f"{i}.rng.now", "temporary", "RNG state restored after the recomputation", "5056", self.d.rng_state)
        self.block(i, x, stop_early=True)
        self.t.free(f"{i}.rng.now")

    def head(self, x):
        """Final norm, head, cross-entropy: the logits (held by the caller, or let go once the
        loss has them), log_softmax's saved output."""
        d, new = self.d, self.new
        self.norm("lnf", x)
        held = " (held by the caller)" if self.o.hold_logits else ""
        self.linear("head", "lnf.out", d.h, d.V, "logits" + held, "temporary", bias=d.bias and not d.tied,
                    output="logits")
        self.release("lnf.out")
        cast = self.loss_input("logits")
        new("logp", "activation", "log_softmax output", "4·N·V", 4 * d.N * d.V)
        if cast:
            self.t.free(cast)
        new("loss", "activation", "loss and total weight", "8", 8)
        self.forward_end()
        if not self.o.hold_logits:
            self.t.free("logits")
