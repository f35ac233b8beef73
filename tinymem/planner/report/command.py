"""``tinymem plan --arch ...``: the closed form on the command line (its own flags, the table of
stacks, ``--explain``'s term-by-term account), registered by :mod:`tinymem.cli`."""
import sys

from ..model import architectures
from . import arguments, as_json, torch_mode, verify_torch
from .model_flags import model_from
from .. import conventions
from ..terms import finetune, inference
from ..search import fits
from ..inputs import resolve


def main(args, print_table):
    """``tinymem plan``: refuse the flags its mode ignores (:func:`.arguments.check`), then run
    the mode. Returns the exit code: 0 something fits, 1 nothing does, 2 bad arguments."""
    try:
        mode = arguments.check(args)
    except ValueError as exc:
        print(f"tinymem plan: {exc}", file=sys.stderr)
        return 2
    return {"probe": plan_probe, "training": plan_arch, "layout": plan_layout,
            "inference": plan_inference, "torch": plan_torch}[mode](args, print_table)


def plan_probe(args, print_table):
    """Probe a tinymem model: each combination's measured peak, the proposal, ``--verify``."""
    from tqdm import tqdm

    from ... import planner
    from ...memory import format_bytes

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
    code = 0 if result.proposal is not None else 1
    measured = None
    if args.verify and result.proposal is not None:
        measured = planner.measure_step(result.workload, result.proposal.combo, args.batch, budget=result.budget)
    if args.json:
        print(as_json.dumps({
            "mode": "probe", "exit_code": code, "workload": repr(result.workload), "batch": args.batch,
            "budget": result.budget, "rows": [as_json.probe_row(r) for r in result.rows],
            "proposal": None if result.proposal is None else as_json.probe_row(result.proposal),
            **({"verify": planner.verify_rows(result, measured)} if measured else {})}))
        return code
    print_table(planner.table_rows(result, None if args.all else args.top))
    print(planner.summary(result))
    if measured:
        print("\n== --verify: one training step with the proposal")
        print_table(planner.verify_rows(result, measured))
        print(f"ledger growth above the step's entry {format_bytes(measured['ledger_delta'])}, "
              f"measured (allocator) {format_bytes(measured['measured'])}; "
              f"step {1e3 * measured['seconds']:.1f} ms measured, "
              f"{1e3 * result.proposal.seconds:.1f} ms predicted")
    return code


def plan_torch(args, print_table):
    """``--mode torch``: one PyTorch step's peak (:mod:`.torch_mode`)."""
    try:
        model, usable = model_from(args), allowance(args)[2]
    except ValueError as exc:
        print(f"tinymem plan: {exc}", file=sys.stderr)
        return 2
    return torch_mode.plan_torch(args, model, usable, print_table)


def layout_stack(args):
    """The :class:`~.analytic.Stack` of ``--tensor-parallel/--pipeline/--data-parallel``."""
    t, p, d = (1 if v is None else v for v in (args.tensor_parallel, args.pipeline, args.data_parallel))
    return fits.Stack("bf16", "Adam", args.recompute, zero=args.zero, ranks=d, pipeline=p, tensor=t,
                      sequence_parallel=args.sequence_parallel,
                      micro_batches=args.micro_batches or (4 * p if p > 1 else 1))


def allowance(args):
    """``(context bytes, fragmentation fraction, usable)``: what the step's peak may reach of the
    GPU's memory once the CUDA context and fragmentation are set aside."""
    context, fraction = arguments.size("--cuda-context", args.cuda_context), args.fragmentation
    if not 0 <= fraction < 1:
        raise ValueError(f"--fragmentation is a fraction of the peak in [0, 1), got {fraction}")
    memory = arguments.size("--gpu-memory", args.gpu_memory, least=1)
    if context >= memory:
        raise ValueError(f"--cuda-context ({args.cuda_context}) leaves nothing of --gpu-memory ({args.gpu_memory})")
    return context, fraction, (memory - context) / (1 + fraction)


def overhead_line(args, usable):
    context, fraction, _ = allowance(args)
    return (f"allowance: CUDA context {context / 1e9:.2f} GB (--cuda-context) + fragmentation {fraction:.0%} of "
            f"the peak (--fragmentation): a step may peak at {usable / 1e9:.1f} of {args.gpu_memory} per GPU")


def assumptions_line():
    flops = fits.GPU_FLOPS
    return (f"time x: step time over plain fp32 training's, modelled for an A100: {flops['fp32'] / 1e12:.0f} "
            f"TFLOP/s TF32, {flops['half'] / 1e12:.0f} TFLOP/s bf16 (so bf16 is x0.50: an A100 ratio; an H100 "
            f"differs), {fits.UTILIZATION:.0%} utilization, PCIe {fits.PCIE / 1e9:.0f} GB/s and host memory "
            f"{fits.HOST_BANDWIDTH / 1e9:.0f} GB/s for ZeRO-Offload; communication not modelled")


def plan_arch(args, print_table):
    """The closed form at any size: bytes per bucket per stack, the fewest GPUs, the time cost."""
    try:
        model = model_from(args)
        arch = model.arch
        memory = arguments.size("--gpu-memory", args.gpu_memory)
        batch = 1 if args.batch is None else args.batch  # >= 1: arguments.check
        usable = allowance(args)[2]
        rows, proposal = fits.plan_arch(arch, args.gpus, usable, batch, args.mode, args.micro_batches,
                                        args.convention)
        tuned = finetune.rows(arch, args.lora_rank, batch) if args.finetune else []
        torch_options = None if args.verify_torch is None else verify_torch.options_of(args.verify_torch, arch, batch)
    except ValueError as exc:
        print(f"tinymem plan: {exc}", file=sys.stderr)
        return 2
    checked, where = verify_torch.compare(arch, batch, torch_options) if torch_options else (None, None)
    chosen = explained_row(args, arch, batch, rows, proposal) if args.explain else None
    code = 0 if proposal is not None or any(r.peak <= usable for r in tuned) else 1
    if args.json:
        print(as_json.dumps({
            "mode": "training", "exit_code": code, **as_json.model(arch, model.config), "batch": batch,
            "gpus": args.gpus, "gpu_memory": memory, "usable": usable, "planner_mode": args.mode,
            "convention": args.convention, "rows": [as_json.stack_row(r) for r in rows],
            "proposal": None if proposal is None else as_json.stack_row(proposal),
            **({"finetune": [as_json.finetune_row(r, usable) for r in tuned]} if args.finetune else {}),
            **({"explain": chosen and as_json.explain_rows(arch, chosen, args.convention,
                                                            terms(arch, chosen, args.convention)[2])}
               if args.explain else {}),
            **({"verify_torch": checked} if checked else {})}))
        return code
    label = args.gpu_memory
    for line in model.header:
        print(line)
    if arch.name != (args.arch or "custom"):
        print(architectures.describe(arch))
    print(f"per GPU, micro-batch of {batch} sequence(s) of {arch.seq} tokens, mode {args.mode}, convention "
          f"{args.convention} (GB = 10^9 B; fewest GPUs: every GPU of the layout, grown by data-parallel copies, or by pipeline stages "
          "for the pipeline rows)")
    # On one GPU a ZeRO stage or a pipeline is the stack above it: their fewest GPUs go on one line.
    shown = [r for r in rows if args.gpus > 1 or not fits.needs_gpus(r)]
    print_table(fits.table(shown, args.gpus, memory, label))
    if len(shown) < len(rows):
        print("on more GPUs (fewest GPUs): " + ", ".join(
            f"{r.name} {'-' if r.fewest_gpus is None else r.fewest_gpus}" for r in rows if r not in shown))
    print(overhead_line(args, usable))
    print(assumptions_line())
    print(fits.summary(arch, rows, proposal, args.gpus, memory, label, full_training=args.finetune))
    if args.finetune:
        print_finetune(args, tuned, usable, print_table)
    if checked:
        print(f"\n== --verify-torch: the torch mode ({torch_options.optimizer} AdamW, {torch_options.attention} "
              f"attention) against a PyTorch step of {arch.name} on this CPU, batch {batch}: bytes at the peak")
        print_table(checked)
        print(where)
    if args.explain:
        if chosen is None:
            print(f"\n--explain: no stack fits any number of GPUs of {args.gpu_memory}: nothing to explain")
        else:
            print()
            for line in explain(arch, chosen, args.convention, print_table):
                print(line)
    return code


def explained_row(args, arch, batch, rows, proposal):
    """The row ``--explain`` explains: the proposal, else the summary's "fewest GPUs" stack on
    that many GPUs (None when no stack fits any count)."""
    chosen = proposal or min((r for r in rows if r.fewest_gpus is not None and not r.refused),
                             key=lambda r: (r.fewest_gpus, r.time), default=None)
    if chosen is not None and proposal is None:
        stages = chosen.name in fits.PIPELINES
        stack = fits.grow(chosen.stack, chosen.fewest_gpus // fits.gpus_per_count(chosen.stack, stages), stages,
                          args.micro_batches)
        chosen = chosen._replace(stack=stack, breakdown=fits.run(arch, batch, stack, args.mode, args.convention))
    return chosen


def terms(arch, row, convention):
    """``(resolved stack, parameters per GPU, the convention's rows)`` of ``row``'s model states."""
    stack = resolve(row.stack)
    parameters = fits.analytic.stage_parameters(arch, stack.pipeline, stack.tensor)
    return stack, parameters, conventions.resolved_rows(arch, stack, convention, parameters)


def explain(arch, row, convention, print_table):
    """Print ``row``'s model states term by term under ``convention``, then the other terms of
    its peak; returns the closing lines (the same stack in the other conventions)."""
    stack, parameters, table = terms(arch, row, convention)
    print(f"== --explain: {fits.describe(stack)}; t={stack.tensor} x p={stack.pipeline} x d={stack.ranks} GPUs; "
          f"convention {convention} (bytes per parameter; GB = 10^9 B per GPU)")
    n_layer = architectures.layer_parameter_count(arch) / stack.tensor
    big = architectures.largest_module(arch) / stack.tensor
    counts = {parameters[0]: "n", n_layer: "n_layer", big: "n_big"}
    out = [{"term": r.term, "bucket": r.bucket, "B/param": f"{r.per_parameter:.3g}", "divided by": r.divisor,
            "of": counts.get(r.count, r.count), "GB": f"{conventions.row_bytes(r) / 1e9:.2f}", "where": r.place}
           for r in table]
    b = row.breakdown.buckets
    for bucket in ("activation", "workspace"):
        out.append({"term": f"{bucket}s (the bucket's own peak)", "bucket": bucket, "B/param": "-",
                    "divided by": "-", "of": "-", "GB": f"{b[bucket] / 1e9:.2f}", "where": "device"})
    print_table(out)
    lines = [f"n = {parameters[0]:,.0f} parameters per GPU's share of the model; peak {row.breakdown.peak / 1e9:.2f} GB "
             f"at '{row.breakdown.moment}', host {row.breakdown.host / 1e9:.1f} GB per GPU"]
    others = []
    for other in conventions.CONVENTIONS:
        states = conventions.device_bytes(conventions.resolved_rows(arch, stack, other, parameters))
        others.append(f"{other} {states / 1e9:.2f} GB")
    lines.append("model states of this stack per GPU, the sum of the device rows, by convention: " + ", ".join(others))
    lines.append(f"deepspeed: the estimators of {conventions.DEEPSPEED} (ZeRO-2: 2n + 18n/N since its PR #5099)")
    # DeepSpeed's estimators count mixed-precision Adam (2 + 2 + 16 bytes): no other stack's
    if stack.zero in (2, 3) and stack.tensor == stack.pipeline == 1 and stack.optimizer == "Adam" \
            and stack.width.master:
        kind = stack.kind
        cpu, gpu = conventions.deepspeed_estimate(stack.zero, parameters[0], architectures.largest_module(arch),
                                                  stack.ranks, 1, bool(kind), kind == "zero-offload-params")
        lines.append(f"DeepSpeed's estimate_zero{stack.zero}_model_states_mem_needs for this stack on one node of "
                     f"{stack.ranks} GPUs: {gpu / 1e9:.2f} GB per GPU, {cpu / 1e9:.1f} GB of CPU memory "
                     "(additional_buffer_factor 1.5)")
    return lines


def plan_layout(args, print_table):
    """One 3D layout: its buckets per GPU, whether it fits, and its terms."""
    try:
        model = model_from(args)
        arch = model.arch
        memory = arguments.size("--gpu-memory", args.gpu_memory)
        batch = 1 if args.batch is None else args.batch
        stack = layout_stack(args)
        resolved = resolve(stack, arch, batch * stack.micro_batches)
        result = fits.evaluate(arch, batch, resolved, args.mode, args.convention)
        usable = allowance(args)[2]
    except ValueError as exc:
        print(f"tinymem plan: {exc}", file=sys.stderr)
        return 2
    gpus = stack.tensor * stack.pipeline * stack.ranks
    row = fits.Row(fits.describe(stack), stack, result, result.peak <= usable, None,
                   fits.step_time(arch, batch, resolved), fits.refused(resolved))
    if args.json:
        print(as_json.dumps({
            "mode": "layout", "exit_code": 0 if row.fits else 1, **as_json.model(arch, model.config),
            "batch": batch, "layout": {"tensor": stack.tensor, "pipeline": stack.pipeline, "data": stack.ranks},
            "gpu_memory": memory, "usable": usable, "planner_mode": args.mode, "convention": args.convention,
            "rows": [as_json.stack_row(row)],
            "explain": as_json.explain_rows(arch, row, args.convention, terms(arch, row, args.convention)[2])}))
        return 0 if row.fits else 1
    for line in model.header:
        print(line)
    print(f"{architectures.describe(arch)}\none layout on {gpus} GPUs (t={stack.tensor} x p={stack.pipeline} x "
          f"d={stack.ranks}), micro-batch of {batch} sequence(s), mode {args.mode}, convention {args.convention}; "
          "activations of tensor-parallel layers as Korthikanti et al. count them")
    print_table(fits.table([row], gpus, memory, args.gpu_memory))
    print(overhead_line(args, usable))
    print(assumptions_line())
    print()
    for line in explain(arch, row, args.convention, print_table):
        print(line)
    return 0 if row.fits else 1


def plan_inference(args, print_table):
    """Generation: weights, KV cache, the largest layer's workspace, the allowance; accelerate's
    ``estimate-memory`` beside it in its own convention."""
    try:
        model = model_from(args)
        arch = model.arch
        batch = 1 if args.batch is None else args.batch
        rows = inference.plan(arch, batch, args.context, args.weights, 2 if args.kv_cache == "bf16" else 1)
        context_bytes, fraction, usable = allowance(args)
    except ValueError as exc:
        print(f"tinymem plan: {exc}", file=sys.stderr)
        return 2
    context = arch.seq if args.context is None else args.context
    total = sum(t.bytes for t in rows)
    need = context_bytes + (1 + fraction) * total
    memory = arguments.size("--gpu-memory", args.gpu_memory)
    per_token = inference.kv_cache_bytes(arch, batch, 1, 2 if args.kv_cache == "bf16" else 1)
    if args.json:
        print(as_json.dumps({
            "mode": "inference", "exit_code": 0 if need <= memory else 1, **as_json.model(arch, model.config),
            "batch": batch, "context": context, "weights": args.weights, "kv_cache": args.kv_cache,
            "terms": [{"term": t.name, "formula": t.formula, "bytes": t.bytes} for t in rows],
            "cuda_context": context_bytes, "fragmentation": fraction * total, "total": total, "need": need,
            "gpu_memory": memory, "fits": need <= memory, "kv_cache_per_token": per_token}))
        return 0 if need <= memory else 1
    for line in model.header:
        print(line)
    out = [{"term": t.name, "formula": t.formula, "GB": f"{t.bytes / 1e9:.3f}"} for t in rows]
    out.append({"term": "CUDA context + fragmentation", "formula": f"{args.cuda_context} + {fraction:.0%}",
                "GB": f"{(context_bytes + fraction * total) / 1e9:.3f}"})
    print(f"{architectures.describe(arch)}\ninference: batch {batch}, context {context} tokens, weights "
          f"{args.weights}, KV cache {args.kv_cache}, fused (flash) attention (GB = 10^9 B)")
    print_table(out)
    print(f"total {need / 1e9:.2f} GB: {'fits' if total <= usable else 'does not fit'} one {args.gpu_memory} GPU; "
          f"the KV cache grows by {per_token / 1e6:.3f} MB a token")
    theirs = inference.accelerate_estimate(arch, args.weights)
    print(f"accelerate estimate-memory, {args.weights} row (its convention: the model without its LM head, "
          f"units of 2^30 B): Total Size {theirs['total'] / 2 ** 30:.2f} GB, Largest Layer "
          f"{theirs['largest_layer'] / 2 ** 30:.2f} GB; no KV cache, no workspace")
    return 0 if need <= memory else 1


def print_finetune(args, tuned, usable, print_table):
    """LoRA and QLoRA rows on one GPU (:mod:`.finetune`)."""
    table = []
    for r in tuned:
        table.append({"method": r.method, "frozen base GB": f"{r.base / 1e9:.2f}",
                      "adapters (16 B/value) GB": f"{r.adapters / 1e9:.2f}", "activ GB": f"{r.activation / 1e9:.2f}",
                      "work GB": f"{r.workspace / 1e9:.2f}", "peak GB": f"{r.peak / 1e9:.2f}",
                      f"fits 1x{args.gpu_memory}": "yes" if r.peak <= usable else "no"})
    print(f"\nfine-tuning on one GPU: rank-{args.lora_rank} adapters on every linear of the blocks, bf16 full "
          "recompute; LoRA's base in bf16, QLoRA's adapted matrices in NF4 (4.127 bits)")
    print_table(table)
    able = [r.method for r in tuned if r.peak <= usable]
    print(f"fine-tuning fits 1 x {args.gpu_memory} with {' and '.join(able)}" if able
          else f"no fine-tuning method fits 1 x {args.gpu_memory}")
