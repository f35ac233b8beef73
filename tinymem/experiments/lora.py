"""Figures: fine-tuning what does not fit, LoRA and QLoRA against full fine-tuning.

The task: the course's TransformerLM is pretrained on Python's documentation (English prose),
then fine-tuned on the source code of a few standard-library modules (same characters, another
language), five ways: every weight (full), LoRA at r = 4, 8, 16 and QLoRA at r = 8 (weights of
the adapted Linears in NF4 with double-quantized scales). Adapters go on every Linear (the
attention's output projection, both MLP layers, the head); everything else is frozen, including
the attention's fused q/k/v projection, which is not a Linear. Full fine-tuning uses Adam at
lr 1e-3, the adapters lr 3e-3 (a few times higher, the usual LoRA practice), alpha = 2r;
chosen before the runs, not tuned.

Memory is measured on a wider model (d = 256, 4 blocks) where weights matter: one training step
each, the ledger's peak by bucket and the allocator's growth (tracemalloc, or CuPy's pool).
Last, the bytes per weight of a 1024 x 1024 frozen weight stored five ways, from the arrays.
"""
import gc
import math
import time

import numpy as np

from .. import backend, data, memory, models, optim, random
from ..autograd import no_grad
from ..measure.claims import Claim
from ..measure.timing import one_blas_thread
from ..nn import Linear
from ..techniques.lora import NF4Linear, apply_lora, apply_qlora, lora_modules, trainable_parameters
from ..techniques.precision import get_format
from ..techniques.quantization import PerChannelMinMaxObserver, quantize
from .lora_plots import draw, label, run_of, step_of

NAME = "lora"
ORDER = 55
FIGURES = ["lora_memory.png", "lora_quality.png", "lora_bytes_per_weight.png"]

METHODS = (("full", None), ("LoRA", 4), ("LoRA", 8), ("LoRA", 16), ("QLoRA", 8))
LR = {"full": 1e-3, "LoRA": 3e-3, "QLoRA": 3e-3}
SMALL = dict(d_model=64, n_heads=4, n_layers=2)   # the course's LM: trained
WIDE = dict(d_model=256, n_heads=4, n_layers=4)   # memory only: one step


def prepare(model, method, r):
    """Apply ``method`` to ``model`` in place; returns the parameters to train."""
    if method == "LoRA":
        apply_lora(model, r, alpha=2 * r)
    elif method == "QLoRA":
        apply_qlora(model, r, alpha=2 * r)
    return trainable_parameters(model)


def train(model, params, lr, steps, ids, batch, context, seed, val=None, log_every=None):
    """Adam on ``params`` with a cosine decay from lr to lr/10; returns the validation curve."""
    opt = optim.Adam(params, lr=lr)
    rng, curve = np.random.default_rng(seed), []
    for step in range(steps + 1):
        if val is not None and (step % log_every == 0 or step == steps):
            curve.append({"step": step, "val_loss": evaluate(model, val)})
        if step == steps:
            return curve
        opt.param_groups[0]["lr"] = lr * (0.1 + 0.45 * (1 + math.cos(math.pi * step / steps)))
        x, y = data.random_windows(ids, batch, context, rng)
        opt.zero_grad()
        model.loss(x, y).backward()
        opt.step()


def evaluate(model, windows):
    with no_grad():
        return float(np.mean([model.loss(x, y).item() for x, y in windows]))


def _windows(ids, n, batch, context, seed):
    rng = np.random.default_rng(seed)
    return [data.random_windows(ids, batch, context, rng) for _ in range(n)]


def finetune_sweep(quick, device):
    """Pretrain once, then fine-tune a copy of the pretrained weights with each method."""
    steps_pre, steps_ft = (150, 60) if quick else (1500, 500)
    batch, context = (16, 32) if quick else (32, 64)
    train_ids, _, vocab = data.load_python_docs()
    ft_train, ft_val = data.load_python_source(vocab)
    val = _windows(ft_val, 4 if quick else 16, 32, context, seed=1)
    random.manual_seed(0)
    model = models.TransformerLM(len(vocab), context, **SMALL, device=device)
    start = time.perf_counter()
    train(model, model.parameters(), 3e-3, steps_pre, train_ids, batch, context, seed=0)
    pretrained = model.state_dict()
    runs = [{"method": "pretrained", "r": None, "trainable": 0, "val_loss": evaluate(model, val),
             "seconds": time.perf_counter() - start}]
    for method, r in METHODS:
        random.manual_seed(1)
        model = models.TransformerLM(len(vocab), context, **SMALL, device=device)
        model.load_state_dict(pretrained)
        params = prepare(model, method, r)
        start = time.perf_counter()
        curve = train(model, params, LR[method], steps_ft, ft_train, batch, context, seed=2, val=val,
                      log_every=max(1, steps_ft // 10))
        runs.append({"method": method, "r": r, "trainable": sum(p.size for p in params),
                     "frozen": sum(p.size for p in model.parameters() if not p.requires_grad),
                     "val_loss": curve[-1]["val_loss"], "curve": curve, "seconds": time.perf_counter() - start})
        print(f"{label(method, r):>10}: val loss {curve[-1]['val_loss']:.4f} nats/char, "
              f"{runs[-1]['trainable']:,d} trainable")
    config = {"model": SMALL, "vocab_size": len(vocab), "context": context, "batch": batch,
              "pretrain_steps": steps_pre, "finetune_steps": steps_ft, "lr": LR, "alpha": "2r",
              "pretrain_text": "pydoc_data.topics", "finetune_text": list(data.text.SOURCE_MODULES),
              "finetune_chars": int(len(ft_train))}
    return config, runs


def memory_step(method, r, vocab_size, batch, context, device):
    """One Adam step of the wide model after a first one (the state exists): the ledger's peak by
    bucket, the bytes live on entry, and the allocator's growth against the ledger's."""
    gc.collect()
    random.manual_seed(0)
    model = models.TransformerLM(vocab_size, context, **WIDE, device=device)
    params = prepare(model, method, r)
    opt = optim.Adam(params, lr=1e-3)
    rng = np.random.default_rng(0)

    def step():
        x, y = data.random_windows(np.arange(vocab_size).repeat(4 * context), batch, context, rng)
        opt.zero_grad()
        model.loss(x, y).backward()
        opt.step()

    step()
    opt.zero_grad()
    gc.collect()
    with memory.track(device=device) as t:
        step()
    dequantized = max((4 * m.in_features * m.out_features for _, m in lora_modules(model)
                       if isinstance(m.base, NF4Linear)), default=0)
    return {"method": method, "r": r, "peak": t.peak(), "peak_by_bucket": t.peak_by_bucket(),
            "start": t.start, "peak_delta": t.peak_delta(), "measured_peak": t.measured_peak(),
            "trainable_bytes": sum(p.nbytes for p in params), "largest_dequantized": dequantized,
            "nf4_weight_live_max": _most_alive(t.timeline(), "nf4 weight")}


def _most_alive(timeline, name):
    live = most = 0
    for e in timeline:
        if e["label"] == name and e["kind"] != "mark":
            live += e["bytes"] if e["kind"] == "alloc" else -e["bytes"]
            most = max(most, live)
    return most


def frozen_formats(shape=(1024, 1024)):
    """Bytes per weight of one frozen weight stored as fp32, bf16, int8 (per output channel,
    float32 scales), NF4 and NF4 with double quantization, summed from the stored arrays."""
    random.manual_seed(0)
    linear = Linear(shape[1], shape[0])
    w, n = linear.weight.data, linear.weight.size
    observer = PerChannelMinMaxObserver(ch_axis=0, dtype="qint8", qscheme="per_channel_symmetric")
    observer(w)
    scale, zero = observer.calculate_qparams()
    stored = {"fp32": [w], "bf16": [get_format("bfloat16").encode(w)],
              "int8": [quantize(w, scale, zero, "qint8", axis=0), backend.to_numpy(scale).astype(np.float32)],
              "NF4": list(NF4Linear.from_linear(linear, double_quant=False).stored().values()),
              "NF4 + double quant.": list(NF4Linear.from_linear(linear).stored().values())}
    return {"shape": list(shape),
            "bytes_per_weight": {k: sum(a.nbytes for a in arrays) / n for k, arrays in stored.items()}}


def run(quick=False, device="cpu"):
    with one_blas_thread():  # tiny matrices: a second BLAS thread only waits (see one_blas_thread)
        config, runs = finetune_sweep(quick, device)
        steps = [memory_step(method, r, config["vocab_size"], 4, 64, device) for method, r in METHODS]
    return {"config": dict(config, memory_model=WIDE, memory_batch=4, memory_context=64),
            "finetune": runs, "memory": steps, "formats": frozen_formats()}


# -- claims ------------------------------------------------------------------------------------
def _ratio(r, a, b):
    return run_of(r, *a)["val_loss"] / run_of(r, *b)["val_loss"]


def _allocator_gap(r):
    gaps = [abs(s["measured_peak"] - s["peak_delta"]) / s["peak_delta"] for s in r["memory"]]
    return max(gaps), max(gaps) <= 0.1


def _frozen_without_state(r):
    """Gradient and optimizer bytes at LoRA r=8's peak, over its adapters' bytes (1 and 2)."""
    s = step_of(r, "LoRA", 8)
    g, o = s["peak_by_bucket"]["gradient"] / s["trainable_bytes"], s["peak_by_bucket"]["optimizer"] / s["trainable_bytes"]
    return f"{g:g}, {o:g}", g <= 1 and o == 2


def _peaks_fall(r):
    peaks = [step_of(r, *m)["peak"] for m in (("full",), ("LoRA", 8), ("QLoRA", 8))]
    return peaks[2] / peaks[0], peaks[0] > peaks[1] > peaks[2]


CLAIMS = [
    Claim("finetuning_helps", "every method lowers the pretrained model's validation loss on the new text",
          lambda r: (lambda worst: (worst, worst < run_of(r, "pretrained")["val_loss"]))(
              max(x["val_loss"] for x in r["finetune"] if x["method"] != "pretrained"))),
    Claim("lora8_within_5pct_of_full", "LoRA r=8 reaches within 5% of full fine-tuning's validation loss",
          lambda r: (lambda v: (v, v <= 1.05))(_ratio(r, ("LoRA", 8), ("full", None))), modes=("full",)),
    Claim("qlora_within_2pct_of_lora", "QLoRA r=8 reaches within 2% of LoRA r=8's validation loss",
          lambda r: (lambda v: (v, v <= 1.02))(_ratio(r, ("QLoRA", 8), ("LoRA", 8))), modes=("full",)),
    Claim("frozen_weights_no_grad_no_state", "with LoRA the frozen weights have no gradient and no "
          "optimizer state: at the peak, gradient <= 1x and optimizer = 2x the adapters' bytes (Adam)",
          _frozen_without_state),
    Claim("peaks_fall", "a step's peak falls from full fine-tuning to LoRA to QLoRA (QLoRA/full shown)", _peaks_fall),
    Claim("one_dequantized_layer", "QLoRA holds one layer's dequantized weight at a time (most alive = largest layer's)",
          lambda r: (lambda s: (s["nf4_weight_live_max"], s["nf4_weight_live_max"] == s["largest_dequantized"] > 0))(
              step_of(r, "QLoRA", 8))),
    Claim("double_quant_bits", "NF4 with double quantization stores 4.127 bits per weight (from the arrays)",
          lambda r: (lambda b: (b, abs(b - 4.127) < 1e-3))(8 * r["formats"]["bytes_per_weight"]["NF4 + double quant."])),
    Claim("ledger_matches_allocator", "the ledger's step peak is within 10% of the allocator's for every method",
          _allocator_gap),
]


def plot(records, outdir):
    return draw(records, outdir, FIGURES)
