"""``tinymem plan --mode torch``: one PyTorch 2.13 training step's peak, moment by moment, and the
tensors alive at the peak (:mod:`tinymem.planner.terms.torch_step`)."""
import sys

from ..inputs import parse_torch
from ..terms import torch_step
from . import as_json, verify_torch
from ..terms.torch_tape import BUCKETS


def plan_torch(args, model, usable, print_table):
    """Print each moment's buckets and the peak's tensors of ``model`` (the flags'
    :class:`~.model_flags.Model`); with ``--verify-torch``, the same step measured here beside it
    (:mod:`.verify_torch`); with ``--json``, all of it as JSON (:mod:`.as_json`). 0 when the peak
    fits ``usable`` bytes (--gpu-memory less --cuda-context and --fragmentation, as the other
    modes), 1 when not, 2 bad arguments (nothing printed on standard output)."""
    arch, batch = model.arch, 1 if args.batch is None else args.batch
    try:
        if args.verify_torch:
            raise ValueError("with --mode torch, --torch gives the step's options: give --verify-torch without words")
        options = parse_torch(args.torch or "")
        result = torch_step.breakdown(arch, batch, options)
        if args.verify_torch is not None:
            verify_torch.options_of(args.torch, arch, batch, "--torch")  # refused here, before anything is built
    except ValueError as exc:
        print(f"tinymem plan: {exc}", file=sys.stderr)
        return 2
    checked, where = verify_torch.compare(arch, batch, result.options) if args.verify_torch is not None \
        else (None, None)
    fits = result.peak <= usable
    if args.json:
        print(as_json.dumps({
            "mode": "torch", "exit_code": 0 if fits else 1, **as_json.model(arch, model.config), "batch": batch,
            "options": result.options._asdict(), "measured": result.measured, "peak": result.peak,
            "moment": result.moment, "moments": result.moments, "buckets": result.buckets, "usable": usable,
            "terms": [{"bucket": b, "tensor": t.name, "formula": t.formula, "bytes": t.bytes} for b, t in result.terms],
            **({"verify_torch": checked} if checked else {})}))
        return 0 if fits else 1
    for line in model.header:
        print(line)
    o = result.options
    print(f"torch mode: {arch.name}, batch {result.batch} x {arch.seq} tokens, AdamW {o.optimizer}, {o.attention} "
          f"attention, logits {'held' if o.hold_logits else 'let go'}, {'every block checkpointed, ' if o.checkpoint else ''}"
          f"{o.precision} on {o.device}{'' if result.measured else ' (predicted, unmeasured: no GPU has confirmed it)'}")
    print_table([dict(moment=name, **{b: f"{v / 1e6:.3f}" for b, v in buckets.items()},
                      total=f"{sum(buckets.values()) / 1e6:.3f}") for name, buckets in result.moments.items()])
    print(f"MB = 10^6 B per moment at its largest; peak {result.peak / 1e6:.3f} MB at '{result.moment}'")
    rows = sorted(result.terms, key=lambda bt: (BUCKETS.index(bt[0]), -bt[1].bytes))
    print_table([dict(bucket=b, tensor=t.name, formula=t.formula, MB=f"{t.bytes / 1e6:.3f}") for b, t in rows])
    print(f"{'fits' if fits else 'does not fit'} {args.gpu_memory} (a step may peak at {usable / 1e9:.2f} GB)")
    if checked:
        print(f"\n== --verify-torch: the same step of {arch.name} run on this CPU, batch {batch}: bytes at the peak")
        print_table(checked)
        print(where)
    return 0 if fits else 1
