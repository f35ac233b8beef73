"""``tinymem plan``: predict the memory of a training step before running it, for every
combination of techniques, and propose the fastest that fits a device budget.

    inputs.py       the door: a stack, a device, a model checked once (every refusal of a stack)
                    and resolved into the values the terms below read
    model/          the networks the closed form counts: architectures, presets, parameter counts
    terms/          the closed form's terms: precision widths, model states (ZeRO, offload),
                    activations, the moments of a step, one step's buckets, inference, fine-tuning
    conventions.py  the model states term by term as tinymem, DeepSpeed and the ZeRO paper count
    search/         what fits on N GPUs, the fewest GPUs, 3D layouts; the probe planner's proposal
    report/         ``tinymem plan``: its flags, each mode's run and table, ``--explain``, timing
    measured/       the probe's models and steps, the two-point probe, one verified step, the
                    closed form against the ledger, the technique waterfall

    from tinymem import planner
    result = planner.plan("mlp", "64,1024,1024,10", batch_size=512, budget="64MB")
    print(planner.summary(result))

    from tinymem.planner import analytic
    analytic.breakdown("gpt3-175b", 1, analytic.Stack("bf16", recompute="full", zero=3, ranks=64)).peak
"""
# The modules lessons and tests reach as ``tinymem.planner.NAME``.
import sys

from . import conventions, inputs
from .measured import exactness, probe, recipe, stack, verify, workloads
from .measured.probe import predict, run_probe
from .measured.recipe import Combination, TrainingStep, supported
from .measured.verify import measure_step
from .measured.workloads import workload
from .model import architectures
from .search import fits, parallel
from .search import plan as plan_module
from .search.plan import Plan, Row, combinations, describe, plan, summary, table_rows, verify_rows, with_budget
from .terms import activations, analytic, finetune, inference, moments, precision, sharding, states
from .terms.states import model_states

# The flat layout's dotted paths (``from tinymem.planner.analytic import Stack``,
# ``import tinymem.planner.recipe``) name the same modules in their folders.
for _module in (activations, analytic, architectures, exactness, finetune, fits, inference, moments, parallel,
                precision, probe, recipe, sharding, stack, states, verify, workloads):
    sys.modules.setdefault(f"{__name__}.{_module.__name__.rpartition('.')[2]}", _module)
sys.modules.setdefault(f"{__name__}.plan", plan_module)
del _module, plan_module

__all__ = ["plan", "Plan", "Row", "combinations", "describe", "summary", "table_rows", "verify_rows", "with_budget",
           "predict", "run_probe", "Combination", "TrainingStep", "supported", "model_states",
           "measure_step", "workload"]
