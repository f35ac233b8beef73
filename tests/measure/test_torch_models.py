"""The PyTorch reference models the torch mode is measured on: built from the planner's Arch
with the planner's parameter count, and refused where a layout is not theirs."""
import pytest

from tinymem.planner.model.architectures import LLAMA, custom, parameter_count
from tinymem.planner.terms.torch_step import parameter_sizes

pytestmark = pytest.mark.torch


@pytest.mark.parametrize("arch", [custom(2, 48, 4, 20, 100, tied=True), custom(2, 48, 4, 20, 100),
                                  custom(2, 40, 5, 30, 77, bias=False), custom(3, 64, 4, 16, 50, ffn=96, **LLAMA)],
                         ids=["gpt-tied", "gpt-untied", "gpt-no-bias", "llama"])
def test_the_model_has_the_planners_parameters_in_adamws_order(arch):
    from tinymem.measure import torch_models

    run = torch_models.build(arch, 2, optimizer="fused")
    sizes = [p.numel() for p in run.model.parameters()]
    assert sizes == parameter_sizes(arch)
    assert sum(sizes) == parameter_count(arch)
    assert [tuple(t.shape) for t in run.inputs] == [(2, arch.seq)] * 2
    logits = run.step()  # held by default, as nanoGPT's caller holds them
    assert tuple(logits.shape) == (2, arch.seq, arch.vocab)
    assert run.optimizer.state  # AdamW's state exists after one step
    assert torch_models.build(arch, 2, hold_logits=False).step() is None


def test_layouts_the_models_do_not_build_are_refused_naming_why():
    from tinymem.measure import torch_models

    with pytest.raises(ValueError, match="mixes GPT and LLaMA"):
        torch_models.build(custom(1, 32, 2, 8, 10, mlp="swiglu"), 1)
    with pytest.raises(ValueError, match="without dropout"):
        torch_models.build(custom(1, 32, 2, 8, 10, dropout=0.1, **LLAMA), 1)
    with pytest.raises(ValueError, match="optimizer must be one of"):
        torch_models.build(custom(1, 32, 2, 8, 10), 1, optimizer="adam")
