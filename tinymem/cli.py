"""``tinymem info | figures | bench | plan`` (also ``python -m tinymem``)."""
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
    print(f"device      {backend.default_device()} (default, from TINYMEM_DEVICE)")
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
    from .experiments import families
    from .measure import claims
    from .measure.records import meta, write_records

    device = backend.check_device(args.device)
    outdir = args.out or ("figures" if device == "cpu" else os.path.join("figures", "cuda"))
    found = families()
    names = args.only or list(found)
    unknown = [n for n in names if n not in found]
    if unknown:
        print(f"unknown figure family {unknown}; known: {', '.join(found)}", file=sys.stderr)
        return 2
    written, failures = [], []
    for name in tqdm(names, desc="figure families", unit="family"):
        module = found[name]
        start = time.perf_counter()
        records = module.run(quick=args.quick, device=device)
        records["meta"] = dict(meta(device, args.quick), seconds=round(time.perf_counter() - start, 2))
        records["claims"] = claims.evaluate(getattr(module, "CLAIMS", []), records, args.quick)
        write_records(records, outdir, name)
        written += module.plot(records, outdir)
        failures += [(name, row) for row in claims.failed(records["claims"])]
        if records["claims"]:
            tqdm.write(f"claims of {name}:\n" + claims.format_rows(records["claims"], color=sys.stdout.isatty()))
    for path in written:
        print(path)
    if failures:
        print(f"{len(failures)} claim(s) do not hold:", file=sys.stderr)
        for name, row in failures:
            print(f"  {name}: {row['text']} (measured {claims.format_value(row['value'])})", file=sys.stderr)
    return 1 if failures and args.strict else 0


def cmd_bench(args):
    from .benchmarks import benchmarks

    found = benchmarks()
    names = args.names or list(found)
    unknown = [n for n in names if n not in found]
    if unknown:
        print(f"unknown benchmark {unknown}; known: {', '.join(found)}", file=sys.stderr)
        return 2
    for name in names:
        print(f"\n== {name}: {found[name].DESCRIPTION}")
        rows = found[name].run(quick=args.quick)
        print_table(rows)
    return 0


def cmd_plan(args):
    from tqdm import tqdm

    from . import planner
    from .memory import format_bytes

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
    fig.set_defaults(fn=cmd_figures)
    bench = sub.add_parser("bench", help="side-by-side benchmarks against NumPy and PyTorch")
    bench.add_argument("names", nargs="*", help="benchmarks to run (default: all)")
    bench.add_argument("--quick", action="store_true", help="small sizes")
    bench.set_defaults(fn=cmd_bench)
    pl = sub.add_parser("plan", help="predict memory per technique combination, propose one that fits")
    pl.add_argument("--model", required=True, help="mlp, unet or transformer")
    pl.add_argument("--sizes", required=True, help="mlp: in,hidden,...,out; unet: in_ch,classes,base,"
                    "depth,res; transformer: vocab,context,d_model,heads,layers")
    pl.add_argument("--batch", type=int, required=True, help="samples per step")
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
    return parser


def main(argv=None):
    args = build_parser().parse_args(argv)
    return args.fn(args)
