"""The models the planner knows: how to build each from its sizes, make a batch, compute the loss,
and cut it into checkpointed blocks.

    mlp          sizes in,hidden,...,out              (``models.MLP``; batch: x (B, in), labels)
    unet         in_channels,classes,base,depth,res   (``models.UNet``; images (B, C, res, res))
    transformer  vocab,context,d_model,heads,layers   (``models.TransformerLM``; ids (B, context))

Checkpoint schedules: ``none``; ``sqrt`` (the chain of blocks in ceil(sqrt(n)) segments, as
``checkpoint_sequential``); ``block`` (every block its own checkpointed segment). MLP blocks are
(Linear, activation) pairs; the Transformer's are its ``TransformerBlock``s; the U-Net's are its
``DoubleConv`` / ``Down`` / ``Up`` blocks (skip connections make it no chain, so it has no ``sqrt``).
"""
import numpy as np

from ... import functional as F
from ... import backend, models, nn, random
from ...autograd import Tensor
from ...checks import is_int
from ...techniques.checkpoint import checkpoint, checkpoint_sequential
from ...techniques.precision import HalfModule

SCHEDULES = ("none", "sqrt", "block")


class CheckpointedChain(nn.Module):
    """Blocks run in a chain through :func:`checkpoint_sequential` with ``segments`` pieces.

    ``half_format``: when set (by :func:`tinymem.planner.measured.recipe.build`) every block runs as a
    :class:`HalfModule` of its own, so that its recomputation in backward (outside the model's
    half context) still upcasts half weights and stores its saved tensors half.
    """

    def __init__(self, blocks, segments):
        super().__init__()
        self.chain = nn.Sequential(*blocks)
        object.__setattr__(self, "segments", segments)
        object.__setattr__(self, "half_format", None)

    def forward(self, x):
        blocks = [b if self.half_format is None else HalfModule(b, self.half_format) for b in self.chain]
        return checkpoint_sequential(blocks, self.segments, x)


class CheckpointBlock:
    """``model.checkpoint_fn`` for the U-Net: checkpoint one block (as a HalfModule of
    ``half_format`` when set). It holds no reference to the model, so no reference cycle keeps
    a model alive after its last use."""

    half_format = None

    def __call__(self, block, *inputs):
        fmt = self.half_format
        return checkpoint(block if fmt is None else HalfModule(block, fmt), *inputs)


def _segments(schedule, n_blocks):
    return "sqrt" if schedule == "sqrt" else n_blocks


class Workload:
    """One model family: ``build(schedule)`` -> (root module, loss(net, batch)), ``batch(n)``."""

    name = ""
    sizes_help = ""
    n_sizes = None  # how many sizes the model takes (None: any number, checked by the subclass)
    schedules = SCHEDULES

    def __init__(self, sizes, device=None):
        if isinstance(sizes, (str, bytes)) or not hasattr(sizes, "__iter__"):
            raise TypeError(f"{self.name} sizes must be a list of integers ({self.sizes_help}), got {sizes!r}")
        if not all(is_int(s) for s in sizes):  # int() would truncate 4.7 to 4, silently
            raise ValueError(f"{self.name} sizes must be integers, got {list(sizes)}; "
                             f"{self.name} sizes are {self.sizes_help}")
        self.sizes = [int(s) for s in sizes]
        self.device = backend.check_device(device)
        if self.n_sizes is not None and len(self.sizes) != self.n_sizes:
            raise ValueError(f"{self.name} sizes are {self.sizes_help}, got {sizes}")
        if any(s < 1 for s in self.sizes):
            bad = next(s for s in self.sizes if s < 1)
            raise ValueError(f"{self.name} sizes must all be >= 1, got {bad} in "
                             f"{','.join(map(str, self.sizes))}; {self.name} sizes are {self.sizes_help}")

    def check_schedule(self, schedule):
        if schedule not in self.schedules:
            raise ValueError(f"checkpoint schedule {schedule!r} is not offered for {self.name}; "
                             f"choose one of {', '.join(self.schedules)}")

    def __repr__(self):
        return f"{self.name}({','.join(map(str, self.sizes))})"

    def loss(self, net, batch):
        """The step's loss, computed with this workload's device as the default: the labels of
        :meth:`batch` on the CPU are NumPy arrays, which an op would otherwise move to the
        default device ("cuda" under TINYMEM_DEVICE=cuda) beside a CPU model's logits."""
        with backend.default_device_as(self.device):
            return self.step_loss(net, batch)


class MLPWorkload(Workload):
    name, sizes_help = "mlp", "in,hidden,...,out (e.g. 64,1024,1024,10)"

    def __init__(self, sizes, device=None):
        super().__init__(sizes, device)
        if len(self.sizes) < 2:
            raise ValueError(f"mlp sizes need an input and an output size, got {sizes}; write {self.sizes_help}")

    @property
    def n_blocks(self):
        return len(self.sizes) - 1

    def build(self, schedule):
        self.check_schedule(schedule)
        model = models.MLP(self.sizes, device=self.device)
        if schedule == "none":
            return model
        layers, blocks = list(model), []
        while layers:
            take = 2 if len(layers) > 1 else 1
            blocks.append(nn.Sequential(*layers[:take]))
            layers = layers[take:]
        return CheckpointedChain(blocks, _segments(schedule, len(blocks)))

    def batch(self, n):
        x = Tensor(random.randn((n, self.sizes[0]), self.device), device=self.device)
        classes = self.sizes[-1]
        if self.sizes[0] >= classes:  # a learnable rule: the class is the largest of the first inputs
            y = backend.to_numpy(x.data[:, :classes]).argmax(axis=1).astype(np.int64)
        else:
            y = (np.arange(n) % classes).astype(np.int64)
        return x, backend.to_device(y, self.device)

    @staticmethod
    def step_loss(net, batch):
        x, y = batch
        return F.cross_entropy(net(x), y)


class UNetWorkload(Workload):
    name, sizes_help = "unet", "in_channels,classes,base,depth,resolution (e.g. 1,4,8,3,32)"
    n_sizes, schedules = 5, ("none", "block")

    def __init__(self, sizes, device=None):
        super().__init__(sizes, device)
        depth, res = self.sizes[3:]
        if res % 2 ** (depth - 1):  # else the step's forward fails (models.UNet halves it depth-1 times)
            raise ValueError(f"unet resolution {res} must be divisible by 2**(depth-1) = {2 ** (depth - 1)}; "
                             f"unet sizes are {self.sizes_help}")

    @property
    def n_blocks(self):
        return 2 * self.sizes[3] - 1

    def build(self, schedule):
        self.check_schedule(schedule)
        c, k, base, depth, _ = self.sizes
        model = models.UNet(c, k, base, depth, device=self.device)
        if schedule == "block":
            model.checkpoint_fn = CheckpointBlock()
        return model

    def batch(self, n):
        c, k, _, _, res = self.sizes
        x = Tensor(random.randn((n, c, res, res), self.device), device=self.device)
        labels = (np.arange(n * res * res).reshape(n, res, res) % k).astype(np.int64)
        return x, backend.to_device(labels, self.device)

    @staticmethod
    def step_loss(net, batch):
        x, labels = batch
        return models.segmentation_loss(net(x), labels)


class TransformerWorkload(Workload):
    """``chunk_size``: chunked attention in every block (None: plain attention); ``dropout``:
    the probability of the Dropout after each block's MLP (0: none, as by default)."""

    name, sizes_help = "transformer", "vocab,context,d_model,heads,layers (e.g. 64,32,32,2,2)"
    n_sizes = 5

    def __init__(self, sizes, device=None, chunk_size=None, dropout=0.0):
        super().__init__(sizes, device)
        self.chunk_size, self.dropout = chunk_size, dropout

    @property
    def n_blocks(self):
        return self.sizes[4]

    def build(self, schedule):
        self.check_schedule(schedule)
        vocab, context, d, heads, layers = self.sizes
        model = models.TransformerLM(vocab, context, d, heads, layers, chunk_size=self.chunk_size,
                                     dropout=self.dropout, device=self.device)
        if schedule != "none":
            model.blocks = CheckpointedChain(list(model.blocks), _segments(schedule, layers))
        return model

    def batch(self, n):
        vocab, context = self.sizes[:2]
        ids = (np.arange(n * (context + 1)).reshape(n, context + 1) * 7 % vocab).astype(np.int64)
        return (backend.to_device(ids[:, :-1].copy(), self.device),
                backend.to_device(ids[:, 1:].copy(), self.device))

    def step_loss(self, net, batch):
        ids, targets = batch
        return F.cross_entropy(net(ids).reshape(-1, self.sizes[0]), targets.reshape(-1))


WORKLOADS = {w.name: w for w in (MLPWorkload, UNetWorkload, TransformerWorkload)}


def workload(name, sizes, device=None):
    """``workload("mlp", "64,1024,10")`` (sizes as a string or a list of ints) on ``device``."""
    if name not in WORKLOADS:
        raise ValueError(f"unknown model {name!r}; choose one of {', '.join(WORKLOADS)}")
    if isinstance(sizes, str):
        try:
            sizes = [int(s) for s in sizes.split(",") if s.strip()]
        except ValueError:
            raise ValueError(f"sizes must be integers separated by commas, got {sizes!r}; "
                             f"for {name}: {WORKLOADS[name].sizes_help}") from None
    return WORKLOADS[name](sizes, device)


def set_half_format(root, fmt):
    """Make every checkpointed block under ``root`` run as a HalfModule of ``fmt``."""
    for m in root.modules():
        if isinstance(m, CheckpointedChain):
            object.__setattr__(m, "half_format", fmt)
        if isinstance(getattr(m, "checkpoint_fn", None), CheckpointBlock):
            m.checkpoint_fn.half_format = fmt
