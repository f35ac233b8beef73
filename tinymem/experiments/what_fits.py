"""Figure: what fits where, by the closed form, and the closed form held against the ledger.

Left: models from GPT-2 to GPT-3 175B (rows) against GPU memory of 24, 40, 80 and 141 GB
(columns), 8 GPUs each; each cell is coloured by the cheapest technique stack that fits
(``planner.fits``: the fitting stack with the smallest modelled step time), or grey with the
fewest GPUs that would do. Right: one GPT-3 175B step per stack, bytes per GPU by bucket at the
step's peak, against the 80 GB line. These are formulas (:mod:`tinymem.planner.analytic`); the
run also trains tinymem's own TransformerLM one step per stack at a small size and records the
ledger beside the closed form, which the claims hold to the byte.
"""
from .. import plots
from ..measure.claims import Claim
from ..memory import BUCKETS
from ..planner import activations, analytic, architectures, exactness, fits
from ..planner.terms.analytic import Stack

NAME = "what_fits"
ORDER = 95
FIGURES = ["what_fits.png"]
MODELS = ["gpt2", "gpt2-xl", "gpt3-2.7b", "gpt3-6.7b", "llama-7b", "gpt3-13b", "llama-13b", "llama-65b",
          "gpt3-175b"]
MEMORIES_GB = [24, 40, 80, 141]
GPUS = 8
CHECKED = {"plain": Stack(), "bf16 + sqrt": Stack("bf16", recompute="sqrt"),
           "int8 + full + chunked": Stack(storage="int8", recompute="full", attention="chunked"),
           "Adam8bit + 2 micro-batches": Stack(optimizer="Adam8bit", micro_batches=2)}
EXACT = ("parameter", "gradient", "optimizer", "activation")


def run(quick=False, device="cpu"):
    grid = []
    for name in MODELS:
        arch = architectures.get_arch(name)
        for gb in MEMORIES_GB:
            rows, proposal = fits.plan_arch(arch, GPUS, gb * 1e9)
            able = [r for r in rows if r.fewest_gpus is not None and not r.refused]
            fewest = min(able, key=lambda r: (r.fewest_gpus, r.time)) if able else None
            grid.append({"model": name, "params": architectures.parameter_count(arch), "memory_gb": gb,
                         "stack": proposal.name if proposal else None,
                         "stack_fields": proposal.stack._asdict() if proposal else None,
                         "peak": proposal.breakdown.peak if proposal else None,
                         "time": proposal.time if proposal else None,
                         "fewest_gpus": fewest.fewest_gpus if fewest else None,
                         "fewest_stack": fewest.name if fewest else None})
    rows, _ = fits.plan_arch("gpt3-175b", GPUS, 80e9)
    bars = [{"stack": r.name, "moment": r.breakdown.moment, "buckets": r.breakdown.buckets,
             "at_peak": r.breakdown.moments[r.breakdown.moment], "peak": r.breakdown.peak,
             "host": r.breakdown.host, "fewest_gpus": r.fewest_gpus, "time": r.time,
             "refused": r.refused} for r in rows]
    paper = [{**row, "sbh": row["terms"] / (2048 * 12288)}
             for row in activations.korthikanti_table(2048, 1, 12288, 96, tensor_parallel=8)]
    sizes, batch = ((50, 8, 16, 2, 3), 4) if quick else ((64, 32, 48, 4, 4), 6)
    checked = []
    for label, stack in CHECKED.items():
        predicted, measured = exactness.compare(sizes, batch, stack, chunk_size=8)
        checked.append({"stack": label, "predicted": predicted.buckets, "ledger": measured["buckets"],
                        "predicted_peak": predicted.peak, "ledger_peak": measured["peak"],
                        "bound": analytic.transient_bound(architectures.tinymem_lm(*sizes), batch, stack, "numpy")})
    return {"config": {"gpus": GPUS, "memories_gb": MEMORIES_GB, "models": MODELS, "micro_batch": 1,
                       "checked_sizes": sizes, "checked_batch": batch, "mode": "tinymem"},
            "grid": grid, "gpt3_175b": bars, "korthikanti_gpt3": paper, "checked": checked}


def _exact_gap(records):
    worst = max(abs(c["predicted"][b] - c["ledger"][b]) for c in records["checked"] for b in EXACT)
    return worst, worst == 0


def _cell(records, model, gb):
    return next(c for c in records["grid"] if c["model"] == model and c["memory_gb"] == gb)


def _fewest_175b(records):
    cell = _cell(records, "gpt3-175b", 80)
    return cell["fewest_gpus"], cell["stack"] is None and cell["fewest_gpus"] > GPUS


CLAIMS = [
    Claim("closed_form_exact", "the closed form equals the ledger's parameter, gradient, optimizer and "
          "activation peaks of a real TransformerLM step (largest difference in bytes)", _exact_gap),
    Claim("peak_within_bound", "the closed-form peak is within its stated transient bound of the ledger's",
          lambda r: (max(abs(c["predicted_peak"] - c["ledger_peak"]) / c["bound"] for c in r["checked"]),
                     all(abs(c["predicted_peak"] - c["ledger_peak"]) <= c["bound"] for c in r["checked"]))),
    Claim("gpt3_needs_more_than_8", "GPT-3 175B fits no stack tinymem builds on 8 x 80 GB (fewest GPUs of any "
          "such stack; bf16 with ZeRO-Offload would fit, but tinymem cannot compose the two)",
          _fewest_175b),
    Claim("seven_b_fits_80", "a 7B model (LLaMA) fits 8 x 80 GB once the optimizer state is sharded",
          lambda r: (_cell(r, "llama-7b", 80)["stack"],
                     "ZeRO" in (_cell(r, "llama-7b", 80)["stack"] or ""))),
    Claim("korthikanti_gpt3", "a GPT-3 175B layer keeps 114·sbh bytes without recomputation (34 + 5as/h)",
          lambda r: (r["korthikanti_gpt3"][0]["sbh"], abs(r["korthikanti_gpt3"][0]["sbh"] - 114) < 1e-9)),
]
LEVELS = ["fp32", "bf16", "recompute", "ZeRO-1", "ZeRO-2", "ZeRO-3", "optimizer on the host", "pipeline",
          "tensor parallel"]


def _level(fields):
    """The colour of a stack: how far it had to go (the last technique of :data:`LEVELS` it uses)."""
    if fields.get("tensor", 1) > 1:
        return len(LEVELS) - 1
    if fields["pipeline"] > 1:
        return LEVELS.index("pipeline")
    if fields["offload"]:
        return LEVELS.index("optimizer on the host")
    if fields["zero"]:
        return LEVELS.index(f"ZeRO-{fields['zero']}")
    if fields["recompute"] != "none":
        return LEVELS.index("recompute")
    return LEVELS.index("bf16") if fields["precision"] != "fp32" else 0


SHORT = ((" recompute", ""), ("optimizer on the host", "offload"), ("pure bf16 (no masters)", "pure bf16"),
         ("8-bit Adam", "Adam8"), ("tensor x", "TP"), (" + sequence parallel", "+SP"), ("1F1B pipeline x", "PP"),
         ("data x", "DP"))


def _short(name):
    """A stack's name short enough for a cell."""
    for long, short in SHORT:
        name = name.replace(long, short)
    return name


def plot(records, outdir):
    import matplotlib.colors as mcolors

    fig, (ax, axb) = plots.new_figure(ncols=2, width=7.6, height=7.6)
    colors = [mcolors.to_hex(c) for c in plots.plt.cm.viridis_r([i / (len(LEVELS) - 1) for i in range(len(LEVELS))])]
    models = records["config"]["models"]
    memories = records["config"]["memories_gb"]
    for i, model in enumerate(models):
        for j, gb in enumerate(memories):
            cell = _cell(records, model, gb)
            level = _level(cell["stack_fields"]) if cell["stack"] else None
            ax.add_patch(plots.plt.Rectangle((j, i), 1, 1, color="#d9d9d9" if level is None else colors[level],
                                             ec="white"))
            short = _short(cell["stack"]) if cell["stack"] else ""
            parts = short.split(", ")  # two techniques a line, then the time
            text = ("\n".join(", ".join(parts[k:k + 2]) for k in range(0, len(parts), 2))
                    + f"\nx{cell['time']:.2f} time" if cell["stack"] else
                    f"needs {cell['fewest_gpus']}\nGPUs" if cell["fewest_gpus"] else "no stack")
            dark = level is not None and level >= len(LEVELS) // 2
            ax.text(j + 0.5, i + 0.5, text, ha="center", va="center", fontsize=plots.MIN_FONT,
                    color="white" if dark else "black", gid=plots.INSIDE)
    ax.set_xlim(0, len(memories))
    ax.set_ylim(0, len(models))
    ax.set_xticks([j + 0.5 for j in range(len(memories))])
    ax.set_xticklabels([f"{gb} GB" for gb in memories])
    ax.set_yticks([i + 0.5 for i in range(len(models))])
    params = {c["model"]: c["params"] for c in records["grid"]}
    ax.set_yticklabels([f"{m} ({params[m] / 1e9:.1f}B)" for m in models])
    ax.set_xlabel(f"memory per GPU ({records['config']['gpus']} GPUs)")
    ax.set_title("cheapest stack that fits (closed form, micro-batch 1; time vs fp32)", fontsize=9)
    used = sorted({_level(c["stack_fields"]) for c in records["grid"] if c["stack"]})
    handles = [plots.plt.Rectangle((0, 0), 1, 1, color=colors[i]) for i in used]
    ax.legend(handles, [LEVELS[i] for i in used], loc="upper left", bbox_to_anchor=(0, -0.09), ncol=4,
              frameon=False)
    _peak_bars(axb, records)
    return [plots.save(fig, records, outdir, FIGURES[0])]


def _peak_bars(axb, records):
    """One bar per stack: the buckets at the step's peak, stacked, so a bar's height is the peak
    (on a log axis, where 80 GB and 3,000 GB both show). Each bar's peak and fewest GPUs are
    written up the bar, from its foot: above the bars, rotated, they stretched the axis to 10^7."""
    bars = records["gpt3_175b"]
    floor = 1.0  # GB: the log axis starts here; a bucket below it does not show
    for k, row in enumerate(bars):
        bottom = floor
        for b in BUCKETS:
            height = row["at_peak"][b] / 1e9
            axb.bar(k, height, bottom=bottom, color=plots.BUCKET_COLORS[b], width=0.7, label=b if k == 0 else None)
            bottom += height
        need = "never" if row["fewest_gpus"] is None else f"{row['fewest_gpus']} GPUs"
        if row.get("refused"):
            need += " (not built)"
        axb.text(k, floor * 1.25, f"{row['peak'] / 1e9:.0f} GB, {need}", ha="center", va="bottom", rotation=90,
                 fontsize=plots.MIN_FONT, color="white", gid=plots.INSIDE)
    axb.axhline(80, color="#d62728", ls="--", lw=0.9, label="80 GB per GPU")
    axb.set_yscale("log")
    axb.set_ylim(floor, max(r["peak"] for r in bars) / 1e9 * 4)  # room for the legend above the bars
    axb.set_xticks(range(len(bars)))
    axb.set_xticklabels([r["stack"] for r in bars], rotation=35, ha="right", rotation_mode="anchor", fontsize=plots.MIN_FONT)
    axb.set_ylabel("GB per GPU at the step's peak (log), split by bucket")
    axb.set_title(f"GPT-3 175B, one step on {records['config']['gpus']} GPUs per stack, "
                  "and the fewest GPUs it needs", fontsize=9)
    axb.legend(loc="upper right", ncol=3)
