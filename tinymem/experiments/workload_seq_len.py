"""Figure: activation memory against sequence length, plain vs chunked attention, and the tiny
language model trained on Python's own documentation.

Left: the bytes one causal attention call saves for backward (the ledger), B=1, 4 heads of
size 16 (the tiny LM's shape), chunks of 128. Plain attention keeps the (L, L) weights per
head, so its line bends up quadratically; chunked attention keeps q, k, v, the output and one
log-sum-exp per row, a straight line. Then the peak of forward + backward above entry, from
the ledger and from the allocator (tracemalloc), and its time. Right: validation loss of the
character-level TransformerLM against the unigram baseline.
"""
import math
import time

import numpy as np

from .. import data, memory, models, optim, plots, random
from .. import functional as F
from ..autograd import Tensor, no_grad
from ..measure.timing import interleaved_times

NAME = "workload_seq_len"
ORDER = 61
FIGURES = ["workload_seq_len.png"]

HEADS, HEAD_DIM, CHUNK = 4, 16, 128
IMPLS = {"plain": lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
         "chunked": lambda q, k, v: F.chunked_attention(q, k, v, CHUNK, is_causal=True)}


def _qkv(L, device):
    return [random.randn((1, HEADS, L, HEAD_DIM), device) for _ in range(3)]


def _attention_point(impl, L, device):
    fn = IMPLS[impl]
    arrays = _qkv(L, device)
    g = random.randn((1, HEADS, L, HEAD_DIM), device)

    def step():
        q, k, v = (Tensor(a, requires_grad=True) for a in arrays)
        fn(q, k, v).backward(g)

    q, k, v = (Tensor(a, requires_grad=True) for a in arrays)
    with memory.track(device=device) as t:
        out = fn(q, k, v)
        saved = memory.live_bytes("activation")
        out.backward(g)
        del out
    return {"impl": impl, "L": L, "saved_bytes": saved, "peak_delta": t.peak_delta(),
            "measured_peak": t.measured_peak(), "step": step}


def _attention_sweep(lengths, device):
    points = []
    for L in lengths:
        row = {impl: _attention_point(impl, L, device) for impl in IMPLS}
        times = interleaved_times({impl: row[impl].pop("step") for impl in IMPLS}, repeats=3)
        for impl in IMPLS:
            row[impl]["seconds"] = times[impl]
            points.append(row[impl])
    return points


def train_lm(steps, batch_size=32, context=64, device="cpu", log_every=25, seed=0, lr=3e-3):
    """Train the tiny character LM on ``pydoc_data.topics`` with Adam, the learning rate
    decaying from ``lr`` to lr/10 on a cosine; returns the records of the run and a sample
    (temperature 0.6)."""
    random.manual_seed(seed)
    train_ids, val_ids, vocab = data.load_python_docs()
    model = models.TransformerLM(len(vocab), context, d_model=64, n_heads=HEADS, n_layers=2).to(device)
    opt = optim.Adam(model.parameters(), lr=lr)
    rng = np.random.default_rng(seed)
    val_x, val_y = data.random_windows(val_ids, 64, context, np.random.default_rng(seed + 1))
    curve, start = [], time.perf_counter()
    for step in range(steps + 1):
        if step % log_every == 0 or step == steps:
            with no_grad():
                curve.append({"step": step, "val_loss": model.loss(val_x, val_y).item()})
        if step == steps:
            break
        opt.param_groups[0]["lr"] = lr * (0.1 + 0.45 * (1 + math.cos(math.pi * step / steps)))
        x, y = data.random_windows(train_ids, batch_size, context, rng)
        opt.zero_grad()
        model.loss(x, y).backward()
        opt.step()
    sample = vocab.decode(model.generate(vocab.encode("The "), 240, temperature=0.6, seed=seed))
    return {"steps": steps, "batch_size": batch_size, "context": context, "curve": curve,
            "val_loss": curve[-1]["val_loss"], "unigram_loss": data.unigram_loss(train_ids, val_ids, len(vocab)),
            "sample": sample, "seconds": time.perf_counter() - start,
            "parameters": model.num_parameters(), "vocab_size": len(vocab)}


def run(quick=False, device="cpu"):
    random.manual_seed(0)
    lengths = [128, 256, 512, 1024] if quick else [128, 256, 512, 1024, 2048]
    points = _attention_sweep(lengths, device)
    lm = train_lm(30 if quick else 600, batch_size=16 if quick else 32, device=device,
                  log_every=10 if quick else 50)
    print(f"tiny LM: val loss {lm['val_loss']:.3f} nats/char vs unigram {lm['unigram_loss']:.3f}\n"
          f"sample: {lm['sample']!r}")
    return {"config": {"heads": HEADS, "head_dim": HEAD_DIM, "chunk_size": CHUNK, "batch": 1,
                       "causal": True, "dtype": "float32"},
            "attention": points, "lm": lm}


def plot(records, outdir):
    fig, (ax_saved, ax_peak, ax_time, ax_lm) = plots.new_figure(ncols=4, width=4.2, height=4.0)
    colors = {"plain": "#c44e52", "chunked": "#4c72b0"}
    mib = 2.0 ** 20
    for impl in IMPLS:
        pts = [p for p in records["attention"] if p["impl"] == impl]
        Ls = [p["L"] for p in pts]
        ax_saved.plot(Ls, [p["saved_bytes"] / mib for p in pts], "o-", color=colors[impl], label=impl)
        ax_peak.plot(Ls, [p["peak_delta"] / mib for p in pts], "o-", color=colors[impl],
                     label=f"{impl}: ledger")
        ax_peak.plot(Ls, [p["measured_peak"] / mib for p in pts], "x--", color=colors[impl],
                     label=f"{impl}: measured")
        ax_time.plot(Ls, [p["seconds"] * 1e3 for p in pts], "o-", color=colors[impl], label=impl)
    last = {p["impl"]: p for p in records["attention"] if p["L"] == 1024}
    if len(last) == 2:
        ratio = last["chunked"]["saved_bytes"] / last["plain"]["saved_bytes"]
        ax_saved.annotate(f"L=1024: chunked/plain = {ratio:.3f}", (1024, last["chunked"]["saved_bytes"] / mib),
                          textcoords="offset points", xytext=(-80, 25), fontsize=7)
    cfg = records["config"]
    for ax, title in ((ax_saved, "saved for backward (ledger)"), (ax_peak, "peak of forward+backward"),
                      (ax_time, "time of forward+backward (best of 3)")):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("sequence length L")
        ax.set_ylabel("ms" if ax is ax_time else "MiB")
        ax.set_title(f"{title}\ncausal attention, {cfg['heads']} heads x {cfg['head_dim']}, chunk {cfg['chunk_size']}",
                     fontsize=8)
        ax.legend(fontsize=7)
    lm = records["lm"]
    ax_lm.plot([c["step"] for c in lm["curve"]], [c["val_loss"] for c in lm["curve"]], "o-",
               color="#55a868", label="TransformerLM (validation)")
    ax_lm.axhline(lm["unigram_loss"], color="k", ls="--", lw=0.8, label="unigram baseline")
    ax_lm.set_xlabel("training step")
    ax_lm.set_ylabel("cross-entropy (nats per character)")
    ax_lm.set_title(f"tiny LM on pydoc_data.topics: {lm['parameters']:,d} parameters\n"
                    f"final {lm['val_loss']:.2f} vs unigram {lm['unigram_loss']:.2f}", fontsize=8)
    ax_lm.legend(fontsize=7)
    return [plots.save(fig, records, outdir, FIGURES[0])]
