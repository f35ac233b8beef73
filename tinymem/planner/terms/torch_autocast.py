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

Measured on the CPU for GPT layers (``tests/measure/test_torch_mode.py``: within 3%). A checkpointed
block's weight casts stay in autocast's cache to the forward's end; its recomputation casts
again. LLaMA layers under autocast are not written (RMSNorm and rotary positions mix dtypes their own way): refused.
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
        new(tag + ".dW", "gradient", f"{what} gradients", f"4·{rows_in}·{out[1]}", 4 * inp * out[0])
        t.free(tag + ".dW16")
        if bias:
            new(tag + ".db", "gradient", "bias gradients", f"4·{out[1]}", 4 * out[0])
            t.free(tag + ".db16")
        return dx
