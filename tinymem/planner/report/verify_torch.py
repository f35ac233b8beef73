"""``tinymem plan --verify-torch``: the torch mode's prediction beside a real PyTorch step of the
same model, run on this machine.

The model is built at the size the flags give (``measure.torch_models``: nanoGPT's GPT, or a
LLaMA), trained two AdamW steps, and the second is measured (``measure.torch_step``: the
profiler's allocations replayed onto what is alive at its start). The table has one row per
bucket at the peak, predicted and measured, and the peak. Memory: the step itself, the
prediction's peak (refused above :data:`LIMIT` bytes: the run is on this machine's CPU), plus
the profiler's records; time: two steps under the profiler, seconds for a few million
parameters.
"""
from ..inputs import parse_torch, resolve_torch
from ..terms import torch_step

LIMIT = 2e9  # bytes: a step the CPU of a laptop runs in a minute


def options_of(words, arch, batch, flag="--verify-torch"):
    """The resolved :class:`~..inputs.TorchOptions` of ``--verify-torch``'s ``words`` (comma
    separated; "" for PyTorch's defaults; ``flag``, the flag they came in), refused (ValueError)
    as the torch mode refuses them, or when the step would peak above :data:`LIMIT`. Builds nothing."""
    options = resolve_torch(parse_torch(words or "", flag), arch, batch)
    if options.device != "cpu":
        raise ValueError("--verify-torch runs the step on this machine's CPU: leave 'cuda' out of its words")
    peak = torch_step.evaluate(arch, batch, options).peak
    if peak > LIMIT:
        raise ValueError(f"--verify-torch runs {arch.name} on this CPU, and its step would peak at {peak / 1e9:.1f} GB "
                         f"(at most {LIMIT / 1e9:.0f} GB): give a small size, e.g. --layers 2 --hidden 128 --seq 128")
    return options


def compare(arch, batch, options):
    """``(rows, line)``: per bucket the predicted and measured bytes at the peak and their
    difference, then the peak; ``line`` says where each puts the peak (the moment predicted, the
    phase and op measured)."""
    from ...measure import torch_models
    from ...measure.torch_step import measure_torch_step

    predicted = torch_step.evaluate(arch, batch, options)
    step = torch_models.build(arch, batch, **options._asdict())
    measured = measure_torch_step(step.step, model=step.model, optimizer=step.optimizer, steps=2, inputs=step.inputs)
    rows = [{"bucket": b, "predicted": predicted.buckets.get(b, 0), "measured": measured.buckets.get(b, 0)}
            for b in torch_step.BUCKETS]
    rows.append({"bucket": "peak", "predicted": predicted.peak, "measured": measured.peak})
    for row in rows:
        row["predicted - measured"] = row["predicted"] - row["measured"]
    return rows, (f"peak predicted at '{predicted.moment}' ({predicted.peak / measured.peak:.4f} of the measured "
                  f"peak); measured in {measured.phase_at_peak}, at {measured.op_at_peak}")
