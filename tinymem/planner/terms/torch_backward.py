"""The backward and the update of one PyTorch training step, written onto the tape after
:class:`.torch_ops.Forward`'s forward (the ops' memory is listed in :mod:`.torch_ops`).

The autograd engine runs a node's backward, makes its input gradients (``in_flight`` until the
next node consumes them) and its parameters' gradients (``.grad``: AccumulateGrad keeps the
tensor), then lets go of the incoming gradient and of the tensors the node saved when nothing
else holds them. A residual stream's gradient is shared by both branches of the add and goes
once the second is done (the norm's gradient is added into it in place).
"""
from .torch_ops import Forward


class Step(Forward):
    """:class:`~.torch_ops.Forward` and the rest of the step: the loss's backward, the head's,
    each block's (recomputed first under checkpointing), the embeddings', AdamW's update."""

    # -- backward ----------------------------------------------------------------------------
    def loss_backward(self):
        """The cross-entropy backward, one place: dlogp (nll_loss) and dlogits (log_softmax)
        beside log_softmax's saved output (and the held logits): 12·N·V bytes, 16 held."""
        d, new, t = self.d, self.new, self.t
        t.enter("loss backward")
        NV = 4 * d.N * d.V
        new("dlogp", "in_flight", "dlogp (nll_loss backward)", "4·N·V", NV)
        new("dlogits", "in_flight", "dlogits (log_softmax backward)", "4·N·V", NV)
        t.free("dlogp", "logp")
        t.enter("head backward")
        grad = self.loss_gradient("dlogits")
        dx = self.linear_backward("head", grad, "lnf.out", "h", d.h, (d.V, "V"), what="head weight",
                                  bias=d.bias and not d.tied, weight_first=True)
        return self.norm_backward("lnf", dx, f"{d.L - 1}.x2" if d.L else "x0")

    def loss_gradient(self, grad):
        """The logits' gradient as the head's Linear receives it (fp32: dlogits itself)."""
        return grad

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
        new(tag + ".db", "gradient", "norm bias gradient", "4·h", 4 * d.h)  # a LayerNorm has one (the Arch's)
        t.free(grad, x, tag + ".mean", tag + ".rstd")
        return dx

    def linear_backward(self, tag, grad, saved, rows_in, inp, out, free_grad=True, free_saved=True,
                        what="weight", bias=None, weight_first=None):
        """``AddmmBackward``/``MmBackward``: dx (4·N·in), dW (4·in·out, the .grad), db, then the
        incoming gradient and the saved input go when nothing else holds them."""
        dx = self.linear_gradients(tag, rows_in, inp, out, what, bias, weight_first)
        self.t.free(*([grad] if free_grad else []) + ([self.saved_input(tag, saved)] if free_saved else []))
        return dx

    def linear_gradients(self, tag, rows_in, inp, out, what, bias, weight_first, width=4, suffix=""):
        """A Linear's dx, dW and db of ``width`` bytes a value (``suffix``ed tags; fp32 dW and db
        are the .grad, bf16 ones wait for their cast), in the engine's order: ``MmBackward``
        (no bias) makes the weight's gradient first, ``AddmmBackward`` the input's."""
        d, new, w = self.d, self.new, width
        bias = d.bias if bias is None else bias
        weight_first = not bias if weight_first is None else weight_first
        bucket, dtype = (self.grad_bucket(tag), "") if w == 4 else ("in_flight", " (bf16)")
        dw = (tag + ".dW" + suffix, bucket, f"{what} gradients{dtype}", f"{w}·{rows_in}·{out[1]}", w * inp * out[0])
        if weight_first:
            new(*dw)
        dx = new(tag + ".dx" + suffix, "in_flight", f"input gradient{dtype}", f"{w}·N·{rows_in}", w * d.N * inp)
        if not weight_first:
            new(*dw)
        if bias:
            new(tag + ".db" + suffix, bucket, f"bias gradients{dtype}", f"{w}·{out[1]}", w * out[0])
        return dx

    def grad_bucket(self, tag):
        """Where Linear ``tag``'s fp32 weight gradient goes: the .grad, except a tied head's,
        which waits in flight for the embedding's to be added to it (:meth:`embedding_backward`)."""
        return "in_flight" if tag == "head" and self.d.tied else "gradient"

    def saved_input(self, tag, x):
        """What Linear ``tag`` saved of its input ``x`` (fp32: ``x`` itself)."""
        return x

    def kept_norm(self, x):
        """A norm's output, if its Linears saved it (fp32): ``[x]``."""
        return [x]

    def sdpa_saved(self, p):
        """What SDPA saved of a LLaMA's q, k and v (fp32: the rotated q and k, and v)."""
        return [p + "qr", p + "kr", p + "v"]

    def rotary_backward(self, tag, grad):
        """The gradient of q or k through rotary positions, as q's Linear receives it (fp32:
        written as the same tensor: its temporaries are never the step's peak)."""
        return grad

    def branch_gradient(self, tag, grad):
        """The residual stream's gradient as a branch receives it (fp32: the same tensor,
        shared with the stream)."""
        return grad

    def dropout_backward(self, tag, grad, values, formula, shared=False, width=None):
        """Gradient times the saved noise; the incoming gradient goes unless the residual
        stream's other branch (``shared``) still holds it."""
        if not self.d.p:
            return grad
        w = self.c if width is None else width
        g = self.new(tag + ".dg", "in_flight", "gradient through dropout", f"{w}·" + formula, w * values)
        self.t.free(*([] if shared else [grad]), tag + ".noise")
        return g

    def block_moment(self, i):
        last, first = i == self.d.L - 1, i == 0
        return "block backward (last layer)" if last else "block backward (first layer)" if first else "block backward"

    def block_backward(self, i, grad, x):
        """Block ``i``'s backward from the gradient of its output; ``x`` its saved input.
        Returns the gradient of its input."""
        d, new, t, p = self.d, self.new, self.t, f"{i}."
        t.enter(self.block_moment(i))
        c = self.c
        Nh, aBss = c * d.N * d.h, c * d.a * d.B * d.s * d.s
        h, f = d.h, d.f
        g2 = self.branch_gradient(p + "g2", grad)
        g = self.dropout_backward(p + "mdrop", g2, d.N * d.h, "N·h", shared=g2 == grad)
        if d.llama:
            dp = self.linear_backward(p + "mlp", g, p + "prod", "f", f, (h, "h"), free_grad=g != grad)
            new(p + "dsilu", "in_flight", "gradient of silu·up", f"{c}·N·f", c * d.N * f)
            new(p + "dup", "in_flight", "gradient of silu·up", f"{c}·N·f", c * d.N * f)
            t.free(dp, p + "silu", p + "up")
            dx_up = self.linear_backward(p + "up", p + "dup", p + "ln2.out", "h", h, (f, "f"), free_saved=False)
            new(p + "dgate", "in_flight", "silu gradient", f"{c}·N·f", c * d.N * f)
            t.free(p + "dsilu", p + "gate")
            dx_gate = self.linear_backward(p + "gate", p + "dgate", p + "ln2.out", "h", h, (f, "f"), free_saved=False)
            t.free(dx_gate, *self.kept_norm(p + "ln2.out"))  # added into dx_up in place
            dln = dx_up
        else:
            dg = self.linear_backward(p + "mlp", g, p + "gelu", "f", f, (h, "h"), free_grad=g != grad)
            new(p + "dfc", "in_flight", "GELU gradient", f"{c}·N·f", c * d.N * f)
            t.free(dg, p + "fc")
            dln = self.linear_backward(p + "fc", p + "dfc", p + "ln2.out", "h", h, (f, "f"))
        dx1 = self.norm_backward(p + "ln2", dln, p + "x1")
        t.free(grad)  # the residual's gradient is added into the norm's in place
        g1 = self.branch_gradient(p + "g1", dx1)
        g = self.dropout_backward(p + "rdrop", g1, d.N * d.h, "N·h", shared=g1 == dx1)
        dy = self.linear_backward(p + "o", g, p + "y", "h", h, (h, "h"), free_grad=g != dx1,
                                  free_saved=not self.flash)
        if self.flash:
            for n in "qkv":
                new(p + "d" + n, "in_flight", "SDPA input gradients", f"{c}·N·h", Nh)
            saved = self.sdpa_saved(p) if d.llama else [p + "qkv"]
            t.free(dy, *saved, p + "lse", p + "y")
        else:
            dyc = new(p + "dyc", "in_flight", "attention output gradient (reshaped)", f"{c}·N·h", Nh)
            t.free(dy)
            new(p + "dv", "in_flight", "v gradient", f"{c}·N·h", Nh)
            datt = new(p + "datt", "in_flight", "attention weights gradient", f"{c}·a·B·s²", aBss)
            t.free(dyc, p + "vc")
            if d.p and not d.llama:
                datt = self.dropout_backward(p + "attdrop", datt, d.a * d.B * d.s * d.s, "a·B·s²")
                t.free(p + "attdrop.out")
            new(p + "dsc", "in_flight", "softmax gradient", f"{c}·a·B·s²", aBss)
            t.free(datt, p + "att")
            scores = p + "dsc"
            if not self.fallback:  # masked_fill's and the scale's backward (the fallback adds its mask in place)
                new(p + "dmask", "in_flight", "masked_fill gradient", f"{c}·a·B·s²", aBss)
                t.free(p + "dsc", p + "mask")
                new(p + "dscale", "in_flight", "scale gradient", f"{c}·a·B·s²", aBss)
                t.free(p + "dmask", p + "scale")
                scores = p + "dscale"
            new(p + "dq", "in_flight", "q gradient", f"{c}·N·h", Nh)
            new(p + "dk", "in_flight", "k gradient", f"{c}·N·h", Nh)
            t.free(scores, p + "qc", p + "kc")
            for n in "qk":  # the transposed gradients made contiguous (the fallback: scaled back)
                new(p + "d" + n + "c", "in_flight", "q or k gradient (contiguous)", f"{c}·N·h", Nh)
                t.free(p + "d" + n)
        grads = [p + "dq", p + "dk", p + "dv"] if self.flash else [p + "dqc", p + "dkc", p + "dv"]
        if d.llama:
            dx = None
            for n, g in zip("qkv", grads):
                g = self.rotary_backward(p + n, g) if n != "v" else g
                out = self.linear_backward(p + n, g, p + "ln1.out", "h", h, (h, "h"), free_saved=False)
                if dx is not None:
                    t.free(out)  # added into the first in place
                dx = dx or out
        else:
            new(p + "dqkv", "in_flight", "c_attn output gradient (cat)", f"{c}·3·N·h", 3 * Nh)
            t.free(*grads)
            dx = self.linear_backward(p + "qkv", p + "dqkv", p + "ln1.out", "h", h, (3 * h, "3h"))
        if d.llama:
            t.free(*self.kept_norm(p + "ln1.out"))
        dx0 = self.norm_backward(p + "ln1", dx, x)
        t.free(dx1, *([p + "rng"] if self.o.checkpoint else []))
        return dx0

    def embedding_backward(self, grad):
        """The embeddings' dense gradients; a tied table's is added to the head's out of place."""
        d, new, t = self.d, self.new, self.t
        t.enter("end of backward")
        grad = self.dropout_backward("emb.drop", grad, d.N * d.h, "N·h", width=4)
        if not d.llama:
            new("pos.sum", "in_flight", "position gradient summed over the batch", "4·s·h", 4 * d.s * d.h)
            new("pos.dW", "gradient", "position table gradient", "4·s·h", 4 * d.s * d.h)
            t.free("pos.sum", "positions")
        Vh = 4 * d.V * d.h
        new("tok.dW", "in_flight" if d.tied else "gradient", "token table gradient (dense)", "4·V·h", Vh)
        t.free(grad)
        if d.tied:  # the two addends wait in flight; their sum is the engine's, the .grad once AccumulateGrad runs
            new("tied.sum", "temporary", "tied table: head + embedding gradients, added out of place", "4·V·h", Vh)
            t.free("tok.dW", "head.dW")
            t.free("tied.sum")  # AccumulateGrad takes the sum as the .grad: the same bytes, a gradient now
            new("tied.dW", "gradient", "tied table gradient", "4·V·h", Vh)
        t.free("loss")

    # -- the update ----------------------------------------------------------------------------
    def optimizer(self, sizes):
        """AdamW over the parameters of ``sizes`` (values each, in ``model.parameters()``
        order). for-loop: ``sqrt`` of exp_avg_sq and its ``div`` (the denominator), the last
        parameter's denominator alive until the next one's is made; foreach: ``_foreach_sqrt``
        of every parameter at once; fused: no temporaries."""
        t = self.t
        t.enter("optimizer step")
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
