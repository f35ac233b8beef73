"""The models people train today: grouped-query attention, mixtures of experts, and the
LLaMA-2/3 and Mixtral presets at their published parameter counts."""
import pytest

from tinymem.planner import activations, analytic, architectures
from tinymem.planner.terms.analytic import Stack

PUBLISHED = {"llama2-7b": 6.74e9, "llama2-13b": 13.0e9, "llama2-70b": 69.0e9, "llama3-8b": 8.03e9,
             "llama3-70b": 70.6e9, "mixtral-8x7b": 46.7e9}


@pytest.mark.parametrize("name,count", list(PUBLISHED.items()))
def test_presets_have_the_published_parameter_counts(name, count):
    assert architectures.parameter_count(architectures.get_arch(name)) == pytest.approx(count, rel=0.005)


def test_grouped_query_attention_projects_k_and_v_to_kv_heads():
    """LLaMA-2 70B counted as 78.4B before: k and v are 8 heads of 128, not 64."""
    arch = architectures.get_arch("llama2-70b")
    h, f, kv = 8192, 28672, 8 * 128
    layer = 2 * h * h + 2 * h * kv + 3 * h * f + 2 * h  # q, o; k, v; gate, up, down; two RMSNorms
    assert architectures.layer_parameter_count(arch) == layer
    full = arch._replace(kv_heads=None)
    assert architectures.parameter_count(full) - architectures.parameter_count(arch) == 80 * 2 * h * (h - kv)


def test_a_mixture_counts_every_expert_and_saves_activations_for_top_k():
    arch = architectures.get_arch("mixtral-8x7b")
    h, f = 4096, 14336
    dense = arch._replace(experts=1, top_k=1)
    assert architectures.layer_parameter_count(arch) - architectures.layer_parameter_count(dense) == 7 * 3 * h * f + 8 * h
    s, b = 1024, 1
    options = dict(ffn=f, mlp="swiglu", norm="rmsnorm", kv_heads=8, storage="bf16")
    moe = activations.activations_per_layer(s, b, h, 32, experts=8, top_k=2, **options)
    one = activations.activations_per_layer(s, b, h, 32, **options)
    # top 2: the MLP's input (N·h) and its four N·f tensors once more, the router's N·E
    # probabilities once, 2 bytes a value
    assert moe - one == 2 * (s * b * h + 4 * s * b * f) + 2 * s * b * 8


@pytest.mark.parametrize("name", ["gpt3-175b", "llama2-70b", "llama3-8b", "mixtral-8x7b"])
def test_korthikanti_mode_answers_for_every_preset(name):
    result = analytic.breakdown(name, 1, Stack("bf16", recompute="selective", zero=3, ranks=64), mode="korthikanti")
    assert result.peak > 0 and result.buckets["activation"] > 0


def test_largest_module_is_what_deepspeed_calls_the_largest_layer():
    assert architectures.largest_module(architectures.get_arch("llama3-8b")) == 128256 * 4096
    gpt2 = architectures.get_arch("gpt2")  # a tied head: the token table, 50257 x 768
    assert architectures.largest_module(gpt2) == max(50257 * 768, 3 * 768 * 768 + 3 * 768)
