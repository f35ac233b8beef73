"""The closed form's formulas against the published numbers and against tinymem's own tables."""
import math
import random

import pytest

from tinymem import cli, models
from tinymem.optim.table import CONFIGS
from tinymem.planner import activations, analytic, architectures, fits
from tinymem.planner.terms.analytic import Stack
from tinymem.planner.terms.states import optimizer_state_bytes


# -- model states -----------------------------------------------------------------------------
def test_zero_mode_reproduces_the_zero_paper_for_7_5b_parameters_on_64_gpus():
    gb = [sum(analytic.model_states(7.5e9, stage, 64, "adam", "mixed").values()) / 1e9 for stage in range(4)]
    assert [round(x, 1) for x in gb] == [120.0, 31.4, 16.6, 1.9]


def test_model_states_split_by_stage_and_move_to_the_host():
    n, ranks = 1 << 20, 8
    fp32 = [analytic.model_states(n, s, ranks, "Adam", "fp32") for s in range(4)]
    assert fp32[0] == {"parameter": 4 * n, "gradient": 4 * n, "optimizer": 8 * n}
    assert fp32[1]["optimizer"] == 8 * n // ranks and fp32[2]["gradient"] == 4 * n // ranks
    assert fp32[3]["parameter"] == 4 * n // ranks
    sgd = analytic.model_states(n, 0, 1, "SGD", "fp32")
    assert sgd["optimizer"] == 0
    moved = analytic.model_states(n, 3, ranks, "Adam", "bf16", offload=True)
    assert moved["optimizer"] == 0 and moved["host"] == 12 * n // ranks


@pytest.mark.parametrize("label", list(CONFIGS))
def test_optimizer_state_of_every_optimizer_comes_from_the_optimizer_table(label):
    shapes = [s for _, s in architectures.parameter_shapes(architectures.tinymem_lm(64, 16, 32, 2, 2))]
    assert analytic.optimizer_bytes(label, shapes) == optimizer_state_bytes(label, shapes)
    states = analytic.model_states(shapes, 0, 1, label, "fp32")
    assert states["optimizer"] == optimizer_state_bytes(label, shapes)


def test_an_optimizer_whose_state_depends_on_shapes_needs_the_shapes():
    with pytest.raises(ValueError, match="depends on the parameter shapes"):
        analytic.model_states(10 ** 9, 0, 1, "Adafactor", "fp32")
    with pytest.raises(ValueError, match="unknown optimizer"):
        analytic.model_states(10, 0, 1, "Adamm")
    with pytest.raises(ValueError, match="ZeRO stage"):
        analytic.model_states(10, 4, 1)


# -- parameter counts ----------------------------------------------------------------------------
@pytest.mark.parametrize("name,count", [("gpt2", 124_439_808), ("gpt2-xl", 1_557_611_200),
                                        ("llama-7b", 6_738_415_616), ("gpt3-175b", 174_604_259_328)])
def test_parameter_counts_match_the_released_models(name, count):
    assert architectures.parameter_count(architectures.get_arch(name)) == count


def test_tinymem_shape_is_the_transformer_lm_parameter_by_parameter():
    arch = architectures.tinymem_lm(50, 12, 24, 3, 3)
    model = models.TransformerLM(50, 12, 24, 3, 3)
    assert [tuple(p.shape) for _, p in model.named_parameters()] == [s for _, s in architectures.parameter_shapes(arch)]
    assert [n for n, _ in model.named_parameters()] == [n for n, _ in architectures.parameter_shapes(arch)]


# -- activations --------------------------------------------------------------------------------
def test_korthikanti_mode_reproduces_their_formula_for_any_sizes():
    rng = random.Random(0)
    for _ in range(200):
        a = rng.choice([1, 2, 4, 8, 16, 32, 64, 96, 128])
        s, b, h = rng.randint(1, 8192), rng.randint(1, 16), a * rng.randint(1, 256)
        full = activations.activations_per_layer(s, b, h, a, mode="korthikanti")
        assert full == pytest.approx(s * b * h * (34 + 5 * a * s / h), rel=1e-12)
        assert activations.activations_per_layer(s, b, h, a, mode="korthikanti", recompute="selective") == 34 * s * b * h
        assert activations.activations_per_layer(s, b, h, a, mode="korthikanti", recompute="full") == 2 * s * b * h


def test_korthikanti_table_rows_for_gpt3_175b_term_by_term():
    """GPT-3 175B (s 2048, h 12288, a 96, micro-batch 1, t = 8): 5as/h = 80, so the rows are
    s·b·h times 114, 23, 14.25, 13, 4.25 and 2."""
    rows = activations.korthikanti_table(2048, 1, 12288, 96, tensor_parallel=8)
    sbh = 2048 * 12288
    assert [r["terms"] / sbh for r in rows] == pytest.approx([114, 23, 14.25, 13, 4.25, 2], rel=1e-12)
    for r in rows:
        assert r["terms"] == pytest.approx(r["formula"], rel=1e-12)
    terms = activations.layer_terms(2048, 1, 12288, 96, mode="korthikanti")
    assert [t.formula for t in terms][:5] == ["2sbh", "4sbh", "2as²b", "as²b", "2as²b"]


def test_tinymem_mode_counts_every_saved_tensor_of_the_block():
    s, b, h, a = 16, 4, 32, 2
    n = s * b
    # fp32: 16 values of N·h (ln1, qkv input, q k v, projection input, ln2, fc1 input, 4h GELU
    # input, 4h fc2 input), 2 of N (1/std), a·b·s² weights; 4 bytes each.
    assert activations.activations_per_layer(s, b, h, a) == 4 * (16 * n * h + 2 * n + a * b * s * s)
    assert activations.activations_per_layer(s, b, h, a, storage="bf16") == 2 * (16 * n * h + 2 * n + a * b * s * s)
    chunked = activations.activations_per_layer(s, b, h, a, attention="chunked")
    assert chunked == 4 * (17 * n * h + 2 * n + a * b * s)
    assert activations.activations_per_layer(s, b, h, a, recompute="full") == 4 * n * h
    assert activations.stored_bytes(1000, "int8") == 268 * math.ceil(1000 / 256)


def test_korthikanti_mode_counts_a_llama_layer_by_the_papers_rules():
    """16-bit values, no dropout masks (LLaMA trains without dropout), SwiGLU's four s·b·f
    tensors, RMSNorm's input as LayerNorm's: 16·sbh + 8·sbf + 2·as²b; grouped-query attention
    saves k and v of s·b·kv values (kv = 8 heads of 128 for LLaMA-2 70B)."""
    s, b = 2048, 1
    for name, kv in (("llama-7b", 4096), ("llama2-70b", 1024)):
        arch = architectures.get_arch(name)
        h, a, f = arch.hidden, arch.heads, arch.ffn
        terms = activations.layer_terms(s, b, h, a, mode="korthikanti", ffn=f, mlp="swiglu", norm="rmsnorm",
                                        kv_heads=architectures.kv_heads(arch))
        expected = 12 * s * b * h + 4 * s * b * kv + 8 * s * b * f + 2 * a * s * s * b
        assert sum(t.bytes for t in terms) == expected, name
    result = analytic.breakdown("llama2-70b", 1, Stack("bf16", recompute="full"), mode="korthikanti")
    assert result.peak > 0
    tinymem = activations.layer_terms(2048, 1, 4096, 32, mlp="swiglu", norm="rmsnorm", ffn=11008, storage="bf16")
    assert any("SiLU" in t.name for t in tinymem)


# -- the breakdown and the stacks -------------------------------------------------------------------
def test_breakdown_peak_is_its_largest_moment_and_buckets_cover_every_moment():
    result = analytic.breakdown("gpt3-6.7b", 1, Stack("bf16", recompute="full", zero=3, ranks=8))
    assert result.peak == max(sum(m.values()) for m in result.moments.values())
    for moment in result.moments.values():
        for bucket, value in moment.items():
            assert result.buckets[bucket] >= value
    with pytest.raises(ValueError, match="unknown recompute"):
        analytic.breakdown("gpt2", 1, Stack(recompute="some"))


def test_a_pipeline_stage_holds_its_layers_and_the_busier_end_of_the_model():
    """The first stage holds the token and position tables, the last the final norm and the
    head (for a tied head, a copy of the token table): counted by hand from the shapes."""
    for name in ("gpt3-175b", "llama-7b"):
        arch = architectures.get_arch(name)
        h, v, s = arch.hidden, arch.vocab, arch.seq
        first = v * h + (s * h if arch.positions == "learned" else 0)
        last = (2 * h if arch.norm == "layernorm" else h) + v * h  # final norm, head (tied or not)
        for p in (2, 8):
            stage = math.ceil(arch.layers / p) * architectures.layer_parameter_count(arch) + max(first, last)
            result = analytic.breakdown(arch, p, Stack("bf16", recompute="full", pipeline=p, micro_batches=p))
            assert result.buckets["parameter"] == 2 * stage, (name, p)


def test_gpt3_175b_does_not_fit_eight_80gb_gpus_and_needs_more_with_each_stack():
    rows, proposal = fits.plan_arch("gpt3-175b", 8, 80e9)
    assert proposal is None
    needs = {r.name: r.fewest_gpus for r in rows}
    assert needs["fp32 + Adam, data parallel"] is None  # 16 bytes per parameter on every GPU
    # ZeRO-Offload fits 8 GPUs by formula (2n/8 of half weights), but tinymem cannot build half
    # precision with the optimizer on the host, so it is shown and not proposed.
    offload = next(r for r in rows if r.stack.offload == "zero-offload")
    assert needs["+ ZeRO-3"] > 8 >= offload.fewest_gpus and offload.refused
    zero3 = next(r for r in rows if r.name == "+ ZeRO-3")
    fewer = analytic.breakdown("gpt3-175b", 1, zero3.stack._replace(ranks=zero3.fewest_gpus - 1)).peak
    assert fewer > 80e9 >= analytic.breakdown("gpt3-175b", 1, zero3.stack._replace(ranks=zero3.fewest_gpus)).peak


def test_a_7b_model_fits_eight_80gb_gpus_once_the_optimizer_state_is_sharded():
    rows, proposal = fits.plan_arch("llama-7b", 8, 80e9)
    assert proposal is not None and proposal.stack.zero >= 1
    assert not next(r for r in rows if r.name == "+ full recompute").fits


def test_pipeline_rows_on_one_gpu_still_say_how_many_stages_would_fit():
    # On one GPU the pipeline rows' Stack has one stage: their fewest count grows the stages
    # (was None, "no count does", though 7 stages of llama-7b fit 24 GB).
    rows, _ = fits.plan_arch("llama-7b", 1, 24e9)
    pipe = next(r for r in rows if r.name == "bf16 + full recompute, 1F1B pipeline")
    stages = pipe.stack._replace(pipeline=2)
    assert pipe.fewest_gpus == fits.fewest_gpus(architectures.get_arch("llama-7b"), 1, stages, 24e9) == 7


def test_recomputation_costs_a_third_more_and_selective_far_less():
    arch = architectures.get_arch("gpt3-175b")
    full = fits.relative_time(arch, 1, Stack("bf16", recompute="full"))
    selective = fits.relative_time(arch, 1, Stack("bf16", recompute="selective"))
    plain_half = fits.relative_time(arch, 1, Stack("bf16"))
    assert plain_half == pytest.approx(0.5)  # tensor cores: bf16 at twice the TF32 rate
    # Narayanan et al.'s count, written out here: a layer's forward is 24 b s h^2 + 4 b s^2 h flops,
    # the head's 2 b s h V, a step three forwards. Full recomputation redoes every layer but the
    # last (its forward has just run); selective only the attention core, 4 b s^2 h per layer.
    L, s, h, V = 96, 2048, 12288, 50257
    layer = 24 * s * h * h + 4 * s * s * h
    step = 3 * (L * layer + 2 * s * h * V)
    assert full / plain_half == pytest.approx(1 + (L - 1) * layer / step, rel=1e-12)
    assert selective / plain_half == pytest.approx(1 + L * 4 * s * s * h / step, rel=1e-12)
    # (These counts come to 1.32 for full and 1.02 for selective at GPT-3 175B's sizes.)


def test_cli_plan_arch_prints_the_stacks_and_the_fewest_gpus(capsys):
    code = cli.main(["plan", "--arch", "gpt3-175b", "--gpus", "8", "--gpu-memory", "80GB"])
    out = capsys.readouterr().out
    assert code == 1 and "no stack fits 8 x 80GB" in out and "fewest GPUs" in out and "+ ZeRO-3" in out
    assert cli.main(["plan", "--arch", "gpt2-xl", "--gpus", "1", "--gpu-memory", "80GB"]) == 0
    assert cli.main(["plan", "--layers", "2", "--hidden", "64", "--gpus", "1"]) == 2
    assert "--heads, --seq, --vocab" in capsys.readouterr().err
    assert cli.main(["plan", "--arch", "gpt5"]) == 2
    assert cli.main(["plan"]) == 2


def test_adam8bit_scratch_follows_the_chunk_of_the_backend():
    """Adam8bit updates in chunks of 128K elements on NumPy and of up to 16M on a GPU (whole
    tensors, one kernel launch per pass): 24 bytes per element of one chunk either way."""
    from tinymem.planner.terms.sharding import scratch_bytes
    big = (4096, 11008)  # a LLaMA-7B MLP matrix: 45M elements, several GPU chunks
    assert scratch_bytes("Adam8bit", big, "numpy") == 24 * 2 ** 17
    assert scratch_bytes("Adam8bit", big, "gpu") == 24 * 2 ** 24
    assert scratch_bytes("Adam8bit", (1024, 1024), "gpu") == 24 * 1024 * 1024  # the whole tensor
    assert scratch_bytes("Adam", big, "gpu") == scratch_bytes("Adam", big, "numpy") == 2 * 4 * 4096 * 11008
