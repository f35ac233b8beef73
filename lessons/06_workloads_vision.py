# %% [markdown]
# # Lesson 6 (vision) — Segmentation at high resolution: where a U-Net's memory goes
#
# Medical segmentation (a CT slice is 512 x 512, a pathology tile far more) is the classic case
# where a small network runs out of memory: a U-Net has few parameters, but every layer at full
# resolution saves a full-size feature map for backward. Parameters do not grow with the image;
# **activations grow with its area**. This lesson measures that, then applies the cures from
# lessons 1 and 2 (checkpointing per block, half-precision storage) and two everyday tools:
# micro-batching and a batch-size finder.
#
# Sources to keep open: `tinymem/ops/conv.py` (im2col), `tinymem/ops/pool.py`,
# `tinymem/ops/batchnorm.py`, `tinymem/models/unet.py`, `tinymem/data/phantoms.py`,
# `tinymem/techniques/microbatch.py`, `tinymem/techniques/batch_size.py`,
# `tinymem/experiments/workload_resolution.py`.

# %%
import numpy as np

import tinymem as tm
import tinymem.functional as F
from tinymem import memory, models
from tinymem.data.phantoms import CLASSES, make_phantoms
from tinymem.measure.records import read_records
from tinymem.ops import conv as conv_ops
from tinymem.techniques.batch_size import find_max_batch
from tinymem.techniques.checkpoint import checkpoint
from tinymem.techniques.microbatch import accumulate_gradients
from tinymem.models.unet import DoubleConv
from course import FIGURES, OUT, QUICK, RECORDS, predict, reveal

tm.manual_seed(0)

# %% [markdown]
# ## The data: CT-like phantoms at any resolution
#
# `make_phantoms(n, resolution)` draws ellipses in normalised coordinates (a body, organs,
# small bright lesions, like the Shepp-Logan phantom), so phantom *i* is the same object at
# 64 px and at 1024 px, and the masks are exact. Nothing is downloaded.

# %%
for res in (64, 256):
    images, labels = make_phantoms(1, res)
    share = {c: f"{(labels == i).mean():.3f}" for i, c in enumerate(CLASSES)}
    print(f"{res:4d} px: image {images.shape} {images.nbytes:,d} B, pixel share {share}")

# %% [markdown]
# ## Convolution by im2col, and its workspace
#
# For every output pixel, im2col copies the C·k·k input values under the kernel into a column;
# the convolution is then one matrix product `W (O, C·k·k) @ cols (C·k·k, B·OH·OW)`. The column
# matrix holds **C·k·k·OH·OW·B** values: 9 times the input for a 3x3 kernel. At 512 px, 32
# channels, batch 8 that is gigabytes for a *temporary* (the cell below prints how many).
# tinymem builds it in blocks of at most `WORKSPACE_ELEMENTS` values — whole samples when they
# fit, otherwise bands of output rows (exercise 1 works out the largest block) — registers each
# block in the ledger's `workspace` bucket, and rebuilds it in backward instead of saving it:
# the conv saves only its input.

# %%
full_cols = 32 * 9 * 512 * 512 * 8 * 4
print(f"full column matrix at 512 px, C=32, B=8: {memory.format_bytes(full_cols)}; "
      f"one block: {memory.format_bytes(conv_ops.WORKSPACE_ELEMENTS * 4)}")
x = tm.randn(2, 8, 64, 64)
w = tm.randn(8, 8, 3, 3, requires_grad=True)
with memory.track() as t:
    y = F.conv2d(x, w, padding=1)
biggest = max(e["bytes"] for e in t.timeline() if e["kind"] == "alloc" and e["bytes"] != y.nbytes)
print(f"largest workspace block {memory.format_bytes(biggest)}; saved for backward "
      f"{memory.format_bytes(memory.live_bytes('activation'))} (= the input, {memory.format_bytes(x.nbytes)})")
del y

# %% [markdown]
# ## Where the memory goes: activations grow as the image's area
#
# One training step of the U-Net (base 8 channels, 4 levels) at growing resolutions: the
# parameters do not change; watch the activation peak each time the side doubles.

# %%
net = models.UNet(base=8, depth=4)
print(f"parameters: {net.num_parameters():,d} ({memory.format_bytes(4 * net.num_parameters())})")
previous = None
for res in ([32, 64] if QUICK else [64, 128, 256]):
    images, labels = make_phantoms(1, res)
    with memory.track(measure=False) as t:
        loss = models.segmentation_loss(net(tm.tensor(images)), tm.tensor(labels))
        loss.backward()
    net.zero_grad()
    peak = t.max_by_bucket()["activation"]
    growth = "" if previous is None else f" ({peak / previous:.2f}x the previous)"
    print(f"{res:4d} px: activation peak {memory.format_bytes(peak):>10}{growth}, "
          f"step peak above the model {memory.format_bytes(t.peak_delta()):>10}")
    previous = peak

# %% [markdown]
# ## The cures, side by side: the figure
#
# `tinymem figures --only workload_resolution` runs the sweep below at 64 to 1024 px and draws
# `figures/workload_resolution.png`. Here it runs at quick sizes. Per-block checkpointing keeps
# each block's input and recomputes its inside during backward (the skip connections must stay
# anyway, which limits what it saves); float16 storage halves every saved value; together they
# go further. The share of float32's activations each keeps is printed; what they cost is
# recomputation and conversions (each step time is a single run here, so on a busy machine
# read it with care — the figure's run repeats them).

# %%
from tinymem.experiments import workload_resolution as W  # noqa: E402

rows = W.sweep([32, 64] if QUICK else [64, 128, 256], base=8, depth=4, device=tm.get_default_device(), repeats=1)
plain = {r["resolution"]: r["activation_peak"] for r in rows if r["config"] == "float32"}
for r in rows:
    print(f"{r['resolution']:4d} px {r['config']:>20}: activations {memory.format_bytes(r['activation_peak']):>10} "
          f"({r['activation_peak'] / plain[r['resolution']]:.2f}x float32), step {r['step_seconds'] * 1e3:7.1f} ms")
dice = W.train_dice(32, 10, 4, 8, 4, "cpu", n_train=16, n_val=8) if QUICK else W.train_dice(64, 120, 8, 8, 4, "cpu")
records = {"config": {"base": 8, "depth": 4, "batch": 1, "configs": list(W.CONFIGS)}, "rows": rows,
           "dice": dice, "meta": RECORDS["meta"]}
print("wrote", W.plot(records, OUT)[0])
committed = read_records(FIGURES, "workload_resolution")["dice"]
print(f"this run: Dice {dice['dice']:.3f} after {dice['steps']} steps at {dice['resolution']} px; "
      f"the committed full run: Dice {committed['dice']:.3f} after {committed['steps']} steps at "
      f"{committed['resolution']} px")

# %% [markdown]
# Segmentation needs many steps before the small classes (organs, lesions) appear at all; the
# mean Dice over classes stays near zero until then. The first line above says how far this
# run got; the second what the committed figure's longer, higher-resolution run reached.
#
# ## BatchNorm under checkpointing
#
# A checkpointed block runs its forward twice. BatchNorm's running statistics must move once
# per step, so BatchNorm skips the update while `tinymem.autograd.is_recomputing()` is True.

# %%
block = DoubleConv(1, 4)
xb = tm.randn(2, 1, 8, 8)
checkpoint(block, xb).sum().backward()
print("batches tracked after one checkpointed step:", block[1].num_batches_tracked)

# %% [markdown]
# ## Micro-batching: the big batch's gradient at a small batch's activations
#
# Split the batch into k pieces, backward each, let `.grad` accumulate, step once. The one
# subtle point is the weight of each micro-batch's mean loss when the split is uneven
# (exercise 3). BatchNorm breaks the equality with the big batch (it sees micro-batch
# statistics); a per-sample model keeps it exactly.

# %%
mlp = models.MLP([64, 256, 256, 10])
xs, ys = tm.tensor(np.random.default_rng(0).standard_normal((256, 64)).astype(np.float32)), \
    tm.tensor(np.random.default_rng(1).integers(0, 10, 256))
for k in (1, 2, 4, 8):
    mlp.zero_grad()
    with memory.track(measure=False) as t:
        accumulate_gradients(lambda a, b: F.cross_entropy(mlp(a), b), (xs, ys), micro_batches=k)
    print(f"k = {k}: activation peak {memory.format_bytes(t.max_by_bucket()['activation'])}")

# %% [markdown]
# ## How big a batch fits? The batch-size finder
#
# `find_max_batch(model, budget, make_batch)` runs real training steps under the ledger's
# budget and searches for the largest batch that does not raise `OutOfMemoryError`, with few
# trial steps (how few: exercise 4).

# %%
res = 32 if QUICK else 64
pool_x, pool_y = make_phantoms(64, res)
budget_mib = 6 if QUICK else 48
predict(f"a budget of {budget_mib} MiB above the model at {res} px: with per-block checkpointing, does a larger "
        "batch fit than without? How much larger, given that the skip connections stay?")


def make_batch(n):
    idx = np.arange(n) % len(pool_x)
    return tm.tensor(pool_x[idx]), tm.tensor(pool_y[idx])


unet = models.UNet(base=8, depth=4)
budget = memory.live_bytes() + budget_mib * 2**20
plain = find_max_batch(unet, budget, make_batch, max_batch=64)
unet.checkpoint_fn = checkpoint
with_ckpt = find_max_batch(unet, budget, make_batch, max_batch=64)
reveal(f"{res} px, budget {memory.format_bytes(budget)} ({budget_mib} MiB above what was live): largest batch {plain} plain, {with_ckpt} checkpointed",
       "with checkpointing the same budget holds a larger batch", with_ckpt > plain)

# %% [markdown]
# ## Pitfalls
#
# - **The column matrix**: a naive im2col at high resolution allocates kh·kw times the input
#   per conv; block it (as here) or use an implicit-GEMM / FFT / Winograd kernel.
# - **Skip connections** hold the encoder's outputs until the decoder uses them; checkpointing
#   cannot drop them, which is why per-block checkpointing saves about half, not 1 - 1/n.
# - **BatchNorm** with checkpointing must update running statistics once; with micro-batching
#   its statistics come from the micro-batch (use GroupNorm, or larger micro-batches).
# - **Micro-batch loss weights**: an uneven split needs its own weights (exercise 3), or the
#   accumulated gradient is silently not the big batch's.
# - **The finder's answer** is for the exact step it tried (model, optimizer, precision); on a
#   real GPU leave headroom for fragmentation.
#
# ## Exercises (`lessons/exercises/ex06_vision.py`, check with `TINYMEM_EXERCISES=student python -m pytest -m exercise_06`)
#
# 1. `column_block_bytes(batch, channels, kernel, out_h, out_w, block_elements)`: the largest
#    block of the column matrix tinymem builds under a limit of `block_elements` values.
# 2. `conv2d_im2col(x, weight, stride, padding)`: conv by im2col in NumPy, checked against
#    `F.conv2d`.
# 3. `microbatch_weights(sizes)`: the loss weight of each micro-batch.
# 4. `largest_fitting(fits, good, bad)`: the bisection of the batch-size finder.
# 5. Think: which blocks of the U-Net would you checkpoint first under a tight budget, and
#    which not at all? (Hint: compare the activation bytes of a block at full resolution with
#    one at 1/8 resolution.)
