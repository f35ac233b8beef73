"""Figure: activation memory against sequence length, plain vs chunked attention, and the tiny
language model trained on Python's own documentation.

Left: the bytes one causal attention call saves for backward (the ledger), B=1, 4 heads of
size 16 (the tiny LM's shape), chunks of 128. Plain attention keeps the (L, L) weights per
head, so its line bends up quadratically; chunked attention keeps q, k, v, the output and one
log-sum-exp per row, a straight line. Then the peak of forward + backward above entry, from
the ledger and from the allocator (tracemalloc), and its time (taken in turns: median and
interquartile range). Last: validation loss of the character-level TransformerLM against the
unigram baseline.
"""
import math
import time

import numpy as np

from .. import data, memory, models, optim, plots, random
from .. import functional as F
from ..autograd import Tensor, no_grad
from ..measure.claims import IN_TURNS, Claim, slower_in_turns
from ..measure.timing import interleaved_samples, one_blas_thread, spread

NAME = "workload_seq_len"
ORDER = 61
FIGURES = ["workload_seq_len.png"]

HEADS, HEAD_DIM, CHUNK = 4, 16, 128
IMPLS = {"plain": lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
         "chunked": lambda q, k, v: F.chunked_attention(q, k, v, CHUNK, is_causal=True)}


def _qkv(L, device):
    return [random.randn((1, HEADS, L, HEAD_DIM), device) for _ in range(3)]


def _attention_point(impl, L, device, arrays=None, g=None):
    fn = IMPLS[impl]
    arrays = _qkv(L, device) if arrays is None else arrays
    g = random.randn((1, HEADS, L, HEAD_DIM), device) if g is None else g

    def step():
        q, k, v = (Tensor(a, requires_grad=True) for a in arrays)
        fn(q, k, v).backward(g)

    q, k, v = (Tensor(a, requires_grad=True) for a in arrays)
    with memory.track(device=device) as t:
        out = fn(q, k, v)
        saved = memory.live_bytes("activation")
        out.backward(g)
        result = out.numpy()
        del out
    return {"impl": impl, "L": L, "saved_bytes": saved, "peak_delta": t.peak_delta(),
            "measured_peak": t.measured_peak(), "step": step, "output": result}


def _attention_sweep(lengths, device, repeats=9):
    """Both implementations at each length: saved bytes, peaks, the largest difference of their
    outputs, and forward + backward timed in turns on one BLAS thread, as CPU time (other jobs
    on a shared machine do not count) (``samples``; ``seconds`` is their median)."""
    points = []
    for L in lengths:
        arrays, g = _qkv(L, device), random.randn((1, HEADS, L, HEAD_DIM), device)
        row = {impl: _attention_point(impl, L, device, arrays, g) for impl in IMPLS}
        difference = float(np.abs(row["chunked"].pop("output") - row["plain"].pop("output")).max())
        with one_blas_thread():  # a second BLAS thread waits for a core at random on a shared machine
            samples = interleaved_samples({impl: row[impl].pop("step") for impl in IMPLS}, repeats=repeats,
                                          clock=time.process_time)
        for impl in IMPLS:
            row[impl].update(samples=samples[impl], seconds=spread(samples[impl])["median"],
                             max_abs_difference=difference)
            points.append(row[impl])
    return points


def train_lm(steps, batch_size=32, context=64, device=None, log_every=25, seed=0, lr=3e-3):
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
    points = _attention_sweep(lengths, device, repeats=5 if quick else 11)
    lm = train_lm(30 if quick else 600, batch_size=16 if quick else 32, device=device,
                  log_every=10 if quick else 50)
    print(f"tiny LM: val loss {lm['val_loss']:.3f} nats/char vs unigram {lm['unigram_loss']:.3f}\n"
          f"sample: {lm['sample']!r}")
    return {"config": {"heads": HEADS, "head_dim": HEAD_DIM, "chunk_size": CHUNK, "batch": 1,
                       "causal": True, "dtype": "float32"},
            "attention": points, "lm": lm}


def _points(r, impl):
    return sorted((p for p in r["attention"] if p["impl"] == impl), key=lambda p: p["L"])


def _growth(r, impl):
    """Saved bytes at the largest L over those at half of it (4 for quadratic, 2 for linear)."""
    pts = _points(r, impl)
    return pts[-1]["saved_bytes"] / pts[-2]["saved_bytes"]


def _at(r, impl, L):
    return next(p for p in r["attention"] if p["impl"] == impl and p["L"] == L)


def crossover(r):
    """The smallest L from which chunked's median time is below plain's at every larger L
    (None if it never is)."""
    found = None
    for plain, chunked in reversed(list(zip(_points(r, "plain"), _points(r, "chunked")))):
        if chunked["seconds"] >= plain["seconds"]:
            break
        found = plain["L"]
    return found


def _extra_blocks(r):
    """What chunked's measured peak exceeds plain's by at the smallest L, in (chunk x chunk)
    float32 score blocks for all heads: the online softmax's bookkeeping."""
    L = _points(r, "plain")[0]["L"]
    extra = _at(r, "chunked", L)["measured_peak"] - _at(r, "plain", L)["measured_peak"]
    return L, extra / (4 * r["config"]["heads"] * r["config"]["chunk_size"] ** 2)


def _faster_at_largest(r):
    L = _points(r, "plain")[-1]["L"]
    plain, chunked = _at(r, "plain", L), _at(r, "chunked", L)
    return slower_in_turns(plain["samples"], chunked["samples"])


CLAIMS = [
    Claim("plain_quadratic", "plain attention's saved bytes grow quadratically (x >= 3.5 per doubling of L at the largest L)",
          lambda r: (_growth(r, "plain"), _growth(r, "plain") >= 3.5)),
    Claim("chunked_linear", "chunked attention's saved bytes grow linearly (x 2 +- 5% per doubling of L)",
          lambda r: (_growth(r, "chunked"), abs(_growth(r, "chunked") - 2) <= 0.1)),
    Claim("chunked_ratio_1024", "at L = 1024 chunked attention saves <= 0.07x the bytes of plain attention",
          lambda r: (lambda v: (v, v <= 0.07))(_at(r, "chunked", 1024)["saved_bytes"] / _at(r, "plain", 1024)["saved_bytes"])),
    Claim("same_output", "chunked attention gives plain attention's output (max abs difference < 1e-5)",
          lambda r: (lambda v: (v, v < 1e-5))(max(p["max_abs_difference"] for p in r["attention"]))),
    Claim("chunked_faster_at_largest_L", f"at the largest L chunked attention is faster than plain, {IN_TURNS}",
          _faster_at_largest, modes=("full",)),
    Claim("lm_beats_unigram", "the tiny LM's validation loss is below the unigram baseline",
          lambda r: (r["lm"]["val_loss"] - r["lm"]["unigram_loss"], r["lm"]["val_loss"] < r["lm"]["unigram_loss"])),
    Claim("lm_learns", "the tiny LM learns: validation loss >= 1 nat per character below the unigram baseline",
          lambda r: (r["lm"]["unigram_loss"] - r["lm"]["val_loss"], r["lm"]["unigram_loss"] - r["lm"]["val_loss"] >= 1),
          modes=("full",)),
]


def plot(records, outdir):
    fig, axes = plots.new_figure(ncols=2, nrows=2, width=5.0, height=3.9)
    ax_saved, ax_peak, ax_time, ax_lm = axes
    colors = {"plain": "#c44e52", "chunked": "#4c72b0"}
    mib = 2.0 ** 20
    cfg = records["config"]
    for impl in IMPLS:
        pts = _points(records, impl)
        Ls = [p["L"] for p in pts]
        ax_saved.plot(Ls, [p["saved_bytes"] / mib for p in pts], "o-", color=colors[impl], label=impl)
        ax_peak.plot(Ls, [p["peak_delta"] / mib for p in pts], "o-", color=colors[impl], label=f"{impl}: ledger")
        ax_peak.plot(Ls, [p["measured_peak"] / mib for p in pts], "x--", color=colors[impl],
                     label=f"{impl}: allocator")
        plots.timing_line(ax_time, Ls, [p["samples"] for p in pts], fmt="o-", color=colors[impl], label=impl)
    largest = _points(records, "plain")[-1]["L"]
    ratio = _at(records, "chunked", 1024)["saved_bytes"] / _at(records, "plain", 1024)["saved_bytes"]
    ax_saved.set_title(f"saved for backward (ledger)\nL=1024: chunked/plain = {ratio:.3f}")
    L0, blocks = _extra_blocks(records)
    ax_peak.set_title(f"peak of forward + backward\nL={L0}: chunked +{blocks:.1f} score blocks (bookkeeping)")
    ax_time.set_title(f"forward + backward, 1 BLAS thread (median, IQR)\nchunked {_at(records, 'chunked', largest)['seconds'] / _at(records, 'plain', largest)['seconds']:.2f}x plain at L={largest}")
    for ax in (ax_saved, ax_peak, ax_time):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("sequence length L")
        ax.legend(loc="upper left")
    for ax in (ax_saved, ax_peak):
        ax.set_yscale("log")
        ax.set_ylabel("MiB (log)")
    ax_time.set_ylabel("CPU time (ms)")
    ax_time.set_ylim(bottom=0)
    lm = records["lm"]
    ax_lm.plot([c["step"] for c in lm["curve"]], [c["val_loss"] for c in lm["curve"]], "o-",
               color="#55a868", label="TransformerLM (validation)")
    ax_lm.axhline(lm["unigram_loss"], color="k", ls="--", lw=0.8, label="unigram baseline").set_gid(plots.BACKGROUND)
    ax_lm.set_ylim(0, max(c["val_loss"] for c in lm["curve"]) * 1.25)
    ax_lm.set_xlabel("training step")
    ax_lm.set_ylabel("cross-entropy (nats per character)")
    ax_lm.set_title(f"tiny LM on pydoc_data.topics, {lm['parameters']:,d} parameters\n"
                    f"final {lm['val_loss']:.2f} vs unigram {lm['unigram_loss']:.2f}")
    ax_lm.legend(loc="lower left")
    fig.suptitle(f"Causal attention, batch {cfg['batch']}, {cfg['heads']} heads x {cfg['head_dim']}, "
                 f"chunks of {cfg['chunk_size']}, float32")
    cross = crossover(records)
    note = ("What to see: plain attention's saved bytes bend up (quadratic: it keeps the L x L weights), chunked's "
            "grow in a straight line; at one chunk (L <= chunk) chunked does plain's work plus the online softmax's "
            "running max, sum and rescaled output, so its allocator peak is higher there. Chunked is faster "
            + (f"from L = {cross} on, on this CPU." if cross else "at no length measured here, on this CPU."))
    return [plots.save(fig, records, outdir, FIGURES[0], note=note)]
