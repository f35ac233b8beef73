"""Drawing of the ``plan`` family: bytes per GPU against GPUs, and the KV cache against context."""
from .. import plots


def fp32_beside_bf16(r):
    """The largest relative gap between plain fp32 training's peak and bf16 with full recompute's."""
    return max(abs(a - b) / b for a, b in zip(r["peaks"]["fp32 + Adam, data parallel"],
                                               r["peaks"]["bf16 + full recompute, data parallel"]))


STYLES = ["#7f7f7f", "#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3"]


def draw(records, outdir, name):
    fig, (ax, axk) = plots.new_figure(ncols=2, width=6.4, height=5.6)
    cfg = records["config"]
    for (label, peaks), color in zip(records["peaks"].items(), STYLES):
        if label.startswith("fp32"):  # within 1% of the bf16 line: a wide band under it, not hidden
            ax.plot(cfg["gpus"], [p / 1e9 for p in peaks], color=color, lw=7, alpha=0.45, zorder=1,
                    label=f"{label} (under bf16: {fp32_beside_bf16(records):.1%} apart)", solid_capstyle="butt")
            continue
        ax.plot(cfg["gpus"], [p / 1e9 for p in peaks], marker="o", ms=3, color=color, label=label,
                ls=":" if "not built" in label else "-")
    for (label, states), color in zip(records["deepspeed"].items(), (STYLES[3], STYLES[4])):
        ax.plot(cfg["gpus"], [s / 1e9 for s in states], color=color, ls="--", lw=1.0, label=label + " (model states)")
    ax.axhline(cfg["gpu_memory_gb"], color="k", ls=":", lw=1.0, label=f"{cfg['gpu_memory_gb']} GB per GPU")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("GPUs (data-parallel ranks)")
    ax.set_ylabel("GB per GPU (log): one step's peak, tinymem's count")
    ax.set_title(f"{cfg['arch']}, micro-batch {cfg['micro_batch']} x {cfg['seq']} tokens", fontsize=9)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.14), fontsize=plots.MIN_FONT, ncol=2, frameon=False)
    # LLaMA-3 8B and Mixtral 8x7B share their cache's shape (32 layers, 8 kv heads of 128): one
    # line over the other, told apart by their markers.
    for (model, sizes), color, marker, ls in zip(records["kv_cache"].items(), STYLES[1:], "oosx", ("-", "-", "-", "--")):
        axk.plot(cfg["contexts"], [b / 1e9 for b in sizes], marker=marker, ms=4, color=color, ls=ls, label=model)
    axk.axhline(cfg["gpu_memory_gb"], color="#d62728", ls="--", lw=0.9, label=f"{cfg['gpu_memory_gb']} GB")
    axk.set_xscale("log", base=2)
    axk.set_yscale("log")
    axk.set_xlabel("context (tokens), one sequence")
    axk.set_ylabel("KV cache GB (log), bf16")
    axk.set_title("inference: the KV cache grows with the context", fontsize=9)
    axk.legend(loc="upper center", bbox_to_anchor=(0.5, -0.14), fontsize=plots.MIN_FONT, ncol=3, frameon=False)
    return [plots.save(fig, records, outdir, name,
                       note="What to see: only ZeRO-3 (or offload) brings a 70B model under 80 GB; DeepSpeed's "
                            "estimators count model states only, and fewer of their terms; grouped-query "
                            "attention keeps LLaMA-2 70B's cache below LLaMA-2 7B's.")]
