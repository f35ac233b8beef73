# %% [markdown]
# # Lesson 2 — Mixed precision: fp16, bf16, fp32 masters and loss scaling
#
# A float32 takes 4 bytes. Training in 2-byte formats halves the bytes of whatever is stored
# in them — and the biggest thing a training step stores is usually the **activations** saved
# for backward. This lesson takes the recipe of Micikevicius et al. (2018), *Mixed Precision
# Training*, apart piece by piece:
#
# 1. the formats, bit by bit: what each can hold, what **rounds away**, what **underflows**;
# 2. why the optimizer keeps **fp32 master weights**;
# 3. why float16 needs **loss scaling**, and the rules of PyTorch's dynamic `GradScaler`;
# 4. training with it, and the memory it saves — measured.
#
# Source: `tinymem/techniques/precision/bfloat16.py` (bf16 by hand), `tinymem/techniques/precision/grad_scaler.py`
# (the scaler), `tinymem/techniques/precision/half.py` (half models, masters), and the figures
# of `tinymem/experiments/precision.py`.
#
# **Say it plainly: on the CPU mixed precision saves memory, not time.** NumPy has no fast
# float16 matrix multiply (the cell below times one), so tinymem *stores* half and *computes*
# in float32, upcasting on use. On a GPU (CuPy), float16 is computed in float16 with fp32
# accumulation, which is where the speed comes from.

# %%
import inspect

import numpy as np

import tinymem as tm
import tinymem.functional as F
from tinymem import data, models, optim, plots
from tinymem.measure.timing import best_time
from tinymem.techniques import precision
from tinymem.techniques.precision.bfloat16 import bfloat16_bits_to_float32, float32_to_bfloat16_bits
from course import OUT, QUICK, RECORDS, predict, reveal

a32 = np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32)
a16 = a32.astype(np.float16)
seconds = {dtype: best_time(lambda a=a: a @ a, repeats=20) for dtype, a in (("float32", a32), ("float16", a16))}
print(f"64x64 matmul on this CPU: float32 {seconds['float32'] * 1e6:.0f} us, float16 "
      f"{seconds['float16'] * 1e6:.0f} us ({seconds['float16'] / seconds['float32']:.0f}x slower)")

# %% [markdown]
# ## 1. The formats, bit by bit
#
# | format | sign | exponent | mantissa | smallest subnormal | smallest normal | largest |
# | --- | --- | --- | --- | --- | --- | --- |
# | float32 | 1 | 8 | 23 | 1.4e-45 | 1.2e-38 | 3.4e38 |
# | float16 | 1 | 5 | 10 | 5.96e-8 (2^-24) | 6.10e-5 (2^-14) | 65504 |
# | bfloat16 | 1 | 8 | 7 | 9.2e-41 | 1.2e-38 | 3.4e38 |
#
# float16 spends its bits on precision (11 significant bits) and has a tiny range;
# bfloat16 is the top half of a float32: float32's range, only 8 significant bits.

# %%
def fields(bits, widths):
    """Split an integer bit pattern into fields of the given widths (most significant first)."""
    out, shift = [], sum(widths)
    for w in widths:
        shift -= w
        out.append(format((bits >> shift) & ((1 << w) - 1), f"0{w}b"))
    return out


x = np.float32(-0.1)
f32 = int(x.view(np.uint32))
f16 = int(np.float16(x).view(np.uint16))
b16 = int(float32_to_bfloat16_bits(np.array([x]))[0])
print(f"float32  {' '.join(fields(f32, (1, 8, 23)))}  = {x!r}")
print(f"float16  {' '.join(fields(f16, (1, 5, 10)))}  = {float(np.float16(x))!r}")
print(f"bfloat16 {' '.join(fields(b16, (1, 8, 7)))}  = {float(bfloat16_bits_to_float32(np.array([b16], np.uint16))[0])!r}")

# %%
fig, ax = plots.new_figure(width=8.0, height=2.4)
palette = {"sign": "#c44e52", "exponent": "#4c72b0", "mantissa": "#55a868"}
for row, (name, widths) in enumerate((("float32", (1, 8, 23)), ("float16", (1, 5, 10)),
                                      ("bfloat16", (1, 8, 7)))):
    start = 0
    for field, w in zip(("sign", "exponent", "mantissa"), widths):
        ax.barh(2 - row, w, left=start, color=palette[field], edgecolor="white",
                label=field if row == 0 else None)
        ax.text(start + w / 2, 2 - row, f"{w}", ha="center", va="center", color="white", fontsize=8)
        start += w
    ax.text(-0.5, 2 - row, name, ha="right", va="center", fontsize=9)
ax.set_xlim(-8, 33)
ax.set_yticks([])
ax.set_xlabel("bits")
ax.legend(fontsize=7, loc="lower right")
ax.set_title("the fields of each format (bits per field)", fontsize=9)
print("wrote", plots.save(fig, RECORDS, OUT, "lesson02_formats.png"))

# %% [markdown]
# **bfloat16 by hand.** Rounding float32 to bfloat16 keeps the high 16 bits of the pattern,
# rounding to nearest with ties to even. It can be done on the integer bit pattern alone,
# without any float arithmetic — PyTorch's `c10::BFloat16` does it in one line, and exercise 3
# asks you to find that line. NaN needs its own case. tinymem matches PyTorch bit for bit on
# every float32 (its tests check random patterns and the edges).

# %%
edge = np.array([1.0, 1 + 2**-8, 1 + 3 * 2**-8, 65504.0, 3.4028235e38, -0.0, 1e-40, np.nan], np.float32)
for v, b in zip(edge, float32_to_bfloat16_bits(edge)):
    print(f"{v!r:>16} -> 0x{int(b):04X} = {float(bfloat16_bits_to_float32(np.array([b]))[0])!r}")

# %% [markdown]
# Note the ties: 1 + 2^-8 is exactly halfway between 1 and 1 + 2^-7 and goes to the even
# neighbour, 1.0; 1 + 3·2^-8 goes *up*. 65504 (float16's max) is not a bfloat16: it becomes
# 65536. float32's max rounds up to infinity.
#
# ## 2. Small updates, in float16 and in float32
#
# Mixed precision computes in 16 bits, yet keeps a float32 copy of every weight (the *master*)
# and updates that one. One weight, many small updates, both ways:

# %%
predict("a weight of 1.0 receives 100 updates of -1e-4. What is it after them, stored and updated in "
        "float16? And in float32, rounded to float16 at the end?")
w16, w32 = np.float16(1.0), np.float32(1.0)
for _ in range(100):
    w16 = np.float16(w16 - np.float16(1e-4))
    w32 = np.float32(w32 - np.float32(1e-4))
reveal(f"float16 weight {float(w16)}, float32 master {float(w32):.6f} -> rounded to float16 {float(np.float16(w32))}",
       "the float16 weight never moves, while the float32 master carries the updates into float16",
       w16 == np.float16(1.0) and np.float16(w32) < np.float16(1.0))

# %% [markdown]
# Why: a float16 near 1.0 has a spacing of 2^-10 ≈ 0.001. An update of 1e-4 is less than half
# of it, so `w + update` rounds straight back to `w`: a model stored in float16 and updated in
# float16 simply stops learning once the updates get small. The float32 master has room for
# them, and its sum crosses a float16 step.
#
# So the optimizer updates a **float32 master copy** and rounds it into the half weights
# after every step. The masters cost 4 bytes per parameter; tinymem counts them in the
# `optimizer` bucket (they are optimizer-side state, as ZeRO counts them).
#
# ## 3. What underflows: why float16 needs loss scaling
#
# A gradient below 2^-25 ≈ 3e-8 becomes 0 in float16, and below 6.1e-5 it keeps fewer
# bits. Multiply the loss by S and every gradient is multiplied by S (backward is linear);
# divide by S in float32 before the update. S a power of two makes both exact.

# %%
g = np.float32(1e-8)
print(f"1e-8 in float16: {float(np.float16(g))}; scaled by 2^16: {float(np.float16(g * 2**16))}"
      f" -> unscaled in float32: {float(np.float32(np.float16(g * 2**16)) / 2**16):.3e}")
report = precision.fp16_range_report([np.array([1e-9, 1e-7, 1e-3, 1.0, 1e5], np.float32)])
print("fp16_range_report, unscaled:", {k: round(v, 2) for k, v in report.items()})

# %% [markdown]
# **The scaler's rules** (`GradScaler`, PyTorch's semantics and defaults, printed below from
# its signature): start at S = `init_scale`. If a step's gradients contain inf or NaN (S was too
# big), **skip the step** and multiply S by `backoff_factor`. After `growth_interval` clean
# steps in a row, multiply S by `growth_factor`. Static scaling is a fixed S
# (`growth_factor=1.0, backoff_factor=1.0`). `unscale_` may be called once per step, before
# clipping; calling it twice raises (it would divide twice). The run below starts at 8 and grows
# after every 2 clean steps, so that six steps show every rule.

# %%
from tinymem.nn.utils import clip_grad_norm_  # noqa: E402

defaults = {name: param.default for name, param in inspect.signature(precision.GradScaler).parameters.items()
            if name in ("init_scale", "growth_factor", "backoff_factor", "growth_interval")}
print("GradScaler defaults:", defaults)
scaler = precision.GradScaler(init_scale=8.0, growth_interval=2)
w = tm.tensor(np.ones(2, np.float32), requires_grad=True)
opt = optim.SGD([w], lr=0.1)
for step, bad in enumerate([False, False, False, True, False, False]):
    opt.zero_grad()
    x = tm.tensor(np.array([np.inf if bad else 1.0, 1.0], np.float32))
    scaler.scale((w * x).sum()).backward()
    scaler.unscale_(opt)
    clip_grad_norm_([w], max_norm=1.0)  # after unscale_: the true gradients
    scaler.step(opt)
    print(f"step {step}: scale used {scaler.get_scale():>5}, inf: {scaler.found_inf(opt)!s:5}", end="")
    scaler.update()
    print(f" -> next scale {scaler.get_scale()}")
try:
    scaler.scale((w * 1.0).sum()).backward()
    scaler.unscale_(opt)
    scaler.unscale_(opt)
except RuntimeError as err:
    print("second unscale_:", err)

# %% [markdown]
# ## 4. Training in half precision
#
# `precision.half(model, optimizer, dtype)` converts a float32 model in place and returns a
# wrapper to call and an optimizer over fp32 masters (like apex's `amp.initialize`):

# %%
x_train, y_train, x_test, y_test = data.load_digits(test_fraction=0.5)
epochs = 1 if QUICK else 8


def train(dtype):
    tm.manual_seed(0)
    model = models.MLP([64, 64, 64, 10])
    opt = optim.Adam(model.parameters(), lr=2e-3)
    run = model
    if dtype != "float32":
        run, opt = precision.half(model, opt, dtype=dtype)
    scaler = precision.GradScaler(enabled=dtype == "float16")
    for epoch in range(epochs):
        for xb, yb in data.DataLoader((x_train, y_train), batch_size=64, seed=epoch):
            opt.zero_grad()
            loss = F.cross_entropy(run(xb), yb)
            scaler.scale(loss).backward()
            scaler.unscale_(opt)
            clip_grad_norm_(opt.master_params() if dtype != "float32" else model.parameters(), 5.0)
            scaler.step(opt)
            scaler.update()
    with tm.no_grad():
        acc = (run(tm.tensor(x_test)).numpy().argmax(1) == y_test).mean()
    return 100 * acc, model


for dtype in ("float32", "float16", "bfloat16"):
    acc, model = train(dtype)
    print(f"{dtype:>9}: test accuracy {acc:.2f}%, parameters stored as {model.parameters()[0].dtype}")

# %% [markdown]
# (bfloat16 parameters show up as `uint16`: NumPy has no bfloat16, so they are bit patterns.)
#
# ## 5. The memory, measured
#
# Where do the bytes go? With Adam, a parameter costs 16 bytes in fp32 (weight, gradient, two
# moments) and 2 + 2 + 4 + 8 = 16 bytes in mixed precision (half weight, half gradient, fp32
# master, two moments) — plus 4 bytes of fp32 master gradient during the step. **The weights do
# not get cheaper; the activations do**, so the saving shows on activation-dominated training.

# %%
from tinymem.experiments import precision_steps as bench  # noqa: E402

sizes = (32, 6, 256) if QUICK else bench.SIZES["full"]
rows = {mode: bench.step_memory(mode, *sizes) for mode in bench.MODES}
for mode, r in rows.items():
    print(f"{mode:>9}: ledger peak growth {r['ledger_peak'] / 2**20:6.2f} MiB "
          f"({r['ledger_peak'] / rows['float32']['ledger_peak']:.2f}x), measured "
          f"{r['measured_peak'] / 2**20:6.2f} MiB ({r['measured_peak'] / rows['float32']['measured_peak']:.2f}x)")
    print("          at the peak:", {b: f"{v / 2**20:.2f}" for b, v in r["peak_by_bucket"].items()})

# %% [markdown]
# Both columns are the growth above the moment the window opened (`Tracker.peak_delta`, and
# tracemalloc's peak growth), of the simulated device. The half runs pay float32
# *temporaries* inside each op (compute is fp32 on the CPU): a few B x W arrays, whatever the
# depth. The deeper the model, the closer the ratio gets to 0.5.
# The full figures (`python -m tinymem figures --only precision`) show it at depth 64:
# `figures/precision_memory.png`, and the task where float16 without scaling fails:
# `figures/precision_training.png`.
#
# ## Pitfalls
#
# - Clip **after** `scaler.unscale_(optimizer)`, and clip the fp32 masters
#   (`optimizer.master_params()`): the half gradients on the model are still scaled.
# - Never `unscale_` float16 gradients in float16: small ones underflow again. tinymem copies
#   them into fp32 master gradients first (PyTorch refuses fp16 unscaling outright).
# - A skipped step is normal in dynamic scaling (a few at the start while S comes down); many
#   in a row mean real infs or NaNs in the model.
# - bfloat16 needs no scaling (float32's range) but has 8 bits of precision: 1 + 2^-9 == 1.
# - Saved masks and indices do not shrink (a dropout mask stays 1 byte per value).
#
# ## Exercises (`lessons/exercises/ex02.py`, check with `TINYMEM_EXERCISES=student python -m pytest -m exercise_02`)
#
# 1. `fp16_fields(x)`: split a float16 into sign, exponent and mantissa bits.
# 2. `fp16_value(sign, exponent, mantissa)`: the value back by the formula, subnormals and inf included.
# 3. `to_bfloat16_bits(x)`: round float32 to bfloat16 with integer arithmetic only.
# 4. `update_scale(...)`: one step of the dynamic scale rule; the check runs it beside `GradScaler`.
# 5. `largest_safe_scale(max_abs_grad)`: the largest power-of-two scale that keeps a gradient finite in float16.
# 6. Think: the regression of `precision_training.png` (`train_regression` in
#    `tinymem/experiments/precision.py`) computes its loss in units of `UNIT`. Work out the
#    gradient reaching the model's output from its batch size, its output width and `UNIT`,
#    and say which static scale would have been enough. Why does bfloat16 not need one?
