# %% [markdown]
# # Lesson 3 — INT8 quantization: calibration, int8 layers, compressed activations
#
# A float32 number costs 4 bytes; an int8 costs 1. Quantization stores a tensor as small
# integers plus a *scale* and a *zero point* (Jacob et al. 2018): the integers are the points
# of an evenly spaced grid, `scale` is the grid's step, `zero_point` the integer that stands
# for 0.0, and a stored integer q means the real number r ≈ scale · (q − zero_point). Values
# beyond the grid's ends are clamped to them.
#
# Three places in training and inference can use it, each attacking one bucket of the ledger:
# **weights** of a trained model (the `parameter` bucket: an int8 weight is 4x smaller than a
# float32 one; the biases stay float32, so a model shrinks a little less), **activations** flowing
# between int8 layers (inference), and the **saved activations** of training (the `activation`
# bucket, the ActNN idea). The source: `tinymem/techniques/quantization/` — `affine.py` (the map),
# `observers.py` and `histogram.py` (calibration), `modules.py` (int8 layers, post-training
# quantization), `compressed.py` (compressed saved activations).

# %%
import numpy as np

import tinymem as tm
import tinymem.functional as F
from tinymem import memory, plots
from tinymem.measure.records import read_records
from tinymem.techniques import quantization as Q
from course import FIGURES, OUT, QUICK, RECORDS as META, check, predict, reveal

tm.manual_seed(0)

# %% [markdown]
# ## The affine map on a number line
#
# Choose a range [min, max]; 256 equally spaced integers cover it. `zero_point` is the integer
# that stands for 0.0 exactly (padding and ReLU produce exact zeros; they must stay exact).
# Inside the range the round trip errs by at most scale/2; outside, values are **clamped**.

# %%
lo, hi = Q.qrange("quint8")
scale, zero_point = Q.qparams_from_minmax(-1.0, 3.0, "per_tensor_affine", "quint8", lo, hi)
print(f"range [-1, 3] -> scale {scale[0]:.5f}, zero_point {zero_point[0]}")
r = np.linspace(-2, 4, 601, dtype=np.float32)
back = Q.dequantize(Q.quantize(r, scale, zero_point), scale, zero_point)
fig, ax = plots.new_figure(width=6, height=3.2)
ax.plot(r, back - r, lw=0.8)
ax.axhline(scale[0] / 2, color="k", ls=":", lw=0.8)
ax.axhline(-scale[0] / 2, color="k", ls=":", lw=0.8)
ax.set_xlabel("r")
ax.set_ylabel("dequantize(quantize(r)) − r")
ax.set_title("inside [−1, 3]: error ≤ scale/2; outside: clamped")
plots.save(fig, META, OUT, "lesson03_number_line.png")
inside = (r >= -1) & (r <= 3)
print("max error inside:", float(np.abs(back - r)[inside].max()), "  scale/2:", float(scale[0] / 2))

# %% [markdown]
# ## Why calibration: choosing the range
#
# Weights are known, so their range is their min and max. Activations depend on the input, so
# we run a few **calibration batches** through the model and let an *observer* watch them.
# The choice is a trade: a wide range never clamps but rounds coarsely; a narrow range rounds
# finely but clamps the tail. Each calibrator makes the trade differently:
#
# | observer | idea |
# | --- | --- |
# | `MinMaxObserver` | the running min and max: never clamps; one outlier wastes the 256 levels |
# | `MovingAverageMinMaxObserver` | min/max averaged over batches (c = 0.01) |
# | `PercentileObserver` | the 99.99th percentile: ignore the rarest values |
# | `HistogramObserver` | the [min, max] of least L2 error over a 2048-bin histogram (PyTorch) |
# | `EntropyObserver` | the threshold of least KL divergence between the histogram and its 128-level version (TensorRT) |
#
# How close to PyTorch each one is (`tests/techniques/quantization/test_observers.py` holds
# them against PyTorch's observers on random data): `MinMaxObserver`,
# `MovingAverageMinMaxObserver` and `PerChannelMinMaxObserver` give exactly PyTorch's `scale`
# and `zero_point` (the same float32 formulas); `HistogramObserver` follows PyTorch's search
# but bins with its own histogram, so the test holds it to a small tolerance, not to equality;
# `PercentileObserver` and `EntropyObserver` have no PyTorch observer to compare with (the
# entropy one is TensorRT's calibrator).

# %%
x_train, y_train, x_test, y_test = tm.data.load_digits()
sizes = [64, 128, 128, 10]
model = tm.models.MLP(sizes)
opt = tm.optim.Adam(model.parameters(), lr=1e-3)
for epoch in range(3 if QUICK else 15):
    for x, y in tm.data.DataLoader((x_train, y_train), batch_size=64, seed=epoch):
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()


def accuracy(m):
    with tm.no_grad():
        return float((m(tm.tensor(x_test)).numpy().argmax(1) == y_test).mean())


fp32_acc = accuracy(model)
calibration = [x_train[i:i + 256].copy() for i in range(0, 1024, 256)]
with tm.no_grad():
    hidden = np.concatenate([model[:2](tm.tensor(b)).numpy().ravel() for b in calibration])
observers = {"min-max": Q.MinMaxObserver(), "percentile": Q.PercentileObserver(),
             "histogram (L2)": Q.HistogramObserver(), "entropy (KL)": Q.EntropyObserver()}
fig, ax = plots.new_figure(width=6.4, height=3.6)
ax.hist(hidden, bins=100, color="#bbbbbb", log=True)
for (name, obs), color in zip(observers.items(), ["#c44e52", "#55a868", "#4c72b0", "#8172b3"]):
    for b in calibration:
        with tm.no_grad():
            obs(model[:2](tm.tensor(b)))
    top = float(obs.observed_range()[1])
    ax.axvline(top, color=color, label=f"{name}: {top:.2f}")
    print(f"{name:15s} clips at {top:.3f}  (scale {obs.calculate_qparams()[0][0]:.4f})")
ax.set_xlabel("input of the second Linear (after ReLU)")
ax.legend(fontsize=7)
plots.save(fig, META, OUT, "lesson03_ranges.png")

# %% [markdown]
# ## Post-training quantization of the trained model
#
# `prepare` puts an observer in front of every Linear, `calibrate` runs the batches,
# `convert` replaces each Linear by a `QuantizedLinear`: int8 weights (symmetric, per tensor
# or one scale per output channel), the input quantized with the calibrated range, an integer
# matmul with int32 accumulation, and one float multiply to rescale: y = sx·sw·acc + b.

# %%
def predictions(m):
    with tm.no_grad():
        return m(tm.tensor(x_test)).numpy().argmax(1)


fp32_predictions = predictions(model)
quantized, shrink = {}, {}
for name, observer in [("min-max", Q.MinMaxObserver), ("histogram (L2)", Q.HistogramObserver)]:
    for per_channel in (False, True):
        qmodel = tm.models.MLP(sizes)
        qmodel.load_state_dict(model.state_dict())
        before = memory.live_bytes("parameter")
        Q.quantize_model(qmodel, calibration, observer, per_channel=per_channel)
        quantized[name, per_channel] = predictions(qmodel)
        changed = int((quantized[name, per_channel] != fp32_predictions).sum())
        print(f"{name:15s} {'per-channel' if per_channel else 'per-tensor ':11s} accuracy "
              f"{accuracy(qmodel):.4f} (fp32 {fp32_acc:.4f}), {changed} of {len(y_test)} predictions "
              f"changed; the ledger freed {before - memory.live_bytes('parameter'):,d} B of parameters")
        fp32_bytes = sum(p.nbytes for p in model.parameters())
        shrink[name, per_channel] = fp32_bytes / (fp32_bytes - (before - memory.live_bytes("parameter")))
print(qmodel)
print("the quantized model is " + ", ".join(f"{v:.2f}x" for v in shrink.values()) + " smaller than float32")
check("a quantized model shrinks less than 4x: its biases and scales stay float32",
      all(3 < v < 4 for v in shrink.values()))

# %% [markdown]
# **Per-channel versus per-tensor.** One scale for a whole weight matrix is set by its largest
# row; rows with small weights then use few of the 256 levels. A scale per output channel
# fits each row. Here is the relative error of each row of the first layer — and, beside it,
# how many test predictions the choice changes on this model:

# %%
w = model[0].weight.numpy()
errors = {}
for per_channel in (False, True):
    if per_channel:
        obs = Q.PerChannelMinMaxObserver(ch_axis=0, dtype="qint8", qscheme="per_channel_symmetric")
    else:
        obs = Q.MinMaxObserver(dtype="qint8", qscheme="per_tensor_symmetric")
    obs(w)
    s, z = obs.calculate_qparams()
    axis = 0 if per_channel else None
    wq = Q.dequantize(Q.quantize(w, s, z, "qint8", axis=axis), s, z, axis=axis)
    errors[per_channel] = np.linalg.norm(wq - w, axis=1) / np.linalg.norm(w, axis=1)
print(f"row relative error: per-tensor median {np.median(errors[False]):.4f}, "
      f"per-channel median {np.median(errors[True]):.4f}")
for name in ("min-max", "histogram (L2)"):
    differ = int((quantized[name, False] != quantized[name, True]).sum())
    print(f"{name}: per-tensor and per-channel disagree on {differ} of {len(y_test)} test predictions")

# %% [markdown]
# Per-channel rows err less (the two medians). But on this small digits model both errors are
# far below what it takes to move a prediction: the printout counts how few test predictions
# quantization changes at all, and how many the per-channel choice changes on top — which is
# why the four accuracies above can be equal. Per-channel pays off where the rows of a weight
# differ in scale by much more (the weights of large Transformers), and it is the default for
# weights for that reason.

# %% [markdown]
# ## The float-GEMM trick: exact integer matmul at BLAS speed
#
# NumPy has no integer BLAS: an int32 matmul runs a slow loop. But an int8 value is an exact
# float32 number, and so is every integer up to 2**24 (float32 has 24 significand bits). As
# long as no partial sum of a dot product can pass 2**24 — in whatever order BLAS adds — the
# float32 GEMM returns exactly the integer result. A long dot product can pass it, so
# `int_matmul` cuts K into chunks short enough to be safe and adds the chunks' results in int32.
# (How short? That is exercise 3. uint8 activations are first shifted by −128 into int8; the
# shift comes back as a per-column correction.) What bounds a safe chunk is the largest product
# two int8 values can make — careful: it is not 127 · 127.
#
# Below, K is several chunks long, and row 0 of one matrix and column 0 of the other are all 127.

# %%
rng = np.random.default_rng(0)
k = 3077  # a length long enough to need several chunks (the chunk length is exercise 3)
a = rng.integers(-128, 128, (64, k)).astype(np.int8)
b = rng.integers(-128, 128, (k, 64)).astype(np.int8)
a[0], b[:, 0] = 127, 127
predict(f"K = {k}: one float32 GEMM of these int8 matrices. Is it exact? If not, how far off can row 0 x "
        "column 0 be?")
exact = a.astype(np.int64) @ b.astype(np.int64)
plain = (a.astype(np.float32) @ b.astype(np.float32)).astype(np.int64)
reveal(f"one float32 GEMM gets {int((plain != exact).sum())} of {exact.size} entries wrong "
       f"(row 0 x column 0: {plain[0, 0]:,d} instead of {exact[0, 0]:,d})",
       "past 2**24 a single float32 GEMM is not exact, and the chunked int_matmul is",
       exact[0, 0] > 2**24 and plain[0, 0] != exact[0, 0] and np.array_equal(Q.int_matmul(a, b), exact))

# %% [markdown]
# Row 0 times column 0 adds the odd product 127 · 127 K times: past 2**24 its odd partial sums
# are numbers float32 cannot hold, and the GEMM rounds them. (A row and column of the extreme
# product would pass 2**24 too, but being multiples of a large power of two, their sums stay
# exact in float32: the error would not show.)

# %% [markdown]
# ## Compressed saved activations for training (ActNN)
#
# Training keeps every layer's input until backward. `compress_saved_activations(bits)` is a
# `saved_tensors_hooks` context: each saved float tensor becomes `bits`-bit codes per group of
# 256 elements with the group's (min, start, step) beside them, and is rebuilt in backward.
# Below 8 bits the rounding is **stochastic** (code = floor(v + u), u uniform), which is
# unbiased: on average the rebuilt value is the true one, so SGD still converges.

# %%
probe = tm.models.MLP([64, 256, 256, 10])
xb, yb = tm.tensor(x_train[:128].copy()), tm.tensor(y_train[:128].copy())
reference = None
for bits in (32, 8, 4, 2):
    probe.zero_grad()
    with memory.track(measure=False) as t:
        if bits == 32:
            loss = F.cross_entropy(probe(xb), yb)
        else:
            with Q.compress_saved_activations(bits):
                loss = F.cross_entropy(probe(xb), yb)
        saved = memory.live_bytes("activation")
        loss.backward()
    g = np.concatenate([p.grad.numpy().ravel() for p in probe.parameters()])
    reference = g if reference is None else reference
    err = np.linalg.norm(g - reference) / np.linalg.norm(reference)
    print(f"{bits:2d} bits: saved {saved:8,d} B, gradient relative error {err:.4f}")

x = np.linspace(0, 1, 7, dtype=np.float32)
samples = np.mean([Q.decompress(Q.compress(x, 2, 8, stochastic=True, keep_sign=False)) for _ in range(2000)], 0)
print("2-bit stochastic rounding, mean of 2000 samples:", np.round(samples, 3), "\n  true values:", np.round(x, 3))

# %% [markdown]
# The figure `quant_activation_bits.png` (`python -m tinymem figures --only quantization`) trains
# with 32, 8, 4 and 2 bits. Its committed records:

# %%
committed = read_records(FIGURES, "quantization")
for row in committed["bits"]["rows"]:
    print(f"{row['bits']:2d} bits: {row['saved_ratio']:.3f}x the saved bytes of float32, test accuracy {row['accuracy']:.3f}")
calibrated = committed["calibration"]["accuracy"]
print(f"and the calibration figure, quant_calibration.png: with {committed['config']['outliers']} in the "
      f"calibration batches, min-max per tensor scores {calibrated['outliers|min-max|per-tensor']:.3f} "
      f"(clean data: {calibrated['clean|min-max|per-tensor']:.3f})")

# %% [markdown]
#
# ## Pitfalls
#
# - **Quantizing without checking accuracy.** A quantized model runs and returns numbers; only
#   a test set says whether they are right. A few outliers in the calibration data can stretch
#   a min-max range enough to cost most of the accuracy (the last line printed above).
# - **Calibration data must look like the real inputs.** Observers learn the range from it.
# - **The ReLU reads its mask from its saved output.** If compression rounds a small positive
#   value to 0, the gradient through it is cut — a handful of flipped mask bits costs far more
#   of the gradient than the rounding itself. `keep_sign` (the default) reserves code 0 for the
#   exact minimum.
# - **Saved views count their whole base array.** Saving `x[:128]` keeps all of `x` alive, and
#   the ledger says so; copy a slice you keep for backward.
# - **Compression costs time and transient memory**: the float temporaries of `compress` exist
#   during forward (the allocator peak of a small step can even grow); the win is in what stays
#   saved across the whole forward pass of a deep network.
#
# ## Exercises (`lessons/exercises/ex03.py`; check with
# `TINYMEM_EXERCISES=student python -m pytest -m exercise_03`)
#
# 1. `affine_qparams(min_val, max_val, quant_min, quant_max)`: the scale and zero point of
#    PyTorch's per-tensor affine observers, bit for bit. What must happen to a range that
#    does not contain 0?
# 2. `fake_quant(x, scale, zero_point, quant_min, quant_max, axis=None)` (per tensor, or one
#    scale per slice along `axis`) and its straight-through gradient `fake_quant_grad`.
# 3. `exact_int8_matmul(a, b)`: an exact int32 matmul of int8 arrays using only float32
#    matmuls (any K up to 100,000). Work out the longest chunk that is always exact.
# 4. `pack_2bit(codes)` / `unpack_2bit(packed, n)`: four 2-bit codes per byte and back.
