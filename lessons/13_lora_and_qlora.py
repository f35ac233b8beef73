# %% [markdown]
# # Lesson 13 — Fine-tuning what does not fit: LoRA and QLoRA
#
# Every lesson so far trained *all* the weights. To adapt a pretrained model to a new task you
# usually do not have to: **LoRA** (Hu et al. 2021) freezes the weights W and trains a low-rank
# correction beside each chosen Linear,
#
#     y = x W^T + (alpha / r) · x A^T B^T        A: (r, in), B: (out, r), r << in, out
#
# so the frozen weights need no gradient and no optimizer state: of lesson 0's five buckets,
# `gradient` and `optimizer` shrink to the adapters' size. **QLoRA** (Dettmers et al. 2023) then
# attacks the weights themselves: it stores the frozen W in 4-bit *NormalFloat* (NF4) with
# 8-bit block scales (4 + 8/64 + 32/(64·256) bits per weight), dequantizes one layer at a time for its
# matmul, and pages optimizer state to the host when an activation spike would overflow the GPU.
#
# The source, one concept per file, in `tinymem/techniques/lora/`: `adapter.py` (LoRALinear,
# apply_lora, merge), `nf4.py` (the levels and the 4-bit blocks), `double_quant.py` (8-bit
# scales), `qlinear.py` (NF4Linear, dequantized per matmul), `paging.py` (the paged optimizer),
# and the figure family `tinymem/experiments/lora.py`.

# %%
import gc

import numpy as np

import tinymem as tm
import tinymem.functional as F
from tinymem import memory, models, nn, optim
from tinymem.experiments import lora as experiment
from tinymem.measure.records import read_records
from tinymem.techniques.lora import (LEVELS, apply_lora, apply_qlora, lora_modules, paged,
                                     trainable_parameters)
from course import FIGURES, OUT

tm.manual_seed(0)
MIB = 2 ** 20

# %% [markdown]
# ## 1. A LoRA layer starts where its base layer is
#
# B starts at zero, so a freshly wrapped model computes *exactly* what the pretrained one did:
# fine-tuning starts from the pretrained model, not from a perturbed copy of it. A starts random
# (as a Linear's weight), or the gradient of B, which is (alpha / r) · g^T (x A^T), would be zero too.

# %%
vocab, context = 50, 32
lm = models.TransformerLM(vocab, context, d_model=64, n_heads=4, n_layers=2)
ids = np.random.default_rng(0).integers(0, vocab, (4, context))
with tm.no_grad():
    before = lm(ids).numpy()
    apply_lora(lm, r=8, alpha=16)
    after = lm(ids).numpy()
print(f"adapted Linears: {[name for name, _ in lora_modules(lm)]}")
print(f"largest change of the logits after wrapping: {np.abs(after - before).max()}")
trainable = sum(p.size for p in trainable_parameters(lm))
print(f"trainable: {trainable:,d} of {lm.num_parameters():,d} parameters ({trainable / lm.num_parameters():.1%})")

# %% [markdown]
# ## 2. What the ledger sees: one step, full fine-tuning against LoRA
#
# Same model, same batch, one Adam step each (after a first step, so the state exists).

# %%
def one_step(prepare, batch=8):
    gc.collect()
    tm.manual_seed(0)
    model = models.TransformerLM(vocab, context, d_model=128, n_heads=4, n_layers=2)
    params = prepare(model)
    opt = optim.Adam(params, lr=1e-3)
    x = np.random.default_rng(1).integers(0, vocab, (batch, context))

    def step():
        opt.zero_grad()
        model.loss(x, x).backward()
        opt.step()

    step()
    opt.zero_grad()
    with memory.track() as t:
        step()
    return t.peak_by_bucket(), sum(p.nbytes for p in params)


full, _ = one_step(lambda m: m.parameters())
lora, adapter_bytes = one_step(lambda m: trainable_parameters(apply_lora(m, r=8, alpha=16)))
print(f"{'bucket':<11} {'full FT':>12} {'LoRA r=8':>12}   (bytes at the peak)")
for bucket in memory.BUCKETS:
    print(f"{bucket:<11} {full[bucket]:>12,d} {lora[bucket]:>12,d}")
print(f"LoRA's optimizer bytes / adapter bytes = {lora['optimizer'] / adapter_bytes:g} (Adam: two moments)")

# %% [markdown]
# The weights stay (they are still used in every forward), and so do the activations: every
# frozen layer still passes its input's gradient back to the adapters below it. What vanishes
# is the frozen weights' gradient and Adam's two moments for them, 12 of the 16 bytes that
# full fine-tuning keeps per weight.
#
# After training, `merge()` folds (alpha / r) · B A into W: the fine-tuned model then costs at
# inference exactly what the base did. `unmerge()` subtracts it again (both round in float32).

# %%
layer = lora_modules(lm)[0][1]
layer.lora_B.data[...] = np.random.default_rng(2).standard_normal(layer.lora_B.shape).astype(np.float32)
x = tm.randn(3, layer.in_features)
with tm.no_grad():
    unmerged = layer(x).numpy()
    merged = layer.merge()(x).numpy()
    layer.unmerge()
print(f"merged vs adapter path: largest difference {np.abs(merged - unmerged).max():.2e} (float32 rounding)")

# %% [markdown]
# ## 3. NF4: sixteen levels where a normal distribution puts its mass
#
# A pretrained weight matrix is close to normal. Split N(0, 1) into equal-probability slices and
# put one level at each: every code is then used about equally often, the most information 4 bits
# can carry. The paper's construction keeps an exact zero (padding and pruned weights stay zero),
# and so has 8 levels above zero and 7 below; `nf4.py` builds them with `statistics.NormalDist`.
# Each block of 64 weights is scaled by its absolute maximum first, so the levels span [-1, 1].

# %%
w = np.random.default_rng(3).standard_normal(64 * 1024).astype(np.float32)
codes = np.abs(w.reshape(-1, 64) / np.abs(w.reshape(-1, 64)).max(axis=1, keepdims=True)
               - LEVELS[:, None, None]).argmin(axis=0)
uniform = np.linspace(-1, 1, 16)
codes_uniform = np.abs(w.reshape(-1, 64) / np.abs(w.reshape(-1, 64)).max(axis=1, keepdims=True)
                       - uniform[:, None, None]).argmin(axis=0)
use = np.bincount(codes.ravel(), minlength=16) / codes.size
use_uniform = np.bincount(codes_uniform.ravel(), minlength=16) / codes.size
print("share of weights per code, NF4:    ", " ".join(f"{u:.2f}" for u in use))
print("share of weights per code, uniform:", " ".join(f"{u:.2f}" for u in use_uniform))

# %% [markdown]
# The uniform 4-bit grid spends its outer codes on the few weights near a block's maximum and
# crowds the many small ones into a handful of codes; NF4 spreads them out (the outermost
# codes still hold at least one weight per block: the maximum itself).
#
# ## 4. One dequantized layer at a time
#
# An `NF4Linear` keeps only codes and scales. For its matmul it rebuilds the float32 weight,
# uses it and drops it; backward rebuilds it again rather than keeping it. The ledger counts the
# rebuilt weight as `workspace` labelled "nf4 weight"; the timeline shows how much of it is
# ever alive at once.

# %%
mlp = nn.Sequential(nn.Linear(256, 512), nn.GELU(), nn.Linear(512, 512), nn.GELU(), nn.Linear(512, 256))
apply_qlora(mlp, r=8, alpha=16)
opt = optim.Adam(trainable_parameters(mlp), lr=1e-3)
x = tm.randn(16, 256)
with memory.track() as t:
    F.mse_loss(mlp(x), x).backward()
    opt.step()
alive = most = 0
for event in t.timeline():
    if event["label"] == "nf4 weight" and event["kind"] != "mark":
        alive += event["bytes"] if event["kind"] == "alloc" else -event["bytes"]
        most = max(most, alive)
layers = [m.base for _, m in lora_modules(mlp)]
print(f"most dequantized weight bytes alive at once: {most:,d} B; largest layer in float32: "
      f"{max(4 * m.in_features * m.out_features for m in layers):,d} B; all layers: "
      f"{sum(4 * m.in_features * m.out_features for m in layers):,d} B")
print(f"stored weights (codes and scales): {sum(m.weight_nbytes() for m in layers):,d} B")

# %% [markdown]
# ## 5. Predict, then measure: a model whose bf16 weights do not fit
#
# Below, eight 1024 x 1024 Linears (with GELUs between) and a device budget smaller than their
# weights in bf16 (both printed): no half-precision trick trains this model under the budget.
# Before you run the next cell, **predict** with QLoRA at r = 8, Adam, a batch of 16:
# the `parameter` bucket (NF4 codes and 8-bit scales, float32 biases, adapters), and whether
# the step's peak stays under the budget. Write your numbers down.

# %%
del lm, layer, mlp, layers, opt, t  # the budget counts every live device byte: earlier models go
BUDGET, SHAPE, N_LAYERS = 14 * MIB, (1024, 1024), 8
bf16_bytes = 2 * N_LAYERS * SHAPE[0] * SHAPE[1]
print(f"bf16 weights: {bf16_bytes / MIB:.1f} MiB against a budget of {BUDGET / MIB:.0f} MiB")
assert bf16_bytes > BUDGET

# %%
gc.collect()
tm.manual_seed(0)
big = nn.Sequential(*[m for _ in range(N_LAYERS) for m in (nn.Linear(*SHAPE), nn.GELU())][:-1])
apply_qlora(big, r=8, alpha=16)  # built in float32 outside the window: a real run loads NF4 directly
gc.collect()
opt = optim.Adam(trainable_parameters(big), lr=1e-3)
x = tm.randn(16, SHAPE[1])
with memory.track(budget=BUDGET) as t:
    for _ in range(2):
        opt.zero_grad()
        F.mse_loss(big(x), x).backward()
        opt.step()
print(f"measured: parameter bucket {t.peak_by_bucket()['parameter'] / MIB:.2f} MiB, step peak "
      f"{t.peak() / MIB:.2f} MiB under a budget of {BUDGET / MIB:.0f} MiB")
print(t.table())

# %% [markdown]
# The weights went from 4 bytes (2 in bf16) to about half a byte each, and the adapters' state
# is small beside them. At the peak, the one layer being dequantized (4 bytes per weight of one
# layer, most of the workspace row) is a large share: at this size QLoRA's peak is the NF4
# weights, one float32 layer, the adapters' state and the activations. Exercise 4 asks you to
# make this prediction in code.
#
# ## 6. Paged optimizer state
#
# QLoRA's last ingredient handles spikes: a long sequence can need more activation memory than
# the usual batch. `paged(optimizer)` registers the optimizer as a *pager* of the ledger: when
# an allocation would exceed the budget, the optimizer's state moves to the host first (least
# recently used parameter first), and comes back just before its parameter's update.

# %%
def spike_run(budget, use_paging):
    gc.collect()
    tm.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 64), nn.GELU(), nn.Linear(64, 64))
    apply_lora(model, r=32, alpha=32)
    inner = optim.Adam(trainable_parameters(model), lr=1e-2)
    opt = paged(inner) if use_paging else inner
    batches = [tm.randn(n, 64) for n in (4, 512, 4)]  # a small step, a spike, a small step
    try:
        opt.zero_grad()
        F.mse_loss(model(batches[0]), batches[0]).backward()
        opt.step()
        with memory.track(budget=budget, measure=False) as t:
            for x in batches[1:]:
                opt.zero_grad()
                F.mse_loss(model(x), x).backward()
                opt.step()
    finally:
        if use_paging:
            opt.close()
    return [p.numpy().copy() for p in trainable_parameters(model)], t.peak(), inner.state_bytes(), \
        opt.stats() if use_paging else None


free, free_peak, state, _ = spike_run(None, False)
budget = free_peak - state // 2
try:
    spike_run(budget, False)
except memory.OutOfMemoryError as error:
    print("without paging:", str(error).splitlines()[0])
paged_params, peak, _, moved = spike_run(budget, True)
print(f"with paging: peak {peak:,d} B under the budget of {budget:,d} B; moved {moved}")
print("adapters bit-identical to the run without a budget:",
      all(np.array_equal(a, b) for a, b in zip(free, paged_params)))

# %% [markdown]
# bitsandbytes gets the same effect from CUDA unified memory, which pages on demand; here each
# move is explicit and counted (on the CPU the device is simulated, so the move is accounting
# and a copy, not a saving of RAM).
#
# ## 7. The figures: does it learn as well?
#
# `python -m tinymem figures --only lora` pretrains the course's TransformerLM on Python's
# documentation, fine-tunes it on standard-library source code five ways, and measures one step
# of a wider model. Here, the committed records redrawn:

# %%
records = read_records(FIGURES, "lora")
for path in experiment.plot(records, OUT):
    print("wrote", path)
full_run = experiment.run_of(records, "full")
for run in records["finetune"]:
    print(f"  {experiment.label(run['method'], run['r']):>10}: validation loss {run['val_loss']:.4f} nats/char "
          f"({run['val_loss'] / full_run['val_loss']:.3f}x full), {run['trainable']:,d} trainable parameters")
for claim in records["claims"]:
    print(f"  {'holds' if claim['holds'] else 'not judged' if claim['holds'] is None else 'FAILS':>10}: {claim['text']}")

# %% [markdown]
# ## Pitfalls
#
# - **LoRA does not shrink activations.** The frozen layers still run forward and backward
#   (their input gradients feed the adapters below): for long sequences combine it with
#   checkpointing (lesson 1).
# - **Only Linears are adapted here.** tinymem's attention keeps q, k, v in one raw parameter
#   (`in_proj_weight`), which `apply_lora` freezes but does not adapt.
# - **B = 0 and A random, not the reverse**: both zero and no gradient ever flows.
# - **Merging a quantized base** would have to re-quantize W + BA and lose the small update to
#   rounding: `merge()` refuses an NF4 base.
# - **Dequantizing costs time**, twice per step per layer (forward and backward): QLoRA trades
#   compute for memory, as checkpointing does.
# - **NF4 assumes normal weights.** A layer with a few huge outliers spends its codes badly;
#   the blocks of 64 confine the damage to one block.
#
# ## Exercises (`lessons/exercises/ex13.py`, check with `TINYMEM_EXERCISES=student python -m pytest -m exercise_13`)
#
# 1. `lora_step_bytes(layers, r)`: for Linears of `(in, out)` shapes with biases, all adapted at
#    rank r, trained with Adam in float32, the `parameter`, `gradient` and `optimizer` bytes.
# 2. `nf4_levels()`: build the 16 NF4 levels from the quantiles of N(0, 1), as section 3 says.
# 3. `nf4_bits_per_weight(n, double_quant)`: the stored bits per weight of n weights in NF4,
#    blocks of 64, with (8-bit scales in blocks of 256, a float32 scale each and one float32
#    mean) or without (a float32 scale per block) double quantization.
# 4. `qlora_parameter_bytes(layers, r)` predicts the `parameter` bucket of section 5's kind of
#    model; `qlora_step_peak(layers, r, batch, budget)` measures the peak of its second step.
# 5. Think: at what rank r does a LoRA adapter of a d x d layer hold as many parameters as the
#    layer itself? Why is LoRA's r usually 4 to 64 while d is in the thousands?
