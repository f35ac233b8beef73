"""The ops of one PyTorch training step, written onto a :class:`~.torch_tape.Tape`: what each
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



class Step:
    """Writes one training step of a GPT or LLaMA onto ``tape``: ``d`` its sizes
    (:class:`~.torch_step.Dims`), ``options`` the resolved :class:`~..inputs.TorchOptions`."""

    def __init__(self, tape, d, options):
        self.t, self.d, self.o = tape, d, options

    def new(self, tag, bucket, name, formula, nbytes):
        return self.t.new(tag, bucket, name, formula, nbytes)

    # -- forward -----------------------------------------------------------------------------
    def dropout(self, tag, x, values, formula):
        """CPU dropout over ``x``: its float noise saved, its output made, ``x`` let go."""
        if not self.d.p:
            return x
        self.new(tag + ".noise", "activation", "dropout noise (float, CPU)", "4·" + formula, 4 * values)
        out = self.new(tag + ".out", "activation", "dropout output", "4·" + formula, 4 * values)
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
        return self.dropout("emb.drop", x, d.N * d.h, "N·h")

    def norm(self, tag, x):
        d, new = self.d, self.new
        if d.llama:  # torch.rms_norm: x², its mean, 1/rms saved, x·(1/rms) saved, times the weight
            new(tag + ".sq", "temporary", "RMSNorm x²", "4·N·h", 4 * d.N * d.h)
            new(tag + ".ms", "temporary", "RMSNorm mean of x²", "4·N", 4 * d.N)
            new(tag + ".rstd", "activation", "RMSNorm 1/rms", "4·N", 4 * d.N)
            self.t.free(tag + ".ms", tag + ".sq")
            new(tag + ".xhat", "activation", "RMSNorm x/rms", "4·N·h", 4 * d.N * d.h)
            return new(tag + ".out", "activation", "RMSNorm output", "4·N·h", 4 * d.N * d.h)
        out = new(tag + ".out", "activation", "LayerNorm output", "4·N·h", 4 * d.N * d.h)
        new(tag + ".mean", "activation", "LayerNorm mean", "4·N", 4 * d.N)
        new(tag + ".rstd", "activation", "LayerNorm 1/std", "4·N", 4 * d.N)
        return out

    def block(self, i, x):
        """One block's forward; returns its output's tag (the next block's saved input)."""
        d, new, t, p = self.d, self.new, self.t, f"{i}."
        Nh, aBss = 4 * d.N * d.h, 4 * d.a * d.B * d.s * d.s
        ln1 = self.norm(p + "ln1", x)
        if d.llama:
            q, k, v = (new(p + n, "temporary", f"{n} projection", "4·N·h", Nh) for n in "qkv")
            for n in "qk":  # x·cos + cat(-x2, x1)·sin: cos, sin buffers saved, nothing new
                new(p + n + "c", "temporary", "rotary x·cos", "4·N·h", Nh)
                new(p + n + "neg", "temporary", "rotary -x2", "2·N·h", Nh // 2)
                new(p + n + "cat", "temporary", "rotary rotate_half", "4·N·h", Nh)
                t.free(p + n + "neg")
                new(p + n + "s", "temporary", "rotary rotate_half·sin", "4·N·h", Nh)
                t.free(p + n + "cat")
                new(p + n + "r", "activation" if self.o.attention == "sdpa" else "temporary", "rotary q or k", "4·N·h", Nh)
                t.free(p + n + "s", p + n + "c", p + n)
            qkv = [p + "qr", p + "kr", p + "v"]
        else:
            qkv = [new(p + "qkv", "activation" if self.o.attention == "sdpa" else "temporary", "c_attn output (q, k, v)",
                       "4·3·N·h", 3 * Nh)]
        if self.o.attention == "sdpa":  # CPU flash: q, k, v, the output and the log-sum-exp saved
            y = new(p + "y", "activation", "SDPA output (c_proj's input)", "4·N·h", Nh)
            new(p + "lse", "activation", "SDPA log-sum-exp", "4·a·B·s", 4 * d.a * d.B * d.s)
        else:
            new(p + "qc", "activation", "q copied by matmul", "4·N·h", Nh)
            new(p + "kc", "activation", "kᵀ copied by matmul", "4·N·h", Nh)
            new(p + "sc", "temporary", "attention scores", "4·a·B·s²", aBss)
            new(p + "scale", "activation", "1/sqrt(d) scalar", "8", 8)
            new(p + "scaled", "temporary", "scaled scores", "4·a·B·s²", aBss)
            t.free(p + "sc")
            new(p + "mask", "activation", "masked_fill's bool mask", "s²", d.s * d.s)
            new(p + "masked", "temporary", "masked scores", "4·a·B·s²", aBss)
            t.free(p + "scaled")
            att = new(p + "att", "activation", "softmax output", "4·a·B·s²", aBss)
            t.free(p + "masked")
            if not d.llama:
                self.dropout(p + "attdrop", att, d.a * d.B * d.s * d.s, "a·B·s²")  # softmax's output stays saved
                if d.p:  # the dropout's input is softmax's saved output: undo the free
                    t.events.pop()
            new(p + "vc", "activation", "v copied by matmul", "4·N·h", Nh)
            new(p + "yb", "temporary", "attention output", "4·N·h", Nh)
            y = new(p + "y", "activation", "attention output made contiguous", "4·N·h", Nh)
            t.free(p + "yb")
        proj = new(p + "proj", "temporary", "attention projection output", "4·N·h", Nh)
        if self.o.attention != "sdpa":
            t.free(*qkv)
        proj = self.dropout(p + "rdrop", proj, d.N * d.h, "N·h")
        x1 = new(p + "x1", "activation", "residual stream", "4·N·h", Nh)
        t.free(proj)
        self.norm(p + "ln2", x1)
        if d.llama:
            Nf = 4 * d.N * d.f
            new(p + "gate", "activation", "gate output", "4·N·f", Nf)
            new(p + "silu", "activation", "silu output", "4·N·f", Nf)
            new(p + "up", "activation", "up output", "4·N·f", Nf)
            new(p + "prod", "activation", "silu·up", "4·N·f", Nf)
        else:
            new(p + "fc", "activation", "c_fc output", "4·N·f", 4 * d.N * d.f)
            new(p + "gelu", "activation", "GELU output", "4·N·f", 4 * d.N * d.f)
        out = new(p + "mlp", "temporary", "MLP output", "4·N·h", Nh)
        out = self.dropout(p + "mdrop", out, d.N * d.h, "N·h")
        x2 = new(p + "x2", "activation", "residual stream", "4·N·h", Nh)
        t.free(out)
        return x2

    def head(self, x):
        """Final norm, head, cross-entropy: the logits (held by the caller, or let go once the
        loss has them), log_softmax's saved output."""
        d, new = self.d, self.new
        self.norm("lnf", x)
        NV = 4 * d.N * d.V
        new("logits", "temporary", "logits" + (" (held by the caller)" if self.o.hold_logits else ""), "4·N·V", NV)
        new("logp", "activation", "log_softmax output", "4·N·V", NV)
        new("loss", "activation", "loss and total weight", "8", 8)
        if not self.o.hold_logits:
            self.t.free("logits")

    # -- backward ----------------------------------------------------------------------------
    def loss_backward(self):
        """The cross-entropy backward, one place: dlogp (nll_loss) and dlogits (log_softmax)
        beside log_softmax's saved output (and the held logits): 12·N·V bytes, 16 held."""
        d, new, t = self.d, self.new, self.t
        t.moment = "loss backward"
        NV = 4 * d.N * d.V
        new("dlogp", "in_flight", "dlogp (nll_loss backward)", "4·N·V", NV)
        new("dlogits", "in_flight", "dlogits (log_softmax backward)", "4·N·V", NV)
        t.free("dlogp", "logp")
        t.moment = "head backward"
        dw = "head.dW" if not d.tied else "tied.head_dW"
        new(dw, "gradient", "head weight gradient", "4·V·h", 4 * d.V * d.h)
        dx = new("head.dx", "in_flight", "head input gradient", "4·N·h", 4 * d.N * d.h)
        if d.bias and not d.tied:
            new("head.db", "gradient", "head bias gradient", "4·V", 4 * d.V)
        t.free("dlogits", "lnf.out")
        return self.norm_backward("lnf", dx, f"{d.L - 1}.x2" if d.L else "x0")

    def norm_backward(self, tag, grad, x):
        d, new, t = self.d, self.new, self.t
        Nh = 4 * d.N * d.h
        if d.llama:  # RMSNorm's backward, decomposed: out = xhat·w, xhat = x·r, r = rsqrt(mean(x²) + eps)
            new(tag + ".dxhat", "in_flight", "RMSNorm gradient of x/rms", "4·N·h", Nh)
            new(tag + ".tw", "temporary", "RMSNorm grad·xhat", "4·N·h", Nh)
            new(tag + ".dw", "gradient", "norm weight gradient", "4·h", 4 * d.h)
            t.free(tag + ".tw", grad, tag + ".xhat")
            dx = new(tag + ".dx", "in_flight", "gradient of the residual stream", "4·N·h", Nh)
            new(tag + ".tr", "temporary", "RMSNorm dxhat·x", "4·N·h", Nh)
            new(tag + ".dr", "in_flight", "RMSNorm 1/rms gradient", "4·N", 4 * d.N)
            t.free(tag + ".tr", tag + ".dxhat")
            for k in "12":
                new(tag + ".r" + k, "temporary", "rsqrt backward temporaries", "4·N", 4 * d.N)
            new(tag + ".dm", "in_flight", "RMSNorm mean gradient", "4·N", 4 * d.N)
            t.free(tag + ".r1", tag + ".r2", tag + ".dr", tag + ".rstd")
            new(tag + ".dexp", "in_flight", "RMSNorm mean gradient expanded", "4·N·h", Nh)
            t.free(tag + ".dm")
            new(tag + ".p1", "temporary", "pow backward x", "4·N·h", Nh)
            new(tag + ".p2", "temporary", "pow backward 2x", "4·N·h", Nh)
            new(tag + ".dx2", "in_flight", "gradient through x²", "4·N·h", Nh)
            t.free(tag + ".p1", tag + ".p2", tag + ".dexp", x, tag + ".dx2")  # dx2 added into dx in place
            return dx
        dx = new(tag + ".dx", "in_flight", "gradient of the residual stream", "4·N·h", Nh)
        new(tag + ".dw", "gradient", "norm weight gradient", "4·h", 4 * d.h)
        if d.bias:
            new(tag + ".db", "gradient", "norm bias gradient", "4·h", 4 * d.h)
        t.free(grad, x, tag + ".mean", tag + ".rstd")
        return dx

    def linear_backward(self, tag, grad, saved, rows_in, inp, out, free_grad=True, free_saved=True):
        """``AddmmBackward``/``MmBackward``: dx (4·N·in), dW (4·in·out, the .grad), db, then the
        incoming gradient and the saved input go when nothing else holds them."""
        d, new, t = self.d, self.new, self.t
        dw = ("dW", "gradient", "weight gradients", f"4·{rows_in}·{out[1]}", 4 * inp * out[0])
        if not d.bias:  # MmBackward makes the weight's gradient first, AddmmBackward the input's
            new(tag + "." + dw[0], *dw[1:])
        dx = new(tag + ".dx", "in_flight", "input gradient", f"4·N·{rows_in}", 4 * d.N * inp)
        if d.bias:
            new(tag + "." + dw[0], *dw[1:])
            new(tag + ".db", "gradient", "bias gradients", f"4·{out[1]}", 4 * out[0])
        t.free(*([grad] if free_grad else []) + ([saved] if free_saved else []))
        return dx

    def dropout_backward(self, tag, grad, values, formula, shared=False):
        """Gradient times the saved noise; the incoming gradient goes unless the residual
        stream's other branch (``shared``) still holds it."""
        if not self.d.p:
            return grad
        g = self.new(tag + ".dg", "in_flight", "gradient through dropout", "4·" + formula, 4 * values)
        self.t.free(*([] if shared else [grad]), tag + ".noise")
        return g

    def block_backward(self, i, grad, x):
        """Block ``i``'s backward from the gradient of its output; ``x`` its saved input.
        Returns the gradient of its input."""
        d, new, t, p = self.d, self.new, self.t, f"{i}."
        t.moment = "block backward (last layer)" if i == d.L - 1 else (
            "block backward (first layer)" if i == 0 else "block backward")
        Nh, aBss = 4 * d.N * d.h, 4 * d.a * d.B * d.s * d.s
        h, f = d.h, d.f
        g = self.dropout_backward(p + "mdrop", grad, d.N * d.h, "N·h", shared=True)
        if d.llama:
            dp = self.linear_backward(p + "down", g, p + "prod", "f", f, (h, "h"), free_grad=g != grad)
            new(p + "dsilu", "in_flight", "gradient of silu·up", "4·N·f", 4 * d.N * f)
            new(p + "dup", "in_flight", "gradient of silu·up", "4·N·f", 4 * d.N * f)
            t.free(dp, p + "silu", p + "up")
            dx_up = self.linear_backward(p + "upl", p + "dup", p + "ln2.out", "h", h, (f, "f"), free_saved=False)
            new(p + "dgate", "in_flight", "silu gradient", "4·N·f", 4 * d.N * f)
            t.free(p + "dsilu", p + "gate")
            dx_gate = self.linear_backward(p + "gatel", p + "dgate", p + "ln2.out", "h", h, (f, "f"), free_saved=False)
            t.free(dx_gate, p + "ln2.out")  # added into dx_up in place
            dln = dx_up
        else:
            dg = self.linear_backward(p + "c_proj2", g, p + "gelu", "f", f, (h, "h"), free_grad=g != grad)
            new(p + "dfc", "in_flight", "GELU gradient", "4·N·f", 4 * d.N * f)
            t.free(dg, p + "fc")
            dln = self.linear_backward(p + "c_fc", p + "dfc", p + "ln2.out", "h", h, (f, "f"))
        dx1 = self.norm_backward(p + "ln2", dln, p + "x1")
        t.free(grad)  # the residual's gradient is added into the norm's in place
        g = self.dropout_backward(p + "rdrop", dx1, d.N * d.h, "N·h", shared=True)
        dy = self.linear_backward(p + "o", g, p + "y", "h", h, (h, "h"), free_grad=g != dx1,
                                  free_saved=self.o.attention != "sdpa")
        if self.o.attention == "sdpa":
            for n in "qkv":
                new(p + "d" + n, "in_flight", "SDPA input gradients", "4·N·h", Nh)
            saved = [p + "qr", p + "kr", p + "v"] if d.llama else [p + "qkv"]
            t.free(dy, *saved, p + "lse", p + "y")
        else:
            dyc = new(p + "dyc", "in_flight", "attention output gradient (reshaped)", "4·N·h", Nh)
            t.free(dy)
            new(p + "dv", "in_flight", "v gradient", "4·N·h", Nh)
            datt = new(p + "datt", "in_flight", "attention weights gradient", "4·a·B·s²", aBss)
            t.free(dyc, p + "vc")
            if d.p and not d.llama:
                datt = self.dropout_backward(p + "attdrop", datt, d.a * d.B * d.s * d.s, "a·B·s²")
                t.free(p + "attdrop.out")
            new(p + "dsc", "in_flight", "softmax gradient", "4·a·B·s²", aBss)
            t.free(datt, p + "att")
            new(p + "dmask", "in_flight", "masked_fill gradient", "4·a·B·s²", aBss)
            t.free(p + "dsc", p + "mask")
            new(p + "dscale", "in_flight", "scale gradient", "4·a·B·s²", aBss)
            t.free(p + "dmask", p + "scale")
            new(p + "dq", "in_flight", "q gradient", "4·N·h", Nh)
            new(p + "dk", "in_flight", "k gradient", "4·N·h", Nh)
            t.free(p + "dscale", p + "qc", p + "kc")
            for n in "qk":  # the transposed gradients made contiguous
                new(p + "d" + n + "c", "in_flight", "q or k gradient (contiguous)", "4·N·h", Nh)
                t.free(p + "d" + n)
        grads = [p + "dq", p + "dk", p + "dv"] if self.o.attention == "sdpa" else [p + "dqc", p + "dkc", p + "dv"]
        if d.llama:
            dx = None
            for n, g in zip("qkv", grads):
                out = self.linear_backward(p + n + "l", g, p + "ln1.out", "h", h, (h, "h"), free_saved=False)
                if dx is not None:
                    t.free(out)  # added into the first in place
                dx = dx or out
        else:
            new(p + "dqkv", "in_flight", "c_attn output gradient (cat)", "4·3·N·h", 3 * Nh)
            t.free(*grads)
            dx = self.linear_backward(p + "c_attn", p + "dqkv", p + "ln1.out", "h", h, (3 * h, "3h"))
        if d.llama:
            t.free(p + "ln1.out")
        dx0 = self.norm_backward(p + "ln1", dx, x)
        t.free(dx1)
        return dx0

    def embedding_backward(self, grad):
        """The embeddings' dense gradients; a tied table's is added to the head's out of place."""
        d, new, t = self.d, self.new, self.t
        t.moment = "end of backward"
        grad = self.dropout_backward("emb.drop", grad, d.N * d.h, "N·h")
        if not d.llama:
            new("pos.sum", "in_flight", "position gradient summed over the batch", "4·s·h", 4 * d.s * d.h)
            new("pos.dW", "gradient", "position table gradient", "4·s·h", 4 * d.s * d.h)
            t.free("pos.sum", "positions")
        Vh = 4 * d.V * d.h
        new("tok.dW", "temporary" if d.tied else "gradient", "token table gradient (dense)", "4·V·h", Vh)
        t.free(grad)
        if d.tied:
            new("tied.sum", "gradient", "tied table: head + embedding gradients, added out of place", "4·V·h", Vh)
            t.free("tok.dW", "tied.head_dW")
        t.free("loss")

    # -- the update ----------------------------------------------------------------------------
    def optimizer(self, sizes):
        """AdamW over the parameters of ``sizes`` (values each, in ``model.parameters()``
        order). for-loop: ``sqrt`` of exp_avg_sq and its ``div`` (the denominator), the last
        parameter's denominator alive until the next one's is made; foreach: ``_foreach_sqrt``
        of every parameter at once; fused: no temporaries."""
        t = self.t
        t.moment = "optimizer step"
        if self.o.optimizer == "foreach":
            tags = [self.new(f"opt.sqrt{j}", "temporary", "foreach sqrt of every exp_avg_sq", "4·n", 4 * n)
                    for j, n in enumerate(sizes)]
            t.free(*tags)
        elif self.o.optimizer == "for-loop":
            last = None
            for j, n in enumerate(sizes):
                self.new(f"opt.sqrt{j}", "temporary", "for-loop sqrt of one exp_avg_sq", "4·n_i", 4 * n)
                self.new(f"opt.denom{j}", "temporary", "for-loop denominator of one parameter", "4·n_i", 4 * n)
                t.free(f"opt.sqrt{j}", *([last] if last else []))
                last = f"opt.denom{j}"
            t.free(last)
