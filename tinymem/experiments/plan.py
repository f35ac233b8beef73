"""Figure: what ``tinymem plan`` says about LLaMA-2 70B, training and inference, by the closed form.

Left: bytes per GPU against the number of GPUs for each data-parallel stack (bf16 with full
recomputation, then ZeRO-1, 2, 3 and ZeRO-Offload; plain fp32 for scale), tinymem's count of
one step's peak, with DeepSpeed's estimators (their convention: model states only; DeepSpeed
v0.19.6, whose ZeRO-2 estimate is 2·n + 18·n/N since its PR #5099) beside the ZeRO-2 and ZeRO-3
lines, and the 80 GB line. Plain fp32 training and bf16 with full recomputation peak within 1%
of each other at every count: the grey line is drawn as a band under the blue one. Right: the KV cache of one sequence against the
context length for LLaMA-2 7B and 70B, LLaMA-3 8B and Mixtral 8x7B (bf16): grouped-query
attention keeps the 70B model's cache below the 7B's. Formulas only (:mod:`tinymem.planner`);
the sweep takes a second.
"""
from ..measure.claims import Claim
from ..planner import architectures, conventions, fits, inference
from ..planner.terms.analytic import Stack
from .plan_plots import draw, fp32_beside_bf16

NAME = "plan"
ORDER = 96
FIGURES = ["plan.png"]
ARCH = "llama2-70b"
STACKS = {"fp32 + Adam, data parallel": Stack("fp32"),
          "bf16 + full recompute, data parallel": Stack("bf16", recompute="full"),
          "+ ZeRO-1": Stack("bf16", recompute="full", zero=1), "+ ZeRO-2": Stack("bf16", recompute="full", zero=2),
          "+ ZeRO-3": Stack("bf16", recompute="full", zero=3),
          "+ ZeRO-Offload (not built by tinymem)": Stack("bf16", recompute="full", zero=3, offload="zero-offload")}
DEEPSPEED = {"DeepSpeed ZeRO-2 estimate": 2, "DeepSpeed ZeRO-3 estimate": 3}
INFERENCE = ["llama2-7b", "llama2-70b", "llama3-8b", "mixtral-8x7b"]


def run(quick=False, device="cpu"):
    arch = architectures.get_arch(ARCH)
    gpus = [2 ** k for k in range(0, 11, 2 if quick else 1)]
    lines = {name: [fits.run(arch, 1, stack._replace(ranks=g)).peak for g in gpus] for name, stack in STACKS.items()}
    deepspeed = {name: [conventions.device_bytes(conventions.rows(arch, Stack("bf16", zero=z, ranks=g), "deepspeed"))
                        for g in gpus] for name, z in DEEPSPEED.items()}
    contexts = [2 ** k for k in range(10, 18, 2 if quick else 1)]
    kv = {name: [inference.kv_cache_bytes(name, 1, s) for s in contexts] for name in INFERENCE}
    return {"config": {"arch": ARCH, "micro_batch": 1, "seq": arch.seq, "gpus": gpus, "contexts": contexts,
                       "gpu_memory_gb": 80, "kv_bytes": 2},
            "params": architectures.parameter_count(arch), "largest_module": architectures.largest_module(arch),
            "peaks": lines, "deepspeed": deepspeed, "kv_cache": kv,
            "kv_shapes": {name: {"layers": architectures.get_arch(name).layers,
                                 "kv_heads": architectures.kv_heads(architectures.get_arch(name)),
                                 "head_dim": architectures.get_arch(name).hidden // architectures.get_arch(name).heads}
                          for name in INFERENCE}}


def _deepspeed_gap(r):
    """Largest relative gap between the records and DeepSpeed's formulas, re-stated here from
    ``estimate_zero2/3_model_states_mem_needs`` of DeepSpeed v0.19.6 (commit edaa722; GPU bytes,
    no offload)."""
    n, big = r["params"], r["largest_module"]
    worst = 0.0
    for k, g in enumerate(r["config"]["gpus"]):
        theirs = {2: 2 * n + int(18 * n / g), 3: 4 * big + int(18 * n / g)}
        for name, stage in DEEPSPEED.items():
            worst = max(worst, abs(r["deepspeed"][name][k] - theirs[stage]) / theirs[stage])
    return worst, worst < 1e-3


def _deepspeed_below(r):
    """DeepSpeed's estimates over tinymem's peak of the same stage, the largest ratio: below 1 at
    every count, as they count model states only."""
    worst = max(d / p for name, stage in DEEPSPEED.items()
                for d, p in zip(r["deepspeed"][name], r["peaks"][f"+ ZeRO-{stage}"]))
    return worst, worst < 1


def _fewest(r, name):
    memory = r["config"]["gpu_memory_gb"] * 1e9
    return next((g for g, peak in zip(r["config"]["gpus"], r["peaks"][name]) if peak <= memory), None)


def _kv_formula(r):
    """Largest gap between the recorded KV cache and 2·L·kv·d·S·2 bytes."""
    worst = 0
    for name, sizes in r["kv_cache"].items():
        shape = r["kv_shapes"][name]
        for s, value in zip(r["config"]["contexts"], sizes):
            worst = max(worst, abs(value - 2 * shape["layers"] * shape["kv_heads"] * shape["head_dim"] * s * 2))
    return worst, worst == 0


CLAIMS = [
    Claim("deepspeed_estimators", "in DeepSpeed's convention the planner's ZeRO-2 and ZeRO-3 model states equal "
          "DeepSpeed's estimators at every GPU count (largest relative difference)", _deepspeed_gap),
    Claim("deepspeed_below", "DeepSpeed's estimates lie below tinymem's peak of the same ZeRO stage at every GPU "
          "count: they count model states only (largest ratio)", _deepspeed_below),
    Claim("fp32_beside_bf16", "plain fp32 training peaks within 1% of bf16 with full recomputation at every GPU "
          "count: the masters and fp32 gradients bf16 adds weigh what its half activations and recompute save "
          "(largest relative gap)", lambda r: (fp32_beside_bf16(r), fp32_beside_bf16(r) < 0.01)),
    Claim("zero3_fits", "LLaMA-2 70B trains in 80 GB per GPU with ZeRO-3 (fewest GPUs of the sweep), and "
          "plain data parallel never fits", lambda r: (_fewest(r, "+ ZeRO-3"), _fewest(r, "+ ZeRO-3") is not None
                                                       and _fewest(r, "bf16 + full recompute, data parallel") is None)),
    Claim("kv_cache_formula", "the KV cache is 2·layers·kv_heads·head_dim·context·2 bytes (largest difference)",
          _kv_formula),
    Claim("gqa_smaller", "grouped-query attention: LLaMA-2 70B's KV cache is smaller than LLaMA-2 7B's at every "
          "context (ratio)", lambda r: (r["kv_cache"]["llama2-70b"][0] / r["kv_cache"]["llama2-7b"][0],
                                        all(a < b for a, b in zip(r["kv_cache"]["llama2-70b"],
                                                                  r["kv_cache"]["llama2-7b"])))),
]


def plot(records, outdir):
    return draw(records, outdir, FIGURES[0])
