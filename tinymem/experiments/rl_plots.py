"""Drawing the rl family's figures from its records alone (see ``rl.py`` for what they show)."""
import numpy as np

from .. import plots
from ..memory import format_bytes

COLORS = {"float32": "#c44e52", "uint8": "#dd8452", "dedup": "#55a868", "disk": "#4c72b0",
          "disk, cold": "#8172b3", "disk, cold, prefetched": "#64b5cd"}
LABELS = {"float32": "float32 stacks\n(obs + next obs)", "uint8": "uint8 stacks", "dedup": "uint8 frames\nonce (dedup)",
          "disk": "frames once,\non disk (mmap)"}


def skipped(records, outdir, name):
    """A figure that says why it was not drawn (Gymnasium missing)."""
    fig, ax = plots.new_figure(width=6, height=2)
    ax.axis("off")
    ax.text(0.5, 0.5, f"not drawn: {records['skipped']}", ha="center", va="center")
    return plots.save(fig, records, outdir, name)


def plot_bytes(records, outdir, name):
    b = records["bytes"]
    schemes = list(b["per_transition"])
    fig, axes = plots.new_figure(ncols=2, width=6.2, height=4.4)
    xs = np.arange(len(schemes))
    naive = b["per_transition"]["float32"]
    for x, s in zip(xs, schemes):
        axes[0].bar(x, b["per_transition"][s], color=COLORS[s])
        axes[0].text(x, b["per_transition"][s] * 1.15, f"{b['per_transition'][s]:,} B\n"
                     f"{naive / b['per_transition'][s]:.1f}x less" if s != "float32" else f"{naive:,} B",
                     ha="center", fontsize=8)
        rows = [r for r in b["rows"] if r["scheme"] == s]
        for r in rows:  # the measured points: ledger bytes / capacity
            axes[0].plot(x + 0.25, (r["ledger_host"] + r["ledger_disk"]) / r["capacity"], "k_", ms=10)
    axes[0].set_yscale("log")
    axes[0].set_ylim(1e3, naive * 8)
    axes[0].set_ylabel("bytes per transition (log)")
    axes[0].set_title("per transition: formula (bar), ledger at small capacities (—)", fontsize=9)
    host = [b["at_1M"][s] if s != "disk" else b["index_bytes_per_slot"] * 1e6 for s in schemes]
    disk = [b["at_1M"][s] - host[i] if s == "disk" else 0 for i, s in enumerate(schemes)]
    axes[1].bar(xs, np.array(host) / 2**30, color=[COLORS[s] for s in schemes], label="host RAM")
    axes[1].bar(xs, np.array(disk) / 2**30, bottom=np.array(host) / 2**30, color="none", edgecolor="k",
                hatch="//", label="disk")
    for x, s in zip(xs, schemes):
        ram = f"{format_bytes(host[x])} RAM +\n" if s == "disk" else ""
        axes[1].text(x, b["at_1M"][s] / 2**30 * 1.15, ram + (format_bytes(disk[x]) + " disk" if s == "disk" else format_bytes(host[x])),
                     ha="center", fontsize=8)
    axes[1].set_yscale("log")
    axes[1].set_ylim(1e-2, b["at_1M"]["float32"] / 2**30 * 8)
    axes[1].set_ylabel("GiB at 1,000,000 transitions (log)")
    axes[1].set_title("the whole buffer at Atari DQN's capacity", fontsize=9)
    axes[1].legend(loc="upper right")
    for ax in axes:
        ax.set_xticks(xs)
        ax.set_xticklabels([LABELS[s] for s in schemes], fontsize=8)
    cfg = records["config"]
    fig.suptitle(f"DQN replay memory for {cfg['stack']} stacked {cfg['frame'][0]}x{cfg['frame'][1]} frames "
                 f"(pixel CartPole): the same transitions, four ways", fontsize=9)
    return plots.save(fig, records, outdir, name)


def _smooth(steps, returns, window=10):
    if len(returns) < window:
        return np.asarray(steps), np.asarray(returns)
    kernel = np.ones(window) / window
    return np.asarray(steps)[window - 1:], np.convolve(returns, kernel, mode="valid")


# The pair to compare: blue and orange, told apart with any colour vision (red and green are not).
LEARNING_COLORS = {"naive": "#4c72b0", "compact": "#dd8452"}


def plot_learning(records, outdir, name):
    runs = records["learning"]
    fig, axes = plots.new_figure(ncols=2, width=5.4, height=4.2)
    for r in runs:
        steps, returns = zip(*r["episodes"]) if r["episodes"] else ((), ())
        xs, ys = _smooth(steps, returns)
        first = r["seed"] == min(x["seed"] for x in runs)
        # the legend names each run as its records do: label, storage, observation, bytes per step
        axes[0].plot(xs, ys, color=LEARNING_COLORS[r["label"]], lw=1, alpha=0.8,
                     label=f"{r['label']}: storage {r['storage']}, observation {r['observation']} "
                           f"({r['buffer_bytes']['host'] / r['config']['buffer_size']:.0f} B/step)" if first else None)
        if r["evals"]:
            es, em = zip(*r["evals"])
            axes[1].plot(es, em, "o-", color=LEARNING_COLORS[r["label"]], ms=3, lw=0.8, alpha=0.8)
    for ax in axes:
        ax.axhline(475, color="k", ls=":", lw=1)
        ax.set_xlabel("environment steps")
        ax.set_ylim(0, 520)
    axes[0].set_ylabel("episode return (10-episode mean)")
    axes[0].set_title(f"training episodes, {len({r['seed'] for r in runs})} seeds per buffer", fontsize=9)
    axes[0].legend(loc="upper center", bbox_to_anchor=(0.5, -0.16))  # under the axes: returns fill the panel
    axes[1].set_ylabel("greedy return (eval episodes)")
    axes[1].set_title("greedy policy during training", fontsize=9)
    worst = {label: min(r["final"]["mean"] for r in runs if r["label"] == label) for label in LEARNING_COLORS}
    fig.suptitle(f"DQN on CartPole-v1 (unstable, as DQN is: returns collapse and recover).\nThe weights of the best "
                 f"greedy evaluation, replayed on {runs[0]['final']['episodes']} new episodes: lowest seed "
                 + ", ".join(f"{k} {v:.1f}" for k, v in worst.items()) + " (solved: 475)", fontsize=9)
    return plots.save(fig, records, outdir, name)


def plot_sampling(records, outdir, name):
    s = records["sampling"]
    names = list(s["seconds"])
    fig, ax = plots.new_figure(width=8.5, height=4.6)
    xs = np.arange(len(names))
    med = np.array([s["seconds"][n]["median"] for n in names]) * 1e3
    lo = med - np.array([s["seconds"][n]["q25"] for n in names]) * 1e3
    hi = np.array([s["seconds"][n]["q75"] for n in names]) * 1e3 - med
    ax.bar(xs, med, color=[COLORS[n] for n in names], yerr=[lo, hi], capsize=4)
    for x, m, h in zip(xs, med, hi):  # above the error bar, not on it
        ax.text(x, (m + h) * 1.15, f"{m:.2f} ms", ha="center", va="bottom", fontsize=8)
    ax.set_xticks(xs)
    ax.set_xticklabels([LABELS.get(n, n.replace(", ", ",\n")) for n in names], fontsize=8)
    ax.set_ylabel("ms per batch (median, bars: 25th-75th percentile)")
    ax.set_yscale("log")
    ax.set_ylim(top=(med + hi).max() * 4)  # room for the labels under the title
    ax.set_title(f"Sampling a batch of {s['batch']} transitions (4 x 84 x 84 frames) from {s['capacity']:,} "
                 f"stored, {s['repeats']} times in turns.\nDedup gathers 2 x 4 frames per transition by index; "
                 f"'cold' evicts the file from the page cache first;\n'prefetched' reads during a "
                 f"{s['learner_busy_s'] * 1e3:.0f} ms learner step: the bar is the wait left over", fontsize=8)
    return plots.save(fig, records, outdir, name)
