"""The planner's ``torch`` mode against PyTorch 2.13's measured step on the CPU (fp32: within 1%;
bf16 autocast: within 3%).

Each configuration is built by ``tinymem.measure.torch_models`` and measured by
``tinymem.measure.torch_step.measure_torch_step`` (the second step, AdamW's state alive); the
planner predicts it with arithmetic only. Together they cover every option: nanoGPT-style GPTs
and LLaMA-style models, tied and untied, dropout on and off, math attention and SDPA, the
three AdamW implementations, logits held or not, every block checkpointed or none; and each moment of the step is the peak of
one of them (the cross-entropy backward, a block's backward, the final norm's, the end of
backward, the optimizer's update).
"""
import pytest

from tinymem.planner.inputs import TorchOptions
from tinymem.planner.model.architectures import custom
from tinymem.planner.terms import torch_step

pytestmark = pytest.mark.torch

LLAMA = dict(mlp="swiglu", norm="rmsnorm", bias=False, positions="rotary")

CASES = [  # (sizes, batch, options, the moment that peaks)
    (dict(layers=2, hidden=64, heads=4, seq=32, vocab=256, tied=True), 2, {}, "loss backward"),
    (dict(layers=2, hidden=32, heads=2, seq=64, vocab=512), 2, dict(hold_logits=False), "loss backward"),
    (dict(layers=4, hidden=128, heads=4, seq=32, vocab=64, tied=True), 2, {}, "optimizer step"),
    (dict(layers=3, hidden=64, heads=2, seq=16, vocab=50, dropout=0.2), 2,
     dict(optimizer="foreach", hold_logits=False), "optimizer step"),
    (dict(layers=2, hidden=32, heads=4, seq=64, vocab=32, dropout=0.1), 4, dict(optimizer="fused"),
     "block backward (last layer)"),
    (dict(layers=2, hidden=32, heads=4, seq=64, vocab=32), 4, dict(optimizer="fused", attention="sdpa"),
     "block backward (last layer)"),
    (dict(layers=2, hidden=48, heads=4, seq=20, vocab=100, tied=True, dropout=0.1), 2, dict(attention="sdpa"),
     "block backward (last layer)"),  # SDPA's math kernel: dropout on the CPU
    (dict(layers=1, hidden=128, heads=8, seq=16, vocab=1000, tied=True), 1,
     dict(optimizer="fused", hold_logits=False), "end of backward"),
    (dict(layers=2, hidden=48, heads=4, seq=20, vocab=100, ffn=72, **LLAMA), 2, dict(attention="sdpa"),
     "loss backward"),
    (dict(layers=2, hidden=64, heads=4, seq=64, vocab=32, ffn=96, **LLAMA), 4, dict(optimizer="fused"),
     "head backward"),
    (dict(layers=2, hidden=48, heads=4, seq=20, vocab=100, tied=True), 2, dict(checkpoint=True),
     "block backward (first layer)"),
    (dict(layers=3, hidden=64, heads=4, seq=32, vocab=32, ffn=96, **LLAMA), 4,
     dict(checkpoint=True, attention="sdpa", optimizer="fused"), "block backward (first layer)"),
    (dict(layers=2, hidden=32, heads=4, seq=64, vocab=32, dropout=0.1), 4, dict(optimizer="fused", checkpoint=True),
     "block backward (first layer)"),
]
AUTOCAST = [  # bf16 autocast: within 3%
    (dict(layers=2, hidden=64, heads=4, seq=32, vocab=256, tied=True), 2, {}, "loss backward"),
    (dict(layers=4, hidden=128, heads=4, seq=32, vocab=64, tied=True), 8, dict(optimizer="fused"),
     "block backward (last layer)"),
    (dict(layers=2, hidden=32, heads=4, seq=64, vocab=32, dropout=0.1), 4, dict(optimizer="fused"), "loss backward"),
    (dict(layers=2, hidden=48, heads=4, seq=20, vocab=100, tied=True), 2, dict(checkpoint=True, optimizer="fused"),
     "block backward (first layer)"),
    (dict(layers=2, hidden=32, heads=4, seq=128, vocab=16, ffn=64, **LLAMA), 4, dict(optimizer="fused"),
     "block backward (last layer)"),
    (dict(layers=3, hidden=64, heads=4, seq=32, vocab=32, ffn=96, **LLAMA), 4, dict(attention="sdpa", optimizer="fused"),
     "head backward"),
]


def measured(arch, batch, options):
    from tinymem.measure import torch_models
    from tinymem.measure.torch_step import measure_torch_step

    run = torch_models.build(arch, batch, **options._asdict())
    return measure_torch_step(run.step, model=run.model, optimizer=run.optimizer, steps=2, inputs=run.inputs)


FAST = {"fp32-0", "fp32-3", "fp32-6", "fp32-10", "fp32-11", "bf16-0", "bf16-3", "bf16-4"}  # every option


def params():
    """Every case; those outside :data:`FAST` (which still covers every option) marked slow."""
    cases = [(f"fp32-{i}", case + (0.01,)) for i, case in enumerate(CASES)]
    cases += [(f"bf16-{i}", (s, b, dict(o, precision="bf16-autocast"), m, 0.03)) for i, (s, b, o, m) in enumerate(AUTOCAST)]
    return [pytest.param(*case, id=name, marks=() if name in FAST else pytest.mark.slow) for name, case in cases]


@pytest.mark.parametrize("sizes, batch, options, moment, within", params())
def test_the_torch_mode_predicts_the_measured_peak(sizes, batch, options, moment, within):
    arch, options = custom(**sizes), TorchOptions(**options)
    predicted = torch_step.breakdown(arch, batch, options)
    step = measured(arch, batch, options)
    assert abs(predicted.peak / step.peak - 1) <= within, (predicted.peak, step.peak, step.op_at_peak)
    assert predicted.moment == moment
    assert predicted.buckets["parameter"] == step.buckets["parameter"]
    assert predicted.buckets["optimizer"] == step.buckets["optimizer"]


def test_a_tied_tables_two_gradients_are_in_flight_at_the_end_of_backward_as_measured():
    """The head's and the embedding's V x h gradients wait for their out-of-place sum: neither is
    the .grad yet (--verify-torch prints these buckets side by side)."""
    arch, options = custom(1, 128, 8, 16, 1000, tied=True), TorchOptions(optimizer="fused", hold_logits=False)
    predicted, step = torch_step.breakdown(arch, 1, options), measured(arch, 1, options)
    assert predicted.moment == "end of backward" and predicted.peak == step.peak
    assert {b: predicted.buckets[b] for b in ("gradient", "in_flight")} == \
        {b: step.buckets[b] for b in ("gradient", "in_flight")}
