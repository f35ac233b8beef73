"""LoRA and QLoRA rows of the planner: the formula against published figures and, where the
LoRA technique is present, against the ledger of a real LoRA step."""
import numpy as np
import pytest

from tinymem import functional as F
from tinymem import cli, memory, models, optim
from tinymem.planner import architectures, finetune


def test_nf4_with_double_quantization_is_4_127_bits_a_weight():
    assert finetune.nf4_bits() == pytest.approx(4.127, abs=5e-4)  # QLoRA's paper: 4.127
    assert finetune.nf4_bits(double_quant=False) == 4.5


def test_rows_count_a_frozen_base_and_16_bytes_per_adapter_value():
    arch = architectures.get_arch("llama2-7b")
    h, f, layers = 4096, 11008, 32
    values = 16 * layers * (4 * (h + h) + 2 * (h + f) + (f + h))  # q k v o, gate up, down at r = 16
    n = architectures.parameter_count(arch)
    lora, qlora = finetune.rows(arch, rank=16)
    assert lora.adapters == qlora.adapters == 16 * values
    assert lora.base == 2 * n
    adapted = layers * (4 * h * h + 3 * h * f)
    assert qlora.base == pytest.approx(4.127 / 8 * adapted + 2 * (n - adapted), rel=1e-4)
    assert qlora.peak < lora.peak and lora.peak == lora.base + lora.adapters + lora.activation + lora.workspace
    with pytest.raises(ValueError, match="rank must be a positive integer"):
        finetune.rows(arch, rank=0)


def test_adapter_bytes_equal_the_ledger_of_a_real_lora_step():
    """A tinymem TransformerLM with rank-4 adapters on its MLP Linears, trained in fp32 with Adam:
    the ledger's gradient and optimizer peaks are the adapters' 4 and 8 bytes a value (the
    formula's 16 with the weight, whose bytes the frozen base's fp32 parameters hide)."""
    from tinymem.techniques import lora
    model = models.TransformerLM(64, 8, 32, 2, 2)
    lora.apply_lora(model, 4, targets=("*mlp*",))
    shapes = {}
    for _, module in lora.lora_modules(model):
        key = (module.out_features, module.in_features)
        shapes[key] = shapes.get(key, 0) + 1
    values = finetune.adapter_values(shapes, 4)
    assert values == sum(p.data.size for p in lora.trainable_parameters(model)) > 0
    opt = optim.Adam(lora.trainable_parameters(model), lr=1e-3)
    ids = np.arange(16).reshape(2, 8) % 64
    for _ in range(2):  # measured on the second step, when Adam's state exists
        opt.zero_grad()
        with memory.track(measure=False, timeline=False) as t:
            F.cross_entropy(model(ids).reshape(-1, 64), ids.reshape(-1)).backward()
            opt.step()
    peak = t.max_by_bucket()
    assert peak["gradient"] == 4 * values
    assert peak["optimizer"] == 8 * values


def test_cli_finetune_prints_lora_and_qlora(capsys):
    cli.main(["plan", "--arch", "llama2-70b", "--gpus", "1", "--gpu-memory", "80GB", "--finetune"])
    out = capsys.readouterr().out
    qlora = next(line for line in out.splitlines() if line.startswith("qlora"))
    lora = next(line for line in out.splitlines() if line.startswith("lora"))
    assert qlora.rstrip().endswith("yes") and lora.rstrip().endswith("no")  # 70B: 36 GB in NF4, 138 GB in bf16


@pytest.mark.parametrize("rank", [True, 0, -4, 2.0, "16"])
def test_rows_refuse_a_rank_that_is_not_a_whole_number_of_at_least_one(rank):
    with pytest.raises(ValueError, match="rank must be a positive integer"):  # True was rank 1
        finetune.rows("llama2-7b", rank)
