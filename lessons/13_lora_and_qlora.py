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
# 8-bit block scales, dequantizes one layer at a time for its matmul, and pages optimizer state
# to the host when an activation spike would overflow the GPU.
#
# The source, one concept per file, in `tinymem/techniques/lora/`: `adapter.py` (LoRALinear,
# apply_lora, merge), `nf4.py` (the levels and the 4-bit blocks), `double_quant.py` (8-bit
# scales), `qlinear.py` (NF4Linear, dequantized per matmul), `paging.py` (the paged optimizer),
# and the figure family `tinymem/experiments/lora.py`.

# %%
import gc
from statistics import NormalDist

import numpy as np

import tinymem as tm
import tinymem.functional as F
from tinymem import memory, models, nn, optim
from tinymem.experiments import lora as experiment
from tinymem.measure.records import read_records
from tinymem.techniques.lora import (LEVELS, LoRALinear, apply_lora, apply_qlora, lora_modules, paged,
                                     trainable_parameters)
from course import FIGURES, OUT, check, predict, reveal

tm.manual_seed(0)
MIB = 2 ** 20

# %% [markdown]
# ## 1. A LoRA layer starts where its base layer is
#
# B starts at zero, so a freshly wrapped model computes *exactly* what the pretrained one did:
# fine-tuning starts from the pretrained model, not from a perturbed copy of it. A starts random,
# as a Linear's weight does.

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
check("wrapping changes no logit: with B = 0 the adapted model is the base model", np.array_equal(after, before))

# %% [markdown]
# Either factor at zero makes the product B A zero, so A = 0 with B random would start from the
# base model too. Would it train? A's gradient is (alpha / r) · B^T g^T x and B's is
# (alpha / r) · g^T (x A^T): one step of each start, on one adapted Linear, tells.

# %%
def first_gradients(zero_a, random_b):
    """Largest |gradient| of A and of B after one backward, and whether the output is the base's."""
    tm.manual_seed(0)
    base = nn.Linear(16, 8)
    layer = LoRALinear(base, r=4)
    if zero_a:
        layer.lora_A.data[...] = 0
    if random_b:
        b = np.random.default_rng(4).standard_normal(layer.lora_B.shape)
        layer.lora_B.data[...] = tm.backend.to_device(b, layer.lora_B.device)  # onto B's device
    x = tm.randn(5, 16)
    with tm.no_grad():
        as_base = np.array_equal(layer(x).numpy(), base(x).numpy())
    F.mse_loss(layer(x), tm.randn(5, 8)).backward()
    return np.abs(layer.lora_A.grad.numpy()).max(), np.abs(layer.lora_B.grad.numpy()).max(), as_base


starts = {"A random, B = 0 (LoRA's)": first_gradients(False, False),
          "A = 0, B random": first_gradients(True, True), "A = 0, B = 0": first_gradients(True, False)}
for start, (grad_a, grad_b, as_base) in starts.items():
    print(f"{start:<26} largest |grad A| {grad_a:.3f}, |grad B| {grad_b:.3f}, output = base output: {as_base}")
check("B = 0 or A = 0: either starts as the base model, and either has a non-zero gradient (it trains)",
      all(s[2] for s in starts.values()) and bool(starts["A random, B = 0 (LoRA's)"][1] > 0)
      and bool(starts["A = 0, B random"][0] > 0))
check("only both zero blocks training: both gradients are zero, so no step moves either factor",
      starts["A = 0, B = 0"][:2] == (0, 0))

# %% [markdown]
# ## 2. What the ledger sees: one step, full fine-tuning against LoRA
#
# Same model, same batch, one Adam step each (after a first step, so the state exists).

# %%
def one_step(prepare, batch=8):
    """Peak bytes per bucket of a second Adam step, the adapters' bytes, and what the model keeps
    per weight after the step (its parameters, their gradients, Adam's state)."""
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
    n = model.num_parameters()
    kept = {"parameter": sum(p.nbytes for p in model.parameters()) / n,
            "gradient": sum(p.grad.nbytes for p in model.parameters() if p.grad is not None) / n,
            "optimizer": opt.state_bytes() / n}
    return t.peak_by_bucket(), sum(p.nbytes for p in params), kept


full, _, full_kept = one_step(lambda m: m.parameters())
lora, adapter_bytes, lora_kept = one_step(lambda m: trainable_parameters(apply_lora(m, r=8, alpha=16)))
print(f"{'bucket':<11} {'full FT':>12} {'LoRA r=8':>12}   (bytes at the peak)")
for bucket in memory.BUCKETS:
    print(f"{bucket:<11} {full[bucket]:>12,d} {lora[bucket]:>12,d}")
print(f"{'bucket':<11} {'full FT':>12} {'LoRA r=8':>12}   (bytes kept per weight of the model after the step)")
for bucket in full_kept:
    print(f"{bucket:<11} {full_kept[bucket]:>12.3f} {lora_kept[bucket]:>12.3f}")
print(f"LoRA's optimizer bytes / adapter bytes = {lora['optimizer'] / adapter_bytes:g} (Adam: two moments)")

# %% [markdown]
# The weights stay (they are still used in every forward). What vanishes is the frozen weights'
# gradient and Adam's two moments for them. The activations fall too: a layer whose weight is
# frozen needs no weight gradient, so it saves no input for one (it still passes its input's
# gradient back to the adapters below, which needs only its weight). Here is one Linear, with
# and without a trainable weight, holding what its forward saved:

# %%
def saved_by_linear(trainable_weight):
    gc.collect()
    before = memory.live_bytes("activation")
    linear = nn.Linear(64, 64)
    for p in linear.parameters():
        p.requires_grad = trainable_weight
    y = linear(tm.randn(8, 64, requires_grad=True))  # the input needs its gradient either way
    return memory.live_bytes("activation") - before, y


trained_saves, y = saved_by_linear(True)
frozen_saves, y = saved_by_linear(False)
del y
print(f"a Linear(64, 64) at batch 8 saves {trained_saves:,d} B when its weight trains, {frozen_saves:,d} B when frozen")
kept_full, kept_lora = sum(full_kept.values()), sum(lora_kept.values())
check(f"full fine-tuning keeps {kept_full:g} bytes per weight after its step, {kept_full - full_kept['parameter']:g} "
      f"of them gradient and Adam's two moments; LoRA keeps {kept_lora:.2f}: the frozen weights' gradient and "
      "moments are gone, the adapters' stay",
      full_kept["gradient"] + full_kept["optimizer"] == 12 and lora_kept["gradient"] + lora_kept["optimizer"] < 1)
check(f"the activations at the peak fall too, by {1 - lora['activation'] / full['activation']:.0%}: "
      "a frozen Linear saves no input for a weight gradient",
      lora["activation"] < full["activation"] and frozen_saves == 0 < trained_saves)

# %% [markdown]
# After training, `merge()` folds (alpha / r) · B A into W: the fine-tuned model then costs at
# inference exactly what the base did. `unmerge()` subtracts it again (both round in float32).

# %%
layer = lora_modules(lm)[0][1]
b = np.random.default_rng(2).standard_normal(layer.lora_B.shape).astype(np.float32)
layer.lora_B.data[...] = tm.backend.to_device(b, layer.lora_B.device)  # onto B's device
x = tm.randn(3, layer.in_features)
with tm.no_grad():
    unmerged = layer(x).numpy()
    merged = layer.merge()(x).numpy()
    layer.unmerge()
print(f"merged vs adapter path: largest difference {np.abs(merged - unmerged).max():.2e} (float32 rounding)")

# %% [markdown]
# ## 3. NF4: sixteen levels where a normal distribution puts its mass
#
# A pretrained weight matrix is close to normal, so NF4 puts its levels at quantiles of N(0, 1):
# Phi^-1(p) for probabilities p evenly spaced from an offset just under 1 down to 1/2, on each
# side of zero (mirrored below it). p = 1/2 gives zero itself, exact (padding and pruned weights
# stay zero), which both sides share: one side gets 8 levels beside it, the other 7. All are
# divided by the largest, so they span [-1, 1]. Each block of 64 weights is scaled by its
# absolute maximum first.
#
# Does that use the 16 codes equally often, the most information 4 bits can carry? Below, on
# normal weights: the share of the weights each code gets, and the codes' entropy (4 bits if
# every code had the same share), against a uniform 4-bit grid.

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
entropy = {name: -(u[u > 0] * np.log2(u[u > 0])).sum() for name, u in (("NF4", use), ("uniform", use_uniform))}
print(f"entropy of the codes: NF4 {entropy['NF4']:.3f} bits, uniform {entropy['uniform']:.3f} bits (of 4)")
check(f"NF4's codes are not used equally: shares from {use.min():.3f} to {use.max():.3f}, "
      f"{entropy['NF4']:.2f} of 4 bits, and the two outermost codes are the least used",
      bool(use.max() > 2 * use.min() and entropy["NF4"] < 3.95) and set(np.argsort(use)[:2].tolist()) == {0, 15})
check(f"they are used more evenly than a uniform grid's ({entropy['uniform']:.2f} bits)",
      bool(entropy["NF4"] > entropy["uniform"]))

# %% [markdown]
# The uniform 4-bit grid spends its outer codes on the few weights near a block's maximum and
# crowds the many small ones into a handful of codes; NF4 spreads them out, though not evenly:
# the levels stand at evenly spaced probabilities, but each weight goes to its *nearest* level,
# and each block is scaled by its own maximum, which for nearly every block of 64 normal
# weights lies further out than the outermost level's quantile: scaled by it, the other weights
# crowd inward.

# %%
outermost = NormalDist().inv_cdf(1 - (1 / 30 + 1 / 32) / 2)  # the quantile the level 1.0 stands for
beyond = (np.abs(w.reshape(-1, 64)).max(axis=1) > outermost).mean()
check(f"{beyond:.1%} of the blocks have their maximum beyond {outermost:.3f}, the outermost level's quantile",
      bool(beyond > 0.9))

# %% [markdown]
# ## 4. One dequantized layer at a time
#
# An `NF4Linear` keeps only codes and scales. For its matmul it rebuilds the float32 weight,
# uses it and drops it; backward rebuilds it again rather than keeping it. The ledger counts the
# rebuilt weight as `workspace` labelled "nf4 weight"; the timeline shows how much of it is
# ever alive at once. (The QLoRA paper dequantizes to BFloat16, its computation type, 2 bytes
# per weight; tinymem's matmuls run in float32, so it rebuilds 4 bytes per weight.)

# %%
mlp = nn.Sequential(nn.Linear(256, 512), nn.GELU(), nn.Linear(512, 512), nn.GELU(), nn.Linear(512, 256))
apply_qlora(mlp, r=8, alpha=16)
opt = optim.Adam(trainable_parameters(mlp), lr=1e-3)
x = tm.randn(16, 256)
with memory.track() as t:
    F.mse_loss(mlp(x), x).backward()
    opt.step()
def most_dequantized(tracker):
    """The most bytes of rebuilt NF4 weights alive at once in a window's timeline."""
    alive = most = 0
    for event in tracker.timeline():
        if event["label"] == "nf4 weight" and event["kind"] != "mark":
            alive += event["bytes"] if event["kind"] == "alloc" else -event["bytes"]
            most = max(most, alive)
    return most


most = most_dequantized(t)
layers = [m.base for _, m in lora_modules(mlp)]
largest = max(m.in_features * m.out_features for m in layers)
print(f"most dequantized weight bytes alive at once: {most:,d} B; largest layer in float32: "
      f"{4 * largest:,d} B; all layers: {sum(4 * m.in_features * m.out_features for m in layers):,d} B")
print(f"stored weights (codes and scales): {sum(m.weight_nbytes() for m in layers):,d} B")
check(f"one layer at a time, rebuilt in float32: {most:,d} B = 4 B x {largest:,d} weights of the largest layer",
      most == 4 * largest)

# %% [markdown]
# ## 5. Predict, then measure: a model whose bf16 weights do not fit
#
# Below, a stack of square Linears (GELUs between) and a device budget smaller than their
# weights in bf16, both printed. QLoRA stores all of them in NF4, and rebuilds one at a time
# in float32 for its matmul (section 4).

# %%
del lm, layer, mlp, layers, opt, t  # the budget counts every live device byte: earlier models go
BUDGET, SHAPE, N_LAYERS, R, BATCH = 14 * MIB, (1024, 1024), 8, 8, 16
bf16_bytes = 2 * N_LAYERS * SHAPE[0] * SHAPE[1]
print(f"{N_LAYERS} Linears of {SHAPE[0]} x {SHAPE[1]}: bf16 weights {bf16_bytes / MIB:.1f} MiB against a budget "
      f"of {BUDGET / MIB:.0f} MiB")
assert bf16_bytes > BUDGET
predict(f"QLoRA at r = {R}, Adam, a batch of {BATCH}, two steps under the budget. At the step's peak, which holds "
        f"more bytes: the NF4 codes and scales of all {N_LAYERS} layers, or the one layer rebuilt in float32 for "
        f"its matmul? Does the peak stay under {BUDGET / MIB:.0f} MiB?")

# %%
gc.collect()
tm.manual_seed(0)
big = nn.Sequential(*[m for _ in range(N_LAYERS) for m in (nn.Linear(*SHAPE), nn.GELU())][:-1])
apply_qlora(big, r=R, alpha=2 * R)  # built in float32 outside the window: a real run loads NF4 directly
gc.collect()
opt = optim.Adam(trainable_parameters(big), lr=1e-3)
x = tm.randn(BATCH, SHAPE[1])
with memory.track(budget=BUDGET) as t:
    for _ in range(2):
        opt.zero_grad()
        F.mse_loss(big(x), x).backward()
        opt.step()
bases = [m.base for _, m in lora_modules(big)]
stored, rebuilt, at_peak = sum(m.weight_nbytes() for m in bases), most_dequantized(t), t.peak_by_bucket()
reveal(f"NF4 codes and scales of the {N_LAYERS} layers {stored:,d} B, the one rebuilt layer {rebuilt:,d} B "
       f"({stored / rebuilt:.3f}x); step peak {t.peak() / MIB:.2f} MiB against a budget of {BUDGET / MIB:.0f} MiB",
       f"{N_LAYERS} layers in NF4 weigh about what one layer does in float32 (within 10%), and the peak stays "
       "under the budget", abs(stored / rebuilt - 1) < 0.1 and t.peak() < BUDGET)
print(t.table())
n_weights = N_LAYERS * SHAPE[0] * SHAPE[1]
print(f"stored bytes per weight: {stored / n_weights:.3f} (float32: 4, bf16: 2)")
check(f"the rebuilt float32 layer is most of the workspace at the peak ({rebuilt / at_peak['workspace']:.0%})",
      rebuilt > at_peak["workspace"] / 2)
check(f"the adapters' Adam state is small beside the parameter bucket "
      f"({at_peak['optimizer'] / at_peak['parameter']:.0%})",
      at_peak["optimizer"] < at_peak["parameter"] / 4)

# %% [markdown]
# The weights shrank to the bytes per weight printed above, against 4 in float32 and 2 in bf16.
# The rebuilt layer is 4 bytes per weight of one layer: tinymem's figure, as it rebuilds float32;
# the QLoRA paper dequantizes to BFloat16, 2 bytes, half of it. At this size QLoRA's peak is the NF4 weights, one rebuilt
# layer, the adapters' state and the activations. Exercise 4 asks you to make this prediction
# in code, for shapes this lesson does not run.
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
print(f"with paging: peak {peak:,d} B {'at' if peak == budget else 'under'} the budget of {budget:,d} B; moved {moved}")
check("with paging the spike runs within the budget (peak <= budget)", peak <= budget)
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
# documentation, fine-tunes it on standard-library source code in each of the ways listed
# below, and measures one step of a wider model. Here, the committed records redrawn:

# %%
records = read_records(FIGURES, "lora")
for path in experiment.plot(records, OUT):
    print("wrote", path)
full_run = experiment.run_of(records, "full")
print(f"fine-tuned {sum(run['trainable'] > 0 for run in records['finetune'])} ways, beside the pretrained model:")
for run in records["finetune"]:
    print(f"  {experiment.label(run['method'], run['r']):>10}: validation loss {run['val_loss']:.4f} nats/char "
          f"({run['val_loss'] / full_run['val_loss']:.3f}x full), {run['trainable']:,d} trainable parameters")
for claim in records["claims"]:
    print(f"  {'holds' if claim['holds'] else 'not judged' if claim['holds'] is None else 'FAILS':>10}: {claim['text']}")

# %% [markdown]
# ## Pitfalls
#
# - **LoRA shrinks activations only in part.** A frozen layer saves no input for its weight's
#   gradient, but the adapters save theirs, and every nonlinearity and attention still saves what
#   its own backward needs (section 2 measures what is left): for long sequences combine LoRA
#   with checkpointing (lesson 1).
# - **Only Linears are adapted here.** tinymem's attention keeps q, k, v in one raw parameter
#   (`in_proj_weight`), which `apply_lora` freezes but does not adapt.
# - **B = 0 is for the start, not for the gradient**: it makes the adapted model the base model.
#   A = 0 with B random does that too and trains as well; only both zero blocks training
#   (section 1 computes the three starts' gradients).
# - **Merging a quantized base** would have to re-quantize W + BA and lose the small update to
#   rounding: `merge()` refuses an NF4 base.
# - **Dequantizing costs time**, twice per step per layer (forward and backward): QLoRA trades
#   compute for memory, as checkpointing does.
# - **NF4 assumes normal weights.** A layer with a few huge outliers spends its codes badly;
#   the blocks of 64 confine the damage to one block.
#
# ## Exercises (`lessons/exercises/ex13.py`, check with `TINYMEM_EXERCISES=student python -m pytest -m exercise_13`)
#
# 1. `lora_step_bytes(layers, r, adapted)`: for Linears of `(in, out)` shapes with biases, of
#    which only those at the positions `adapted` get a rank-r adapter, trained with Adam in
#    float32, the `parameter`, `gradient` and `optimizer` bytes.
# 2. `nf_levels(bits)`: the levels of a NormalFloat of 2 to 8 bits, built as section 3 builds
#    NF4's (the check holds your 4 bits to bitsandbytes' table).
# 3. `nf4_bits_per_weight(n, block, block2)`: the stored bits per weight of n weights in NF4 for
#    block sizes the library's default (64 weights, 256 scales) does not use.
# 4. `qlora_parameter_bytes(layers, r)` predicts the `parameter` bucket of section 5's kind of
#    model; `qlora_step_peak(layers, r, batch, budget)` measures the peak of its second step.
# 5. Think: at what rank r does a LoRA adapter of a d x d layer hold as many parameters as the
#    layer itself? Why is LoRA's r usually 4 to 64 while d is in the thousands?
