"""``tinymem plan``: predict the memory of a training step before running it, for every
combination of techniques, and propose the fastest that fits a device budget.

    workloads.py  the models the planner knows, their batches, losses and checkpoint schedules
    recipe.py     a Combination of techniques and the training step it makes of a model
    states.py     parameter / gradient / optimizer bytes by formula (the DeepSpeed-style estimate)
    probe.py      activations and workspace: the real step at 2 and 3 samples, extrapolated
    timing.py     a coarse, calibrated time model
    plan.py       all combinations, which fit, the proposal
    verify.py     one real step: predicted against ledger against measured

The closed form, for models far past this machine (GPT-3, LLaMA-2/3, Mixtral):

    architectures.py  GPT-2/3, LLaMA-1/2/3, Mixtral and tinymem's own shapes (GQA, MoE), counts
    precision.py      each precision's bytes per weight, gradient, master, state: one value
    activations.py    saved tensors per layer: tinymem's count and Korthikanti et al.'s
    sharding.py       model states per rank: ZeRO 1-3, data parallel, offload, pipeline stages
    moments.py        the moments of a step (last layer, loss, recomputation, optimizer)
    analytic.py       breakdown(): every bucket of one step, per device
    conventions.py    the model states term by term as tinymem, DeepSpeed and the ZeRO paper count
    parallel.py       3D layouts (tensor x pipeline x data), Korthikanti's per-stage activations
    fits.py           technique stacks on N GPUs: which fit, fewest GPUs, time cost
    inference.py      generation: weights at a width, the KV cache, the workspace
    finetune.py       LoRA and QLoRA: frozen base, adapters with Adam
    arguments.py      ``tinymem plan``'s flags by mode; a flag the mode ignores is refused
    command.py        ``tinymem plan``: each mode's run, the table, ``--explain``
    exactness.py      the closed form against the ledger on a real small TransformerLM

    from tinymem import planner
    result = planner.plan("mlp", "64,1024,1024,10", batch_size=512, budget="64MB")
    print(planner.summary(result))

    from tinymem.planner import analytic
    analytic.breakdown("gpt3-175b", 1, analytic.Stack("bf16", recompute="full", zero=3, ranks=64)).peak
"""
from .plan import Plan, Row, combinations, describe, plan, summary, table_rows, verify_rows, with_budget
from .probe import predict, run_probe
from .recipe import Combination, TrainingStep, supported
from .states import model_states
from .verify import measure_step
from .workloads import workload

__all__ = ["plan", "Plan", "Row", "combinations", "describe", "summary", "table_rows", "verify_rows", "with_budget",
           "predict", "run_probe", "Combination", "TrainingStep", "supported", "model_states",
           "measure_step", "workload"]
