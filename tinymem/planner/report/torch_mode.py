"""``tinymem plan --mode torch``: one PyTorch 2.13 training step's peak, moment by moment, and the
tensors alive at the peak (:mod:`tinymem.planner.terms.torch_step`)."""
import sys

from ..inputs import parse_torch
from ..terms import torch_step
from ..terms.torch_tape import BUCKETS


def plan_torch(args, arch, usable, print_table):
    """Print each moment's buckets and the peak's tensors of ``arch`` (the flags' model); 0 when
    the peak fits ``usable`` bytes (--gpu-memory less --cuda-context and --fragmentation, as the
    other modes), 1 when not, 2 bad arguments."""
    try:
        options = parse_torch(args.torch or "")
        result = torch_step.breakdown(arch, 1 if args.batch is None else args.batch, options)
    except ValueError as exc:
        print(f"tinymem plan: {exc}", file=sys.stderr)
        return 2
    o = result.options
    print(f"torch mode: {arch.name}, batch {result.batch} x {arch.seq} tokens, AdamW {o.optimizer}, {o.attention} "
          f"attention, logits {'held' if o.hold_logits else 'let go'}, {'every block checkpointed, ' if o.checkpoint else ''}"
          f"{o.precision} on {o.device}{'' if result.measured else ' (predicted, unmeasured: no GPU has confirmed it)'}")
    print_table([dict(moment=name, **{b: f"{v / 1e6:.3f}" for b, v in buckets.items()},
                      total=f"{sum(buckets.values()) / 1e6:.3f}") for name, buckets in result.moments.items()])
    print(f"MB = 10^6 B per moment at its largest; peak {result.peak / 1e6:.3f} MB at '{result.moment}'")
    rows = sorted(result.terms, key=lambda bt: (BUCKETS.index(bt[0]), -bt[1].bytes))
    print_table([dict(bucket=b, tensor=t.name, formula=t.formula, MB=f"{t.bytes / 1e6:.3f}") for b, t in rows])
    fits = result.peak <= usable
    print(f"{'fits' if fits else 'does not fit'} {args.gpu_memory} (a step may peak at {usable / 1e9:.2f} GB)")
    return 0 if fits else 1
