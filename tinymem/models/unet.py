"""A U-Net for segmentation, built from blocks that can each be checkpointed.

Shape of the network (depth 3, base width c):

    x (1, R) -> [enc0: c, R] -> pool -> [enc1: 2c, R/2] -> pool -> [enc2: 4c, R/4]   (bottom)
                      |skip                   |skip                        |
    logits <- 1x1 <- [dec0: c, R] <- up+cat <- [dec1: 2c, R/2] <- up+cat <-+

Every block is ``DoubleConv`` (conv 3x3 -> BatchNorm -> ReLU, twice), so a block at full
resolution R saves, per sample, about 2·(c·R²) conv inputs + 2·(c·R²) BatchNorm x-hats + 2·(c·R²)
ReLU outputs: activation memory grows as R², and the full-resolution blocks dominate. That is
the memory that per-block checkpointing attacks: with ``model.checkpoint_fn`` set (for instance
to ``tinymem.techniques.checkpoint.checkpoint``), each block keeps only its inputs and
recomputes its inside during backward.

``model.checkpoint_fn(block, *inputs)`` must return ``block(*inputs)``; ``None`` runs blocks
plainly. BatchNorm inside a checkpointed block updates its running statistics once per step
(it checks ``tinymem.autograd.is_recomputing()``).
"""
from .. import functional as F
from .. import nn


class DoubleConv(nn.Sequential):
    """(conv 3x3, padding 1 -> BatchNorm2d -> ReLU) twice."""

    def __init__(self, c_in, c_out, device=None):
        super().__init__(nn.Conv2d(c_in, c_out, 3, padding=1, bias=False, device=device),
                         nn.BatchNorm2d(c_out, device=device), nn.ReLU(),
                         nn.Conv2d(c_out, c_out, 3, padding=1, bias=False, device=device),
                         nn.BatchNorm2d(c_out, device=device), nn.ReLU())


class Down(nn.Module):
    """Max-pool 2x2, then DoubleConv."""

    def __init__(self, c_in, c_out, device=None):
        super().__init__()
        self.conv = DoubleConv(c_in, c_out, device)

    def forward(self, x):
        return self.conv(F.max_pool2d(x, 2))


class Up(nn.Module):
    """Nearest upsampling x2 and a 1x1 conv to halve the channels, concatenation with the skip
    connection, then DoubleConv. Saves the concatenated input of its first conv."""

    def __init__(self, c_in, c_out, device=None):
        super().__init__()
        self.reduce = nn.Conv2d(c_in, c_out, 1, device=device)
        self.conv = DoubleConv(2 * c_out, c_out, device)

    def forward(self, x, skip):
        x = self.reduce(F.interpolate(x, scale_factor=2, mode="nearest"))
        return self.conv(F.concatenate([skip, x], axis=1))


class UNet(nn.Module):
    """U-Net with ``depth`` levels, ``base`` channels at full resolution, doubling per level.

    The input side must be divisible by 2**(depth-1). Parameters grow as base²·4^depth (the
    deepest block dominates); base 8, depth 4: 112,996 floats (0.45 MB in float32), the same
    at every resolution.
    """

    def __init__(self, in_channels=1, num_classes=4, base=8, depth=4, device=None):
        super().__init__()
        if depth < 2:
            raise ValueError(f"UNet needs depth >= 2 (one down, one up), got {depth}")
        self.depth, self.checkpoint_fn = depth, None
        widths = [base * 2 ** i for i in range(depth)]
        self.inc = DoubleConv(in_channels, widths[0], device)
        self.downs = nn.Sequential(*[Down(a, b, device) for a, b in zip(widths[:-1], widths[1:])])
        self.ups = nn.Sequential(*[Up(b, a, device) for a, b in zip(widths[:-1], widths[1:])][::-1])
        self.head = nn.Conv2d(widths[0], num_classes, 1, device=device)

    def blocks(self):
        """The checkpointable blocks, in the order forward runs them."""
        return [self.inc, *self.downs, *self.ups]

    def _run(self, block, *inputs):
        return block(*inputs) if self.checkpoint_fn is None else self.checkpoint_fn(block, *inputs)

    def forward(self, x):
        step = 2 ** (self.depth - 1)
        if x.ndim != 4 or x.shape[2] % step or x.shape[3] % step:
            raise ValueError(f"UNet(depth={self.depth}) needs input (B, C, H, W) with H and W "
                             f"divisible by {step}, got {tuple(x.shape)}")
        skips = [self._run(self.inc, x)]
        for down in self.downs:
            skips.append(self._run(down, skips[-1]))
        x = skips.pop()
        for up in self.ups:
            x = self._run(up, x, skips.pop())
        return self.head(x)


def segmentation_loss(logits, labels):
    """Mean per-pixel cross-entropy of logits (B, K, H, W) against labels (B, H, W).

    Memory: the (B·H·W, K) probabilities are saved for backward (4·B·H·W·K bytes).
    """
    k = logits.shape[1]
    return F.cross_entropy(logits.permute(0, 2, 3, 1).reshape(-1, k), labels.reshape(-1))


def dice_score(pred, target, num_classes):
    """Mean Dice 2|P∩T| / (|P|+|T|) over the foreground classes 1..K-1, each class counted over
    all pixels of all images together (integer label arrays of one shape)."""
    scores = []
    for c in range(1, num_classes):
        p, t = pred == c, target == c
        total = p.sum() + t.sum()
        scores.append(1.0 if total == 0 else float(2 * (p & t).sum() / total))
    return sum(scores) / len(scores)
