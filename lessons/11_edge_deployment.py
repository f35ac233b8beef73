# %% [markdown]
# # Lesson 11 — Edge deployment: int8 in ONNX Runtime, and inference under 256 KiB
#
# Training is over; now the model must run where memory is scarce: a phone, a browser, a
# microcontroller with 256 KiB of SRAM and 1 MiB of flash. Two questions:
#
# 1. **Can the int8 model of lesson 3 run in a real runtime, and does it compute what tinymem
#    computes?** We export it to ONNX (built with the `onnx` package's helpers, no PyTorch) and
#    run it in ONNX Runtime, which has integer kernels that NumPy lacks.
# 2. **How much memory does inference need?** Without backward nothing is saved: one layer's
#    input, output and scratch at a time. And the first layers can run tile by tile
#    (patch-based inference, MCUNetV2), so only one tile's activations are alive.
#
# Sources: `tinymem/edge/onnx_export.py`, `tinymem/edge/runtime.py`, `tinymem/edge/chain.py`,
# `tinymem/edge/peak.py`, `tinymem/edge/patch.py`, `tinymem/experiments/edge.py`.

# %%
import os

import numpy as np
import onnxruntime as ort

import tinymem as tm
import tinymem.functional as F
from tinymem import edge, models
from tinymem.edge import onnx_export as E
from tinymem.edge import runtime as R
from tinymem.edge.patch import trace_back
from tinymem.experiments import edge as exp
from tinymem.measure.records import read_records
from tinymem.techniques import quantization as Q

QUICK = os.environ.get("TINYMEM_QUICK") == "1"
from course import FIGURES, OUT, check, predict, reveal  # OUT: where figures go (lessons/out/, git-ignored)
tm.manual_seed(0)

# %% [markdown]
# ## 1. A quantized model, exported
#
# Post-training quantization as in lesson 3: int8 weights per output channel, activations
# calibrated by histogram. The exporter writes each `QuantizedLinear` in the **QDQ format**:
# `QuantizeLinear` turns the float input into uint8 codes, `DequantizeLinear` turns codes (and
# the int8 weight) back into floats, and a plain `MatMul` follows. The graph *describes* the
# int8 arithmetic; the runtime is free to execute it with integer kernels.

# %%
x_train, y_train, x_test, y_test = tm.data.load_digits()
model = models.MLP([64, 256, 256, 10])
opt = tm.optim.Adam(model.parameters(), lr=1e-3)
for epoch in range(2 if QUICK else 15):
    for xb, yb in tm.data.DataLoader((x_train, y_train), batch_size=64, shuffle=True, seed=epoch):
        loss = F.cross_entropy(model(xb), yb)
        opt.zero_grad()
        loss.backward()
        opt.step()
fp32_proto = E.to_onnx(model)
int8_model = models.MLP([64, 256, 256, 10])
int8_model.load_state_dict(model.state_dict())
Q.quantize_model(int8_model, [x_train[i:i + 256] for i in range(0, 1024, 256)], Q.HistogramObserver, per_channel=True)
int8_proto = E.to_onnx(int8_model, expose_codes=True)
print("int8 graph:", [n.op_type for n in int8_proto.graph.node][:8], "...")
print(f"file size: float32 {E.file_bytes(fp32_proto):,} B, int8 {E.file_bytes(E.to_onnx(int8_model)):,} B "
      f"({E.file_bytes(E.to_onnx(int8_model)) / E.file_bytes(fp32_proto):.3f}x)")

# %% [markdown]
# ## 2. Does the runtime compute what tinymem computes?
#
# Compare the uint8 **codes** each layer's input becomes, on every test input. Two ways to run:
# ONNX Runtime's *reference* kernels (the graph as written: dequantize, float MatMul) and its
# *fused* kernels (all graph optimizations on: where a Q/DQ pair feeds a layer whose output is
# quantized again, it puts `QGemm` in its place, an int8 GEMM with an int32 accumulator that
# writes the next layer's uint8 codes directly, with the bias rounded to int32 and the ReLU
# folded into the clamp). The last layer's output is float logits, so a float `Gemm` after a
# `DequantizeLinear` stays: the list of the ops ORT runs, printed last, shows both kinds.
# tinymem computes the int32 sum exactly, rescales to float, adds the bias, applies ReLU and quantizes. The rounding happens at
# different places, so a code can land one step away where a value sits on a .5 boundary; and
# ONNX's `QuantizeLinear` divides by the scale where tinymem (like PyTorch) multiplies by its
# reciprocal, which differs at exact ties.
#
# One more difference depends on the CPU. On x86 without the VNNI instructions, the integer GEMM
# multiplies uint8 codes by int8 weights with `VPMADDUBSW`, which adds *adjacent pairs* of
# products in int16 and saturates: two products of 255 x 127 make 64,770, past int16's 32,767.
# Where a pair saturates, the fused kernel's code can land several steps away. ONNX Runtime's
# documentation names this as the reason for `reduce_range` (7-bit weights) on such CPUs.
# `R.tinymem_codes(..., int16_pairs=True)` computes tinymem's arithmetic with the same
# saturation, so every code further than one step can be explained (or not) by it.

# %%
logits, codes = R.tinymem_codes(int8_model, x_test)
_, saturated_codes = R.tinymem_codes(int8_model, x_test, int16_pairs=True)
for name, level in (("reference", ort.GraphOptimizationLevel.ORT_DISABLE_ALL),
                    ("fused", ort.GraphOptimizationLevel.ORT_ENABLE_ALL)):
    out = R.run(R.session(int8_proto, level=level), x_test)
    agree = R.code_agreement(out, codes, saturated_codes)
    print(f"{name:9s}: codes off by one {agree['codes_off_by_one']:5d} of {agree['codes']:,}, "
          f"{agree['codes_beyond_one_step']} further (max {agree['codes_max_diff']}; within one step of the "
          f"int16-pair arithmetic: {agree['beyond_explained_by_int16_pairs']}); predictions differ on "
          f"{int((out['logits'].argmax(1) != logits.argmax(1)).sum())} of {len(x_test)} inputs; "
          f"accuracy {(out['logits'].argmax(1) == y_test).mean():.4f}")
    check(f"{name}: every code further than one step is explained by int16 pair saturation",
          agree["codes_beyond_one_step"] == agree["beyond_explained_by_int16_pairs"])
ops = R.fused_op_types(int8_proto)
print("tinymem int8 accuracy", (logits.argmax(1) == y_test).mean(), "; ORT runs", ops)
check("the fused graph runs integer GEMMs (QGemm), and a float Gemm is left", "QGemm" in ops and "Gemm" in ops)

# %% [markdown]
# ## 3. Inference memory, layer by layer
#
# On a microcontroller a CNN runs one layer at a time at batch 1, BatchNorm folded into the
# convolution (`edge.chain`), weights in flash. Without backward nothing is kept for later:
# while a layer runs, its input, its output and its scratch are alive, and the step before's
# maps are gone. `edge.inference_peak` measures each with the ledger (exercise 3 derives the
# peak from the shapes alone). tinymem's edge layers use a *direct* convolution (bias, then one
# product per input channel and kernel offset, added in a fixed order), which makes tiling
# exact (below); its workspace is a zero-padded copy of the input plus one output-sized product.

# %%
unet = models.UNet(1, 4, base=8, depth=4)
encoder = edge.unet_encoder(unet)
size = 64 if QUICK else 256
x = np.random.default_rng(0).standard_normal((1, 1, size, size)).astype(np.float32)
whole = edge.inference_peak(encoder, x.shape, x)
for row in whole["layers"]:
    print(f"{row['name']:28s} in {row['input'] / 1024:7.0f} KiB  out {row['output'] / 1024:7.0f} KiB  "
          f"workspace {row['workspace'] / 1024:7.0f} KiB  -> {row['peak'] / 1024:7.0f} KiB")
print(f"peak layer by layer: {whole['peak'] / 1024:,.0f} KiB")
first = whole["layers"][0]  # a 3 x 3 convolution, padding 1, from 1 channel
check(f"the first convolution's workspace is its padded input plus one output-sized product "
      f"({first['workspace']:,} B = {first['output']:,} + {(size + 2) ** 2 * 4:,})",
      first["workspace"] == first["output"] + (size + 2) ** 2 * 4)

# %% [markdown]
# ## 4. Patch-based inference
#
# The first layers hold the biggest maps. Run them on one tile of the stage's output at a
# time: trace the tile back through each layer (which input rows does a kernel of size k, with
# stride s and padding p, read to make output rows [a, b)? exercise 2), compute only that
# region, and write the tile into the stage's output. The tile's region overlaps its
# neighbours' (the **halo**), so that part is computed more than once: in 2-D a tile's edges
# are shared with one neighbour and its corners with three, so a corner can be computed four
# times. Recomputation buys memory.

# %%
sizes = [size, size, size, size // 2, size // 2, size // 2, size // 4, size // 4, size // 4, size // 8]
tile = (0, size // 32)
print(f"output rows {tile} of the first 9 layers read input rows", trace_back(tile, encoder[:9], sizes)[0][:2])
predict("the first 9 layers run tile by tile, a 4 x 4 grid of tiles of their output. How much lower is "
        "the peak than layer by layer, and how much of those layers' work is done again?")

# %%
patch = edge.patch_inference(encoder, x, split=9, grid=4)
reveal(f"patch-based peak {patch['peak'] / 1024:,.0f} KiB ({whole['peak'] / patch['peak']:.1f}x lower), "
       f"recomputed halo work {100 * (patch['macs_patch'] / patch['macs_whole'] - 1):.0f}%",
       "tiles lower the peak and pay for it in recomputed work", patch["peak"] < whole["peak"]
       and patch["macs_patch"] > patch["macs_whole"])
check("outputs bit-identical to whole-layer execution", np.array_equal(patch["output"], whole["output"]))

# %% [markdown]
# ## 5. Does anything fit in 256 KiB?
#
# The title's question, answered from the committed figure run (full sizes: the U-Net encoder
# at 256 px, the small CNN at 128 px RGB): the lowest peak of each, layer by layer and
# patch-based (any stage length and grid tried), in float32 and with every map in int8 (a
# quarter of the bytes: a lower bound, since an int8 convolution still accumulates its
# products in int32, so an int8 bar under the line says "can fit", not "fits").

# %%
if (FIGURES / "data" / "edge.json").exists():
    fitting = []
    for name, m in read_records(FIGURES, "edge")["memory"].items():
        lowest = min(c["peak"] for c in m["configs"])
        for label, peak in (("layer by layer", m["whole_peak"]), ("patch-based", lowest)):
            print(f"{name:14s} {label:15s} float32 {peak / 1024:7,.0f} KiB, int8 {peak / 4 / 1024:6,.0f} KiB")
            fitting += [(name, label, dtype) for dtype, b in (("float32", peak), ("int8", peak / 4)) if b <= exp.SRAM]
    check(f"within 256 KiB, even at best: only the small CNN, patch-based, with int8 maps ({fitting})",
          fitting == [("small CNN", "patch-based", "int8")])

# %% [markdown]
# Only the small CNN can fit, and only patch-based with int8 maps (whether its int32
# accumulators still leave room is the next thing to measure). The U-Net's maps are too big
# even so: a microcontroller model is designed for its SRAM (MCUNet searches the architecture
# and the patch stage together), not cut down after.
#
# ## 6. The figures
#
# `python -m tinymem figures --only edge` writes `figures/edge_onnx.png` (size, accuracy,
# agreement, latency), `figures/edge_memory_profile.png` (per-layer memory, whole-layer against
# patch-based, with the 256 KB line) and `figures/edge_patch_tradeoff.png`. The committed run:

# %%
if (FIGURES / "data" / "edge.json").exists():
    records = read_records(FIGURES, "edge")
    for path in exp.plot(records, OUT):
        print("wrote", path)
    for row in records["onnx"]["latency"]:
        print(f"ORT {row['model']}, batch {row['batch']}: fp32 {row['fp32']['median'] * 1e6:,.0f} µs, "
              f"int8 {row['int8']['median'] * 1e6:,.0f} µs ({row['fp32']['median'] / row['int8']['median']:.1f}x)")
    for row in records["claims"]:
        print(f"claim {row['name']}: {'holds' if row['holds'] else row['holds']} ({row['value']})")

# %% [markdown]
# ## Pitfalls
#
# - **A tile must pad like the layer.** Where a tile's receptive field leaves the image, it gets
#   the layer's zero padding; elsewhere real neighbours. Mixing the two is the classic bug.
# - **BLAS is not order-stable.** A GEMM picks its summation order by matrix size, so an
#   im2col convolution of a tile can differ from the whole layer in the last bit; a fixed-order
#   (direct) convolution cannot.
# - **The stage's output is whole.** Patch-based inference keeps the input and the stage's
#   output entire; end the stage where the maps have become small.
# - **Fused int8 kernels round differently.** Requantizing from the int32 accumulator in one
#   step is not the same as dequantize, add bias, requantize. Check accuracy in the runtime you
#   deploy to, not only in the framework.
# - **int8 speed needs integer kernels and enough work.** A tiny layer at batch 1 is dominated
#   by overhead; the integer GEMM pays off on wide layers (`edge_onnx.png`).
#
# ## Exercises (`lessons/exercises/ex11.py`, check with `TINYMEM_EXERCISES=student python -m pytest -m exercise_11`)
#
# 1. `onnx_quantize_linear(x, scale, zero_point)`: ONNX's QuantizeLinear, to the bit.
# 2. `input_rows(a, b, layers)`: trace output rows back through (kernel, stride, padding) layers.
# 3. `layer_by_layer_peak(shapes)`: the per-layer peak from activation shapes.
# 4. `recomputed_fraction(size, tiles, layers)`: the halo work patch-based inference repeats.
