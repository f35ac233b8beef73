"""``tinymem info | figures | bench | plan | monitor`` (also ``python -m tinymem``)."""
import argparse
import os
import sys
import time


def cmd_info(args):
    import numpy as np

    from . import backend
    from .version import __version__

    print(f"tinymem     {__version__}")
    print(f"python      {sys.version.split()[0]}")
    print(f"numpy       {np.__version__}")
    try:
        config = np.show_config(mode="dicts")
        blas = config.get("Build Dependencies", {}).get("blas", {})
        print(f"BLAS        {blas.get('name', '?')} {blas.get('version', '')}".rstrip())
    except Exception:  # older NumPy has no dict mode; the BLAS line is informative only
        print("BLAS        (unknown)")
    try:
        print(f"device      {backend.default_device()} (default, from TINYMEM_DEVICE)")
    except backend.DeviceError as exc:  # finish the report: the lines below say what is missing
        print(f"device      TINYMEM_DEVICE={os.environ.get('TINYMEM_DEVICE')!r} cannot be used: {exc}")
    try:
        cupy = backend.get_cupy()
        print(f"cupy        {cupy.__version__}, {cupy.cuda.runtime.getDeviceCount()} GPU(s)")
    except backend.DeviceError as exc:
        print(f"cupy        unavailable: {str(exc).split(';')[0]}")
    try:
        import torch
        print(f"torch       {torch.__version__} (reference tests will run)")
    except ImportError:
        print("torch       not installed (reference tests will skip)")
    try:
        import mpi4py
        print(f"mpi4py      {mpi4py.__version__}")
    except ImportError:
        print("mpi4py      not installed (pip install .[dist] for the partitioning lessons)")
    return 0


def cmd_figures(args):
    from tqdm import tqdm

    from . import backend
    from .experiments import CPU_ONLY_FAMILIES, families
    from .measure import claims, progress
    from .measure.records import meta, read_records, write_records

    device = backend.check_device(args.device)
    outdir = args.out or ("figures" if device == "cpu" else os.path.join("figures", "cuda"))
    found = families()
    names = args.only or list(found)
    unknown = [n for n in names if n not in found]
    if unknown:
        print(f"unknown figure family {unknown}; known: {', '.join(found)}", file=sys.stderr)
        return 2
    if args.claims_table:
        return _claims_table(outdir, names, args.readme)
    cpu_only = [n for n in names if n in CPU_ONLY_FAMILIES] if device != "cpu" else []
    if cpu_only and args.only:  # asked for by name: refused with why; a whole sweep skips them
        for name in cpu_only:
            print(f"the {name} figures run on the CPU: {CPU_ONLY_FAMILIES[name]}; use --device cpu", file=sys.stderr)
        return 2
    names = [n for n in names if n not in cpu_only]
    written, failures, done = [], [], []
    last = {n: progress.last_seconds(outdir, n, args.quick) for n in names}
    for index, name in enumerate(tqdm(names, desc="figure families", unit="family"), 1):
        module = found[name]
        if args.replot:  # redraw from the JSON, with the claims judged again on its records
            records = read_records(outdir, name)
        else:
            tqdm.write(progress.describe(index, len(names), name, last[name],
                                         progress.seconds_left([last[n] for n in names[index - 1:]], done)))
            start = time.perf_counter()
            with backend.default_device_as(device):  # what the family makes without device= goes there too
                records = module.run(quick=args.quick, device=device)
            records["meta"] = dict(meta(device, args.quick), seconds=round(time.perf_counter() - start, 2))
            done.append((records["meta"]["seconds"], last[name]))
        records["claims"] = claims.evaluate(getattr(module, "CLAIMS", []), records, records["meta"]["quick"])
        write_records(records, outdir, name)
        written += module.plot(records, outdir)
        failures += [(name, row) for row in claims.failed(records["claims"])]
        if records["claims"]:
            tqdm.write(f"claims of {name}:\n" + claims.format_rows(records["claims"], color=sys.stdout.isatty()))
    for path in written:
        print(path)
    if failures:
        red, reset = ("\033[31m", "\033[0m") if sys.stderr.isatty() else ("", "")
        print(f"{red}{len(failures)} claim(s) do not hold:", file=sys.stderr)
        for name, row in failures:
            print(f"  {name}: {row['text']} (measured {claims.format_value(row['value'])})", file=sys.stderr)
        print(reset, end="", file=sys.stderr)
    return 1 if failures and args.strict else 0


def _claims_table(outdir, names, readme):
    """Print the markdown claims table of the records in ``outdir/data``; with ``readme``, write
    it into that file between its markers instead (atomically)."""
    from .measure import claims
    from .measure.records import read_records

    missing = [n for n in names if not os.path.exists(os.path.join(outdir, "data", f"{n}.json"))]
    if missing:
        print(f"no records for {missing} in {outdir}/data: run `tinymem figures --only {' '.join(missing)}` "
              "first", file=sys.stderr)
        return 2
    block = claims.markdown({n: read_records(outdir, n) for n in names})
    if readme is None:
        print(block)
        return 0
    with open(readme) as f:
        text = f.read()
    try:
        text = claims.replace_block(text, block)
    except ValueError as exc:
        print(f"tinymem figures: {exc}", file=sys.stderr)
        return 2
    with open(readme + ".tmp", "w") as f:
        f.write(text)
    os.replace(readme + ".tmp", readme)
    print(f"wrote the claims table into {readme}")
    return 0


def cmd_bench(args):
    from .benchmarks import benchmarks
    from .measure.records import meta, write_records

    found = benchmarks()
    if args.device == "cuda":
        return cmd_bench_cuda(args)
    names = args.names or list(found)
    unknown = [n for n in names if n not in found]
    if unknown:
        print(f"unknown benchmark {unknown}; known: {', '.join(found)}", file=sys.stderr)
        return 2
    if "targets" in names:  # checked before minutes of measuring, not after
        try:
            os.makedirs(os.path.join(args.out, "data"), exist_ok=True)
        except OSError as exc:
            print(f"tinymem bench: cannot write into {args.out}: {exc}", file=sys.stderr)
            return 2
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    records = {}
    for name in names:
        print(f"\n== {name}: {found[name].DESCRIPTION}")
        result = found[name].run(quick=args.quick)
        records[name] = result
        print_table(found[name].table_rows(result) if hasattr(found[name], "table_rows") else result)
    if "targets" not in records:
        return 0
    # The targets are what bench.json and bench.png record; rows of the other benchmarks that
    # ran alongside are kept in the same file.
    out = dict(records.pop("targets"), others=records)
    out["meta"] = dict(meta("cpu", args.quick), load=load)
    print(write_records(out, args.out, "bench"))
    for path in found["targets"].plot(out, args.out):
        print(path)
    return 0


def cmd_bench_cuda(args):
    """``tinymem bench targets --device cuda``: the GPU targets into bench_cuda.json/.png."""
    from . import backend
    from .benchmarks import targets, targets_cuda
    from .measure.records import meta, write_records

    if args.names not in ([], ["targets"]):
        print(f"tinymem bench: --device cuda runs the GPU targets only (tinymem bench targets --device cuda), "
              f"not {' '.join(args.names)}", file=sys.stderr)
        return 2
    try:
        backend.check_device("cuda")
    except backend.DeviceError as exc:
        print(f"tinymem bench: {exc}", file=sys.stderr)
        return 2
    print(f"\n== targets on cuda: {targets_cuda.__doc__.splitlines()[0]}")
    records = targets_cuda.run(quick=args.quick, device="cuda")
    print_table(targets_cuda.table_rows(records))
    records["meta"] = meta("cuda", args.quick)
    print(write_records(records, args.out, "bench_cuda"))
    for path in targets.plot(records, args.out, "bench_cuda.png"):
        print(path)
    return 0


def cmd_plan(args):
    from tqdm import tqdm

    from . import planner
    from .memory import format_bytes

    if args.arch or any(getattr(args, n) is not None for n in ("layers", "hidden", "heads", "seq", "vocab", "ffn")):
        return cmd_plan_arch(args)
    if args.batch is not None and args.batch < 1:
        print(f"tinymem plan: --batch must be >= 1, got {args.batch}", file=sys.stderr)
        return 2
    if not (args.model and args.sizes and args.batch):
        print("tinymem plan: give --arch NAME (or --layers/--hidden/--heads/--seq/--vocab) for the "
              "closed form, or --model, --sizes and --batch to probe a tinymem model", file=sys.stderr)
        return 2
    try:
        result = planner.plan(args.model, args.sizes, args.batch, args.budget, schedules=args.schedules,
                              precisions=args.precisions or planner.recipe.PRECISIONS,
                              optimizers=args.optimizers or planner.recipe.OPTIMIZERS,
                              offloads=args.offloads or planner.recipe.OFFLOADS,
                              progress=lambda keys: tqdm(keys, desc="probing", unit="combination"))
    except ValueError as exc:
        print(f"tinymem plan: {exc}", file=sys.stderr)
        return 2
    print_table(planner.table_rows(result, None if args.all else args.top))
    print(planner.summary(result))
    if args.verify and result.proposal is not None:
        measured = planner.measure_step(result.workload, result.proposal.combo, args.batch, budget=result.budget)
        print("\n== --verify: one training step with the proposal")
        print_table(planner.verify_rows(result, measured))
        print(f"ledger growth above the step's entry {format_bytes(measured['ledger_delta'])}, "
              f"measured (allocator) {format_bytes(measured['measured'])}; "
              f"step {1e3 * measured['seconds']:.1f} ms measured, "
              f"{1e3 * result.proposal.seconds:.1f} ms predicted")
    return 0 if result.proposal is not None else 1


def cmd_plan_arch(args):
    from .planner import command

    return command.plan_arch(args, print_table)


def cmd_monitor(args):
    from .experiments.watching import draw_command
    from .memory import nvidia
    from .memory.command import format_process_table, start_command, wait_forwarding_signals
    from .memory.sampler import check_interval

    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        print("tinymem monitor: give the command to watch after --, e.g. "
              "tinymem monitor -- python train.py", file=sys.stderr)
        return 2
    gpu = None
    if args.device != "cpu":
        try:
            gpu = nvidia.GpuReader(args.gpu)
        except (nvidia.NvidiaUnavailable, OSError) as exc:
            if args.device == "cuda":
                print(f"tinymem monitor: {exc}", file=sys.stderr)
                return 2
    # Checked before the command starts: an error after it would leave it running unwatched.
    try:
        check_interval(args.interval)
    except ValueError as exc:
        print(f"tinymem monitor: --interval: {exc}", file=sys.stderr)
        return 2
    folder = os.path.dirname(os.path.abspath(args.out))
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as exc:
        print(f"tinymem monitor: cannot write into {folder}: {exc}", file=sys.stderr)
        return 2
    try:
        proc, watch = start_command(command, args.interval, gpu)
    except OSError as exc:
        print(f"tinymem monitor: cannot run {command[0]!r}: {exc}", file=sys.stderr)
        return 127
    try:
        code, watch.kernel_peak = wait_forwarding_signals(proc)
    finally:  # the samples taken so far are written on every way out
        watch.stop()
        tmp = args.out + ".csv.tmp"
        with open(tmp, "w") as f:
            f.write("\n".join(watch.csv_lines()) + "\n")
        os.replace(tmp, args.out + ".csv")
    print(format_process_table(watch.rows(), watch.total_peak()))
    draw_command(watch, " ".join(command), args.out + ".png")
    print(f"wrote {args.out}.csv and {args.out}.png")
    return code


def print_table(rows):
    if not rows:
        return
    cols = list(rows[0])
    cells = [[_fmt(r.get(c, "")) for c in cols] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(cols)]
    print("  ".join(c.ljust(w) for c, w in zip(cols, widths)))
    for row in cells:
        print("  ".join(v.ljust(w) for v, w in zip(row, widths)))


def _fmt(value):
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def build_parser():
    parser = argparse.ArgumentParser(prog="tinymem", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("info", help="versions, backend, devices").set_defaults(fn=cmd_info)
    fig = sub.add_parser("figures", help="regenerate the figures and their JSON records")
    fig.add_argument("--quick", action="store_true", help="small sizes, for CI (minutes)")
    fig.add_argument("--only", nargs="+", metavar="NAME", help="only these families")
    fig.add_argument("--device", default=None, help="cpu or cuda (default: $TINYMEM_DEVICE or cpu)")
    fig.add_argument("--out", default=None, help="output folder (default figures/, figures/cuda/ on a GPU)")
    fig.add_argument("--strict", action="store_true", help="exit non-zero when a claim of a figure does not hold")
    fig.add_argument("--replot", action="store_true",
                     help="redraw from the JSON in OUT/data (no sweep), judging the claims again")
    fig.add_argument("--claims-table", action="store_true",
                     help="print the markdown claims table of the JSON in OUT/data (no sweep)")
    fig.add_argument("--readme", metavar="FILE", default=None,
                     help="with --claims-table: write the table into FILE between its markers")
    fig.set_defaults(fn=cmd_figures)
    bench = sub.add_parser("bench", help="side-by-side benchmarks against NumPy and PyTorch")
    bench.add_argument("names", nargs="*", help="benchmarks to run (default: all)")
    bench.add_argument("--quick", action="store_true", help="small sizes")
    bench.add_argument("--out", default="figures", help="where bench.png and data/bench.json go "
                       "(written when the targets benchmark runs; default figures/)")
    bench.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                       help="cuda: the GPU targets (figures/data/bench_cuda.json, bench_cuda.png)")
    bench.set_defaults(fn=cmd_bench)
    pl = sub.add_parser("plan", help="predict memory per technique combination, propose one that fits")
    pl.add_argument("--model", help="probe a tinymem model: mlp, unet or transformer")
    pl.add_argument("--sizes", help="mlp: in,hidden,...,out; unet: in_ch,classes,base,"
                    "depth,res; transformer: vocab,context,d_model,heads,layers")
    pl.add_argument("--batch", type=int, default=None,
                    help="samples per step (probe); sequences per micro-batch per GPU (--arch, default 1)")
    pl.add_argument("--arch", help="closed form for a named model: " + ", ".join(_archs()))
    for name in ("layers", "hidden", "heads", "seq", "vocab", "ffn"):
        pl.add_argument(f"--{name}", type=int, default=None, help=f"closed form: explicit {name}")
    pl.add_argument("--gpus", type=int, default=8, help="closed form: GPUs (default 8)")
    pl.add_argument("--gpu-memory", default="80GB", help="closed form: memory per GPU (default 80GB)")
    pl.add_argument("--micro-batches", type=int, default=None,
                    help="closed form: micro-batches per pipeline step (default 4 x GPUs)")
    pl.add_argument("--mode", default="tinymem", choices=["tinymem", "korthikanti"],
                    help="closed form: count tinymem's saved tensors, or Korthikanti et al.'s")
    _plan_arguments(pl)
    pl.add_argument("--budget", default=None, help="device budget, e.g. 64MB (default: none)")
    pl.add_argument("--schedules", nargs="+", metavar="S", help="restrict: none sqrt block")
    pl.add_argument("--precisions", nargs="+", metavar="P", help="restrict: fp32 fp16 bf16")
    pl.add_argument("--optimizers", nargs="+", metavar="NAME",
                    help="restrict: SGD 'SGD momentum' Adam Adafactor Adam8bit")
    pl.add_argument("--offloads", nargs="+", metavar="O", help="restrict: none activations optimizer")
    pl.add_argument("--top", type=int, default=15, help="rows to print (default 15)")
    pl.add_argument("--all", action="store_true", help="print every combination")
    pl.add_argument("--verify", action="store_true", help="run one step with the proposal and compare")
    pl.set_defaults(fn=cmd_plan)
    mon = sub.add_parser("monitor", help="run a command and sample its memory and its children's, as "
                         "nvidia-smi lists processes", usage="tinymem monitor [options] -- command ...")
    mon.add_argument("--interval", type=float, default=0.05, help="seconds between samples (default 0.05)")
    mon.add_argument("--out", default="monitor", help="path prefix of the CSV and PNG (default ./monitor)")
    mon.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                     help="also read GPU memory per process through NVML/nvidia-smi (auto: when present)")
    mon.add_argument("--gpu", type=int, default=0, help="GPU index for --device cuda (default 0)")
    mon.add_argument("command", nargs=argparse.REMAINDER, help="the command, after --")
    mon.set_defaults(fn=cmd_monitor)
    return parser


def _plan_arguments(parser):
    from .planner import command

    command.add_arguments(parser)


def _archs():
    from .planner.architectures import ARCHS
    return list(ARCHS)


def main(argv=None):
    args = build_parser().parse_args(argv)
    return args.fn(args)
