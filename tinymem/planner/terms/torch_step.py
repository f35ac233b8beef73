"""The ``torch`` mode: the peak of one PyTorch 2.13 training step of a GPT or a LLaMA.

Where the ``tinymem`` mode counts what tinymem's engine holds, this mode counts what PyTorch
holds while it runs the step people write (nanoGPT's, or a LLaMA's: the models of
``tinymem.measure.torch_models``): AdamW's state exists (the second step, gradients set to
None by ``zero_grad``), the forward saves its tensors, the loss's backward makes its two
N×V gradients beside log_softmax's saved output, the blocks' backward frees saved tensors as it
makes gradients, the embedding's backward adds a tied table's two gradients out of place, and
AdamW's update makes its implementation's temporaries. :mod:`.torch_ops` writes each op onto a
:class:`~.torch_tape.Tape`; the peak is the largest running total, and the tensors alive there
are the named terms (so each byte of the peak is a term: the cross-entropy moment's dlogp and
dlogits are :meth:`.torch_backward.Step.loss_backward`'s).

Options (:class:`~..inputs.TorchOptions`, resolved at the door by :func:`~..inputs.resolve_torch`):
AdamW's implementation, logits held by the caller, math attention or SDPA, every block
checkpointed (``torch.utils.checkpoint(use_reentrant=False)``: each block's RNG state kept, the
block recomputed up to its last saving op as its backward begins), tied or untied embeddings and
dropout p (the Arch's ``tied`` and ``dropout``), the device.

Measured on the CPU (``tests/measure/test_torch_mode_measured.py``: within 1% in fp32, 3% under bf16
autocast). Not modelled
(refused): bf16 autocast of SDPA with dropout on the CPU (its math kernel computes in
float32), grouped-query attention, experts. SDPA with dropout on the CPU in
fp32 runs PyTorch's math kernel (:class:`~.torch_ops.Forward`'s fallback: the scaled q and k,
an additive float mask, ``_safe_softmax``'s masks), written as such. On CUDA the prediction is the
CPU's program with the CUDA differences below, and it is **unmeasured** (``measured=False``):
dropout saves a 1-byte mask (bool) in place of float noise, every allocation is rounded up to
512 bytes by the caching allocator, SDPA's flash and memory-efficient backends save a
log-sum-exp (4·a·B·s) and not the s×s weights (as the CPU's flash kernel does; with dropout too,
which they run fused, where the CPU falls back to the math kernel), a checkpoint's RNG states are
host memory, and AdamW defaults to foreach. Not written for CUDA: the kernels' workspaces
(cuBLAS's, SDPA backward's), the CUDA context, fragmentation (``tinymem plan``'s allowances).
"""
from collections import namedtuple

from ..inputs import TorchOptions, resolve_torch
from ..model import architectures as archs
from .torch_autocast import AutocastStep
from .torch_backward import Step
from .torch_ops import RNG_STATE
from .torch_tape import BUCKETS, Tape

CUDA_ROUNDING = 512  # the CUDA caching allocator's unit: every block a multiple of 512 B

__all__ = ["breakdown", "TorchBreakdown", "Dims", "parameter_sizes", "BUCKETS"]

TorchBreakdown = namedtuple("TorchBreakdown", "arch batch options peak moment moments buckets terms "
                                               "moment_terms measured")
TorchBreakdown.__doc__ = """The torch mode's answer: ``peak`` bytes, ``moment`` the phase of the step
it falls in, ``moments`` ``{moment: {bucket: bytes}}`` (each phase at its largest), ``buckets``
``{bucket: bytes}`` at the peak (they sum to it), ``terms`` ``[(bucket, Term)]`` the tensors
alive at the peak, ``moment_terms`` ``{moment: [(bucket, Term)]}`` those alive at each moment's
largest, ``measured`` False on CUDA (a prediction no GPU has confirmed yet)."""


class Dims:
    """The sizes the ops read: B, s, N = B·s, h, f, a, V, L, dropout p, bias, tied, llama."""

    def __init__(self, arch, batch, device="cpu"):
        self.B, self.s, self.h, self.a = batch, arch.seq, arch.hidden, arch.heads
        self.V, self.L, self.f = arch.vocab, arch.layers, archs.ffn(arch)
        self.N, self.p, self.bias, self.tied = batch * arch.seq, arch.dropout, arch.bias, arch.tied
        self.llama = arch.norm == "rmsnorm"
        self.cuda = device == "cuda"
        self.rng_state = 0 if self.cuda else RNG_STATE  # CUDA keeps the RNG states on the host


def parameter_sizes(arch):
    """Values of each parameter in ``model.parameters()`` order (the order AdamW's for-loop
    visits them): token table, positions, each block's (norm, attention, norm, MLP), final
    norm, untied head."""
    h, f, V = arch.hidden, archs.ffn(arch), arch.vocab
    llama = arch.norm == "rmsnorm"
    norm = [h] if llama else [h, h]
    if llama:
        block = norm + [h * h] * 4 + norm + [f * h] * 3
        before = [V * h]
    else:
        b = arch.bias
        block = (norm + [3 * h * h] + ([3 * h] if b else []) + [h * h] + ([h] if b else []) + norm
                 + [f * h] + ([f] if b else []) + [h * f] + ([h] if b else []))
        before = [V * h, arch.seq * h]
    head = [] if arch.tied else [V * h] + ([V] if arch.bias and not llama else [])
    return before + block * arch.layers + norm + head


def breakdown(arch, batch=1, options=TorchOptions()):
    """The torch mode's :class:`TorchBreakdown` of ``arch`` (an Arch or a preset's name) on
    ``batch`` sequences, with ``options`` (a :class:`~..inputs.TorchOptions`)."""
    arch = archs.get_arch(arch)
    return evaluate(arch, batch, resolve_torch(options, arch, batch))


def evaluate(arch, batch, options):
    """:func:`breakdown` below the door (``options`` resolved)."""
    d = Dims(arch, batch, options.device)
    sizes = parameter_sizes(arch)
    tape = Tape(CUDA_ROUNDING if d.cuda else 1)
    tape.enter("start")
    n = sum(sizes)
    tape.new("weights", "parameter", "weights", "4·n", 4 * n)
    if options.attention == "math":
        tape.new("mask buffers", "buffer", "causal mask buffers (float)", "4·s²·L", 4 * arch.seq ** 2 * arch.layers)
    if d.llama:
        tape.new("rotary buffers", "buffer", "rotary cos and sin buffers", "2·4·s·(h/a)·L",
                 8 * arch.seq * (arch.hidden // arch.heads) * arch.layers)
    tape.new("adamw state", "optimizer", "AdamW exp_avg and exp_avg_sq", "8·n", 8 * n)
    tape.new("adamw steps", "optimizer", "AdamW step counters (one float per parameter)", "4·tensors", 4 * len(sizes))
    tape.new("ids", "input", "token ids and targets (int64)", "16·B·s", 16 * d.N)
    tape.enter("forward")
    step = (AutocastStep if options.precision == "bf16-autocast" else Step)(tape, d, options)
    x = step.embedding()
    inputs = []
    for i in range(arch.layers):
        inputs.append(x)
        x = step.checkpointed_block(i, x) if options.checkpoint else step.block(i, x)
    step.head(x)
    grad = step.loss_backward()
    for i in reversed(range(arch.layers)):
        if options.checkpoint:
            tape.enter(step.block_moment(i))
            step.recompute(i, inputs[i])
        grad = step.block_backward(i, grad, inputs[i])
    step.embedding_backward(grad)
    step.optimizer(sizes)
    peak = tape.run()
    return TorchBreakdown(arch, batch, options, peak.bytes, peak.moment, peak.moments, peak.buckets, peak.live,
                          peak.terms, options.device == "cpu")
