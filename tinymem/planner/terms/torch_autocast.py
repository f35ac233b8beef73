"""bf16 autocast (``torch.autocast("cpu", torch.bfloat16)`` around the forward and the loss) in
the torch mode: the same ops as :mod:`.torch_ops` and :mod:`.torch_backward`, with the casts
autocast adds. Weights, gradients and AdamW's state stay fp32.

Forward: each Linear casts its weight to bf16 (2·in·out, saved for backward; the cast of a bias,
2·out, is kept in autocast's cache until the region ends) and its fp32 input (2·N·in, saved);
what it computes is bf16 (2 bytes a value), and so are attention's matmuls, softmax, GELU and
the dropouts after them; LayerNorm computes in fp32 (its output is no longer saved: the Linear
saves its bf16 cast); a residual add casts the bf16 branch to fp32 (4·N·h, let go after the
add); cross-entropy casts the bf16 logits (2·N·V, what a caller holds) to fp32 (4·N·V) for
log_softmax.

Backward: the residual stream's fp32 gradient is cast to bf16 for each branch (2·N·h); a Linear's
backward makes bf16 dx, dW and db, then the casts' backward turn them into fp32 (dW into .grad,
dx when its input was cast); dlogits is cast to bf16 (2·N·V) before the head's backward.

LLaMA layers: RMSNorm computes in fp32; the bf16 q and k times the fp32 rotary tables compute
in fp32 (each bf16 operand upcast for its product), and attention casts the rotated q and k
back to bf16 (saved by SDPA, or copied by matmul). A checkpointed block's weight casts stay in
autocast's cache to the forward's end; its recomputation casts again.

Measured on the CPU (``tests/measure/test_torch_mode_measured.py``: within 3%).
"""
from .torch_backward import Step


class AutocastStep(Step):
    """:class:`~.torch_backward.Step` under bf16 autocast (the hooks below)."""

    c = 2
    norm_bucket = "temporary"

    def __init__(self, tape, d, options):
        super().__init__(tape, d, options)
        self.casts, self.bias_casts, self.held = {}, [], []

    def linear(self, tag, x, inp, out, name, bucket, bias=None, output=None):
        d, new = self.d, self.new
        self.prepare(tag, inp, out, bias)
        if x.endswith(".out"):  # a norm's fp32 output: cast, and the cast saved
            self.casts[tag].append(new(tag + ".xcast", "activation", "input cast to bf16 (saved)",
                                       f"2·N·{self.sym(inp)}", 2 * d.N * inp))
        return new(output or tag, bucket, name, f"2·N·{self.sym(out)}", 2 * d.N * out)

    def prepare(self, tag, inp, out, bias=None):
        """The casts of a Linear's bias (autocast's cache) and weight (saved for backward; a
        checkpoint's recomputation casts the last Linear's weight, then stops)."""
        d, new = self.d, self.new
        if d.bias if bias is None else bias:
            self.bias_casts.append(new(tag + ".bcast", "temporary", "bias cast to bf16 (autocast cache)",
                                       f"2·{self.sym(out)}", 2 * out))
        self.casts[tag] = [new(tag + ".wcast", "activation", "weight cast to bf16 (saved)",
                               f"2·{self.sym(inp)}·{self.sym(out)}", 2 * inp * out)]

    def rotate(self, p, n, sdpa):
        """bf16 q or k times the fp32 cos and sin: computed in fp32 (the bf16 operand upcast for
        each product), so the rotated q or k is fp32."""
        new, t, Nh = self.new, self.t, 4 * self.d.N * self.d.h
        for step, name in (("c", "rotary x·cos"), ("neg", ""), ("cat", ""), ("s", "rotary rotate_half·sin")):
            if step == "neg":
                new(p + n + "neg", "temporary", "rotary -x2 (bf16)", "2·N·h/2", Nh // 4)
            elif step == "cat":
                new(p + n + "cat", "temporary", "rotary rotate_half (bf16)", "2·N·h", Nh // 2)
                t.free(p + n + "neg")
            else:
                new(p + n + step + ".up", "temporary", "bf16 operand upcast", "4·N·h", Nh)
                new(p + n + step, "temporary", name, "4·N·h", Nh)
                t.free(p + n + step + ".up", *([p + n + "cat"] if step == "s" else []))
        new(p + n + "r", "temporary", "rotary q or k (fp32)", "4·N·h", Nh)
        t.free(p + n + "s", p + n + "c", p + n)

    def matmul_casts(self, p, bucket):
        cNh = 2 * self.d.N * self.d.h
        return [self.new(p + n + "cast", bucket, "rotated q or k cast to bf16", "2·N·h", cNh) for n in "qk"]

    def kept_norm(self, x):
        return []  # released in the forward: only its bf16 casts were saved

    def sdpa_saved(self, p):
        return [p + "qcast", p + "kcast", p + "v"]

    def rotary_backward(self, tag, grad):
        """The bf16 gradient back to fp32 (the cast's backward), through the rotation in fp32, and
        to q's bf16 dtype."""
        Nh = 4 * self.d.N * self.d.h
        up = self.new(tag + ".dr32", "in_flight", "rotary gradient (fp32)", "4·N·h", Nh)
        self.t.free(grad)
        out = self.new(tag + ".dr", "in_flight", "rotary gradient cast to bf16", "2·N·h", Nh // 2)
        self.t.free(up)
        return out

    def release(self, x):
        self.t.free(x)  # a norm's fp32 output: only its bf16 casts are saved

    def residual(self, tag, branch):
        Nh = 4 * self.d.N * self.d.h
        self.new(tag + ".cast", "temporary", "bf16 branch cast to fp32", "4·N·h", Nh)
        x = self.new(tag, "activation", "residual stream", "4·N·h", Nh)
        self.t.free(tag + ".cast", branch)
        return x

    def loss_input(self, logits):
        return self.new("logits.fp32", "temporary", "logits cast to fp32 for the loss", "4·N·V",
                        4 * self.d.N * self.d.V)

    def forward_end(self):
        self.t.free(*self.bias_casts, *self.held)  # autocast's cache cleared at the region's exit
        self.bias_casts, self.held = [], []

    def cached(self, tag):
        """A checkpointed block's casts of weights and biases: autocast's cache holds them to
        the forward's end, though the block saves nothing."""
        if tag.endswith(".wcast"):
            self.held.append(tag)
        return tag.endswith((".wcast", ".bcast"))

    def recompute(self, i, x):
        """The recomputation runs in an autocast region of its own: its bias casts go at its end."""
        super().recompute(i, x)
        self.forward_end()

    def loss_gradient(self, grad):
        out = self.new("dlogits.bf16", "in_flight", "dlogits cast to bf16", "2·N·V", 2 * self.d.N * self.d.V)
        self.t.free(grad)
        return out

    def branch_gradient(self, tag, grad):
        return self.new(tag, "in_flight", "residual gradient cast to bf16", "2·N·h", 2 * self.d.N * self.d.h)

    def saved_input(self, tag, x):
        return x  # the input cast goes with the weight's (linear_backward)

    def linear_backward(self, tag, grad, saved, rows_in, inp, out, free_grad=True, free_saved=True,
                        what="weight", bias=None, weight_first=None):
        """bf16 dx, dW, db; the incoming gradient, the saved input and the weight's cast go; then
        the casts' backward make fp32 dx (when the input was cast) and the fp32 .grad."""
        d, new, t = self.d, self.new, self.t
        bias = d.bias if bias is None else bias
        casts = self.casts.pop(tag)
        dx = self.linear_gradients(tag, rows_in, inp, out, what, bias, weight_first, width=2, suffix="16")
        saved_x = casts[1:] if len(casts) > 1 else ([saved] if free_saved else [])
        t.free(*([grad] if free_grad else []), *saved_x, casts[0])
        if len(casts) > 1:  # the input's cast: its gradient back to fp32
            new(tag + ".dx", "in_flight", "input gradient", f"4·N·{rows_in}", 4 * d.N * inp)
            t.free(dx)
            dx = tag + ".dx"
        new(tag + ".dW", self.grad_bucket(tag), f"{what} gradients", f"4·{rows_in}·{out[1]}", 4 * inp * out[0])
        t.free(tag + ".dW16")
        if bias:
            new(tag + ".db", "gradient", "bias gradients", f"4·{out[1]}", 4 * out[0])
            t.free(tag + ".db16")
        return dx
