"""Record the planner's numbers that a refactor must leave byte-identical, into a folder.

    PYTHONPATH=$PWD python scripts/plan_numbers.py /tmp/before     # on the old tree
    PYTHONPATH=$PWD python scripts/plan_numbers.py /tmp/after      # on the new one
    python scripts/plan_numbers.py --compare /tmp/before /tmp/after

What it writes: the output and exit code of ``tinymem plan`` for each mode and option (two of
them refused), ``tinymem figures --quick --only plan`` and ``--only what_fits`` records
without their ``meta``, and :func:`tinymem.planner.exactness.predict` of lesson 12's stacks (on
both of its sizes), model_states of lesson 08's combinations and a few breakdowns and
conventions. A probe run measures time, so its rows are compared without their time column and in sorted
order (the table ranks them by that time); the figures' logs name a temporary folder.
"""
import json
import os
import pathlib
import subprocess
import sys
import tempfile

PLAN_RUNS = {
    "llama2_7b_8": "--arch llama2-7b --gpus 8 --gpu-memory 80GB",
    "llama2_70b_64_explain": "--arch llama2-70b --gpus 64 --explain",
    "llama2_70b_8_explain_nofit": "--arch llama2-70b --gpus 8 --gpu-memory 24GB --explain",
    "llama2_7b_1_finetune": "--arch llama2-7b --gpus 1 --gpu-memory 24GB --finetune --lora-rank 8",
    "gpt3_175b_korthikanti_deepspeed": "--arch gpt3-175b --gpus 64 --mode korthikanti --convention deepspeed",
    "mixtral_zero_paper": "--arch mixtral-8x7b --gpus 16 --convention zero-paper --micro-batches 8 --batch 2",
    "custom_sizes": "--layers 12 --hidden 768 --heads 12 --seq 1024 --vocab 50257 --gpus 2 --gpu-memory 16GB "
                    "--cuda-context 1GB --fragmentation 0.1",
    "layout_3d": "--arch llama2-70b --tensor-parallel 8 --pipeline 4 --data-parallel 2",
    "layout_sp_zero3": "--arch llama2-70b --tensor-parallel 4 --pipeline 2 --data-parallel 8 --sequence-parallel "
                       "--recompute full --zero 3 --convention deepspeed",
    "inference": "--arch llama3-8b --inference --context 32768",
    "inference_int8": "--arch llama2-70b --inference --weights int8 --kv-cache int8 --batch 4",
    "probe": "--model mlp --sizes 64,256,256,10 --batch 32 --budget 4MB --all",
    "refused_layout_inference": "--arch llama2-70b --inference --tensor-parallel 8",
    "refused_gpu_memory": "--arch llama2-7b --gpu-memory 80",
}
FAMILIES = ("plan", "what_fits")


def run(argv, env):
    done = subprocess.run([sys.executable, "-m", "tinymem", *argv], capture_output=True, text=True, env=env)
    return f"exit {done.returncode}\n--- stdout\n{done.stdout}--- stderr\n{done.stderr}"


def without_meta(value):
    if isinstance(value, dict):
        return {k: without_meta(v) for k, v in value.items() if k != "meta"}
    if isinstance(value, list):
        return [without_meta(v) for v in value]
    return value


def figures(out, env):
    with tempfile.TemporaryDirectory() as tmp:
        for family in FAMILIES:
            log = run(["figures", "--quick", "--only", family, "--out", tmp], env)
            (out / f"figures_{family}.log").write_text(log.split("--- stderr")[0])
        for path in sorted(pathlib.Path(tmp, "data").glob("*.json")):
            data = without_meta(json.loads(path.read_text()))
            (out / f"figure_{path.name}").write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")


def library(out):
    from tinymem.planner import analytic, conventions, exactness, fits, model_states
    from tinymem.planner import Combination  # both the flat planner's names and the folders'

    Stack = analytic.Stack
    stacks = [Stack(), Stack("bf16", recompute="sqrt"), Stack(storage="int8", recompute="full"),
              Stack(attention="chunked", micro_batches=2), Stack(offload=True), Stack("bf16", "Adam8bit"),
              Stack("fp16", "Adafactor", "full", micro_batches=2)]
    lines = []
    for sizes, batch in (((50, 8, 16, 2, 3), 4), ((64, 32, 48, 4, 4), 6), ((2000, 16, 128, 4, 2), 2)):
        for stack in stacks:
            p = exactness.predict(sizes, batch, stack)
            lines.append(f"predict {sizes} {batch} {tuple(stack)}: {p.buckets} peak {p.peak} at {p.moment!r} "
                         f"host {p.host}")
    for precision in ("fp32", "fp16", "bf16"):
        for optimizer in ("SGD", "SGD momentum", "Adam", "Adafactor", "Adam8bit"):
            for offload in ("none", "optimizer"):
                combo = Combination("none", precision, optimizer, offload, 1)
                shapes = [(64, 256), (256,), (256, 256), (256,), (256, 10), (10,)]
                lines.append(f"model_states {tuple(combo)}: {model_states(shapes, combo, 0)}")
    zero3 = Stack("bf16", recompute="full", zero=3, ranks=64)
    for arch in ("llama2-70b", "gpt3-175b"):
        for stack in (zero3, zero3._replace(offload="zero-offload-params"), Stack("bf16-pure", "Adam8bit", zero=2,
                                                                                 ranks=8, offload="zero-offload")):
            b = analytic.breakdown(arch, 2, stack)
            lines.append(f"breakdown {arch} {tuple(stack)}: {b.buckets} {b.peak} {b.moment!r} {b.host}")
            for convention in conventions.CONVENTIONS:
                lines.append(f"  {convention}: {conventions.rows(arch, stack, convention)}")
    rows, best = fits.plan_arch("llama2-70b", 64, 80e9)
    lines += [f"plan_arch {r.name}: {r.breakdown.peak} {r.fewest_gpus} {r.time!r} {r.refused}" for r in rows]
    lines.append(f"proposal: {best.name} {best.breakdown.peak} {best.time!r}")
    (out / "library.txt").write_text("\n".join(lines) + "\n")


def timeless(text):
    """A probe table's lines without the "pred ms" column, sorted."""
    lines = text.split("\n")
    header = next((i for i, line in enumerate(lines) if "pred ms" in line), None)
    if header is None:
        return lines
    column = [c for c in lines[header].split("  ") if c].index("pred ms")
    rows = [[c.strip() for c in line.split("  ") if c] for line in lines[header:]]
    return lines[:header] + sorted(" | ".join(r[:column] + r[column + 1:]) for r in rows if len(r) > column)


def compare(before, after):
    """Names of the files that differ (the probe's time and the figures' temporary folder aside)."""
    differ = []
    for path in sorted(pathlib.Path(before).iterdir()):
        if path.name.startswith("figures_"):
            continue
        other = pathlib.Path(after, path.name)
        old, new = path.read_text(), other.read_text() if other.exists() else None
        if new is None or (timeless(old) != timeless(new) if path.name == "plan_probe.txt" else old != new):
            differ.append(path.name)
    return differ


def main(folder):
    out = pathlib.Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, COLUMNS="200")
    for name, flags in PLAN_RUNS.items():
        (out / f"plan_{name}.txt").write_text(run(["plan", *flags.split()], env))
    library(out)
    figures(out, env)


if __name__ == "__main__":
    if sys.argv[1] == "--compare":
        changed = compare(sys.argv[2], sys.argv[3])
        print("identical" if not changed else "differ: " + ", ".join(changed))
        sys.exit(1 if changed else 0)
    main(sys.argv[1])
