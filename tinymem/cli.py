"""``tinymem info | figures | bench | plan | monitor`` (also ``python -m tinymem``)."""
import argparse
import os
import sys
import time

from .cli_help import NamesParser, bench_names, default_out, figure_names


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
        variable = os.environ.get("TINYMEM_DEVICE")
        source = f"from TINYMEM_DEVICE={variable}" if variable else "TINYMEM_DEVICE is unset"
        print(f"device      {backend.default_device()} (default; {source})")
    except backend.DeviceError as exc:  # finish the report: the lines below say what is missing
        print(f"device      {exc}")  # the error names TINYMEM_DEVICE and its value
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
    import traceback

    from tqdm import tqdm

    from . import backend
    from .experiments import CPU_ONLY_FAMILIES, families
    from .measure import claims, progress
    from .measure.records import meta, read_records, write_records

    device = backend.check_device(args.device)
    outdir = args.out or default_out("figures" if device == "cpu" else os.path.join("figures", "cuda"), args.quick)
    found = families()
    names = list(dict.fromkeys(args.only or found))  # --only a a runs a once
    unknown = [n for n in names if n not in found]
    if unknown:
        print(f"unknown figure family {unknown}; known: {', '.join(found)}", file=sys.stderr)
        return 2
    if args.claims_table:
        return _claims_table(outdir, names, args.readme)
    try:  # before any family runs: a file at --out failed every family after its run
        os.makedirs(os.path.join(outdir, "data"), exist_ok=True)
    except OSError as exc:
        print(f"tinymem figures: cannot write into {outdir}: {exc}; name a folder with --out", file=sys.stderr)
        return 2
    skipped = {n: CPU_ONLY_FAMILIES[n] for n in names if device != "cpu" and n in CPU_ONLY_FAMILIES
               and not args.replot}
    for name, why in skipped.items():
        print(f"figure family {name} skipped on {device}: it runs on the CPU only ({why})", file=sys.stderr)
    names = [n for n in names if n not in skipped]
    if skipped and not names:
        print("nothing left to run: use --device cpu for these families", file=sys.stderr)
        return 2
    written, failures, unmeasured, done, broken = [], [], [], [], []
    last = {n: progress.last_seconds(outdir, n, args.quick) for n in names}
    for index, name in enumerate(tqdm(names, desc="figure families", unit="family"), 1):
        module = found[name]
        # One family's exception is reported and the sweep goes on: a GPU run that stopped at
        # the first broken family brought nothing back of the ones after it.
        try:
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
        except Exception:  # noqa: BLE001 (any failure of one family; the traceback is printed)
            tqdm.write(f"figure family {name} failed:\n{traceback.format_exc()}", file=sys.stderr)
            broken.append(name)
            continue
        failures += [(name, row) for row in claims.failed(records["claims"])]
        unmeasured += [(name, row) for row in records["claims"] if row.get("not_measured")]
        if records["claims"]:
            tqdm.write(f"claims of {name}:\n" + claims.format_rows(records["claims"], color=sys.stdout.isatty()))
    for path in written:
        print(path)
    if broken:
        print(f"{len(broken)} figure famil{'y' if len(broken) == 1 else 'ies'} failed (traceback above): "
              f"{', '.join(broken)}", file=sys.stderr)
    if unmeasured:  # not a failure (--strict passes it), but never left to scroll away
        print(f"{len(unmeasured)} claim(s) not measured by this run (not failures; --strict passes them):",
              file=sys.stderr)
        for name, row in unmeasured:
            print(f"  {name}: {row['text']} ({row['not_measured']})", file=sys.stderr)
    if failures:
        red, reset = ("\033[31m", "\033[0m") if sys.stderr.isatty() else ("", "")
        print(f"{red}{len(failures)} claim(s) do not hold:", file=sys.stderr)
        for name, row in failures:
            print(f"  {name}: {row['text']} (measured {claims.format_value(row['value'])})", file=sys.stderr)
        print(reset, end="", file=sys.stderr)
    return 1 if broken or (failures and args.strict) else 0


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
    args.out = args.out or default_out("figures", args.quick)
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
    from .measure.records import meta

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
    # Written after every row: a run killed halfway keeps what it measured.
    records = targets_cuda.run(quick=args.quick, device="cuda", on_row=targets_cuda.writer(args.out, args.quick))
    print_table(targets_cuda.table_rows(records))
    print(os.path.join(args.out, "data", "bench_cuda.json"))
    if any("error" not in row for row in records["rows"]):
        for path in targets.plot(dict(records, meta=meta("cuda", args.quick)), args.out, "bench_cuda.png"):
            print(path)
    errors = [row for row in records["rows"] if "error" in row]
    for row in errors:
        print(f"tinymem bench: row {row['key']} failed: {row['error']}", file=sys.stderr)
    return 1 if errors else 0


def cmd_plan(args):
    from .planner.report import command

    return command.main(args, print_table)


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


def cmd_timeline(args):
    from .experiments import timeline_command

    return timeline_command.run(args)


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
    # The module's docstring without its reStructuredText markup: --help prints it as it is.
    parser = argparse.ArgumentParser(prog="tinymem", description=__doc__.replace("``", ""))
    sub = parser.add_subparsers(dest="command", required=True, parser_class=NamesParser)
    sub.add_parser("info", help="versions, backend, devices").set_defaults(fn=cmd_info)
    fig = sub.add_parser("figures", help="regenerate the figures and their JSON records", names=figure_names)
    fig.add_argument("--quick", action="store_true",
                     help="small sizes, for CI (minutes); without --out they go to figures/quick/ (git-ignored)")
    fig.add_argument("--only", nargs="+", metavar="NAME", help="only these families (listed below)")
    fig.add_argument("--device", default=None, help="cpu or cuda (default: $TINYMEM_DEVICE or cpu)")
    fig.add_argument("--out", default=None, help="output folder (default figures/, figures/cuda/ on a GPU; "
                     "their quick/ subfolder with --quick)")
    fig.add_argument("--strict", action="store_true", help="exit non-zero when a claim of a figure does not hold (one this run could "
                     "not measure is listed, not failed)")
    fig.add_argument("--replot", action="store_true",
                     help="redraw from the JSON in OUT/data (no sweep), judging the claims again")
    fig.add_argument("--claims-table", action="store_true",
                     help="print the markdown claims table of the JSON in OUT/data (no sweep)")
    fig.add_argument("--readme", metavar="FILE", default=None,
                     help="with --claims-table: write the table into FILE between its markers")
    fig.set_defaults(fn=cmd_figures)
    bench = sub.add_parser("bench", help="side-by-side benchmarks against NumPy and PyTorch", names=bench_names)
    bench.add_argument("names", nargs="*", metavar="NAMES", help="benchmarks to run (default: all; listed below)")
    bench.add_argument("--quick", action="store_true", help="small sizes")
    bench.add_argument("--out", default=None, help="where bench.png and data/bench.json go "
                       "(written when the targets benchmark runs; default figures/, figures/quick/ with --quick)")
    bench.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                       help="cuda: the GPU targets (figures/data/bench_cuda.json, bench_cuda.png)")
    bench.set_defaults(fn=cmd_bench)
    pl = sub.add_parser("plan", help="predict memory per technique combination, propose one that fits",
                        description="Predict one training step's memory per technique stack: by the closed form "
                        "for a named or explicit model (--arch), or by probing a tinymem model here (--model).",
                        **_plan_help())
    _plan_arguments(pl)
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
    tl = sub.add_parser("timeline", help="one step's memory as an offline HTML page (and a PyTorch "
                        "memory snapshot)", usage="tinymem timeline [options] [-- python script.py ...]")
    tl.add_argument("--workload", default=None, help="mlp, unet or transformer (default transformer)")
    tl.add_argument("--sizes", default=None, help="the workload's sizes, as for tinymem plan --sizes")
    tl.add_argument("--batch", type=int, default=8, help="samples per step (default 8)")
    tl.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="where the step runs")
    tl.add_argument("--out", default="timeline.html", help="the page to write (default timeline.html)")
    tl.add_argument("--snapshot", default=None, help="also write PyTorch's memory snapshot (a .pickle)")
    tl.add_argument("command", nargs=argparse.REMAINDER, help="a script to run instead, after --")
    tl.set_defaults(fn=cmd_timeline)
    course = sub.add_parser("course", help="the course: its site and notebooks, and grading a class's exercises")
    actions = course.add_subparsers(dest="action", required=True)
    _course_arguments(actions)
    return parser


def _course_arguments(actions):
    from .course import build, grade_cli

    build.add_parser(actions)
    grade_cli.add_parser(actions)


def _plan_arguments(parser):
    from .planner.report import arguments

    arguments.add_arguments(parser)


def _plan_help():
    from .planner.report import arguments

    return {"epilog": arguments.EPILOG, "formatter_class": arguments.SizeFormatter}


def main(argv=None):
    args = build_parser().parse_args(argv)
    return args.fn(args)
