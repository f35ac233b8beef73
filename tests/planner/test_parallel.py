"""3D parallelism against Korthikanti et al. (2022): GPT-3 175B at t = 8, p = 8."""
import pytest

from tinymem import cli
from tinymem.planner import analytic, architectures, fits, parallel
from tinymem.planner.analytic import Stack

GPT3 = architectures.get_arch("gpt3-175b")
FIRST_STAGE = [({}, 55.6), ({"sequence_parallel": True}, 34.4),
               ({"sequence_parallel": True, "recompute": "selective"}, 10.3), ({"recompute": "full"}, 4.8)]


@pytest.mark.parametrize("change,gb", FIRST_STAGE, ids=["tensor", "+ sequence", "+ selective", "full recompute"])
def test_the_first_stage_of_gpt3_175b_at_t8_p8_holds_the_papers_activations(change, gb):
    stack = Stack("bf16", tensor=8, pipeline=8, micro_batches=8, **change)
    formula = parallel.stage_activations(GPT3, 1, stack)
    assert round(formula / 1e9, 1) == gb
    # The paper's count by hand: 8 micro-batches in flight x 12 layers = 96 layers' worth.
    s, h, a, t = 2048, 12288, 96, 8
    per_layer = {(False, "none"): 10 + 24 / t + 5 * a * s / (h * t), (True, "none"): 34 / t + 5 * a * s / (h * t),
                 (True, "selective"): 34 / t, (False, "full"): 2}[(stack.sequence_parallel, stack.recompute)]
    assert formula == pytest.approx(96 * s * h * per_layer, rel=1e-12)
    # The breakdown adds what lies outside the layers: token ids, the final norm, the head's
    # input and the fp32 loss probabilities (4·s·V), about 0.5 GB here, and the current
    # micro-batch's last-layer copies.
    result = analytic.breakdown(GPT3, 8, stack, mode="korthikanti")
    assert formula <= result.buckets["activation"] <= formula + 4 * s * 50257 + 6 * s * h * 12 + 8 * s * 8


def test_layouts_cover_every_split_of_the_gpus():
    layouts = parallel.layouts(GPT3, 64)
    assert all(t * p * d == 64 and t <= 8 for t, p, d in layouts)
    assert (8, 8, 1) in layouts and (1, 1, 64) in layouts and (8, 1, 8) in layouts
    llama = architectures.get_arch("llama2-70b")  # 8 kv heads: t = 8 splits them one a rank
    assert max(t for t, _, _ in parallel.layouts(llama, 64)) == 8


def test_tensor_parallel_ranks_hold_a_tth_of_the_model():
    one = analytic.breakdown(GPT3, 1, Stack("bf16", recompute="full"))
    eight = analytic.breakdown(GPT3, 1, Stack("bf16", recompute="full", tensor=8))
    assert eight.buckets["optimizer"] == pytest.approx(one.buckets["optimizer"] / 8, rel=1e-12)
    with pytest.raises(ValueError, match="give Stack.tensor > 1"):
        analytic.breakdown(GPT3, 1, Stack(sequence_parallel=True))
    with pytest.raises(ValueError, match="do not split"):
        analytic.breakdown("gpt2-xl", 1, Stack(tensor=8))  # 25 heads


def test_the_search_proposes_a_3d_layout_where_only_one_fits():
    """GPT-3 175B on 64 x 80 GB: no data-parallel or ZeRO stack fits that tinymem can build;
    tensor x8 with a pipeline does."""
    rows, proposal = fits.plan_arch(GPT3, 64, 80e9)
    assert proposal is not None and proposal.stack.tensor > 1 and proposal.breakdown.peak <= 80e9
    t, p, d = proposal.stack.tensor, proposal.stack.pipeline, proposal.stack.ranks
    assert t * p * d == 64


def test_cli_flags_choose_a_3d_layout(capsys):
    code = cli.main(["plan", "--arch", "gpt3-175b", "--tensor-parallel", "8", "--pipeline", "8",
                     "--data-parallel", "1", "--sequence-parallel", "--recompute", "selective", "--mode", "korthikanti"])
    out = capsys.readouterr().out
    assert code == 0 and "tensor x8 + sequence parallel" in out and "1F1B pipeline x8" in out
    assert cli.main(["plan", "--arch", "gpt3-175b", "--tensor-parallel", "5", "--pipeline", "8"]) == 2
    assert "do not split" in capsys.readouterr().err
