"""Inference by formula: weights at a width, the KV cache, the workspace; accelerate's
``estimate-memory`` re-stated from its source (``gather_data`` in
``accelerate/commands/estimate.py``: the fp32 size of the ``AutoModel``, divided by 2, 4 or 8)."""
import pytest

from tinymem import cli
from tinymem.planner import architectures, inference


def test_the_kv_cache_is_two_tensors_per_layer_of_kv_heads():
    # LLaMA-3 8B: 32 layers, 8 kv heads of 128, 8192 tokens, bf16: 2·32·8·128·8192·2 bytes
    assert inference.kv_cache_bytes("llama3-8b", 1, 8192) == 2 * 32 * 8 * 128 * 8192 * 2 == 1 << 30
    llama = architectures.get_arch("llama2-70b")
    full = llama._replace(kv_heads=None)  # without grouped-query attention: 64 heads
    assert inference.kv_cache_bytes(full, 4, 4096) == 8 * inference.kv_cache_bytes(llama, 4, 4096)
    assert inference.kv_cache_bytes(llama, 2, 100, kv_bytes=1) * 4 == inference.kv_cache_bytes(llama, 4, 100)


@pytest.mark.parametrize("name,head", [("llama2-7b", 32000 * 4096), ("llama3-8b", 128256 * 4096),
                                       ("gpt2", 0)])
@pytest.mark.parametrize("weights,divisor", [("fp32", 1), ("fp16", 2), ("int8", 4), ("int4", 8)])
def test_weights_agree_with_accelerate_in_its_convention(name, head, weights, divisor):
    arch = architectures.get_arch(name)
    n = architectures.parameter_count(arch)
    auto_model = n - head  # AutoModel builds the base model: no LM head (GPT-2's is tied: counted once)
    theirs = inference.accelerate_estimate(arch, weights)
    assert theirs["total"] == 4 * auto_model / divisor
    ours = next(t.bytes for t in inference.plan(arch, 1, 16, weights) if t.name.startswith("weights"))
    assert ours == 4 * n / divisor  # tinymem counts the head: generation needs it
    block = architectures.layer_parameter_count(arch)
    assert theirs["largest_layer"] == 4 * max(arch.vocab * arch.hidden, block) / divisor


def test_quantized_weights_keep_scales_and_dequantize_the_largest_matrix():
    rows = {t.name: t for t in inference.plan("llama3-8b", 1, 8192, "int4")}
    n = architectures.parameter_count(architectures.get_arch("llama3-8b"))
    assert rows["quantization scales (fp16 per 128)"].bytes == 2 * n / 128
    bf16 = {t.name: t for t in inference.plan("llama3-8b", 1, 8192, "bf16")}
    assert "quantization scales (fp16 per 128)" not in bf16
    # int4 prefill dequantizes the largest matrix (the 128256 x 4096 head) to bf16
    assert (rows["largest layer's workspace"].bytes - bf16["largest layer's workspace"].bytes) == 2 * 128256 * 4096


@pytest.mark.parametrize("kwargs,message", [(dict(weights="int3"), "unknown weights 'int3'"),
                                           (dict(context=0), "context must be a positive integer"),
                                           (dict(batch=1.5), "batch must be a positive integer"),
                                           (dict(kv_bytes=3), "kv_bytes must be")])
def test_bad_inference_input_gets_a_clear_error(kwargs, message):
    with pytest.raises(ValueError, match=message):
        inference.plan("llama3-8b", **kwargs)


def test_cli_inference_prints_the_terms_and_accelerate_beside_them(capsys):
    assert cli.main(["plan", "--inference", "--arch", "llama3-8b", "--context", "8192", "--weights", "int4"]) == 0
    out = capsys.readouterr().out
    for text in ("weights (int4)", "KV cache (bf16)", "largest layer's workspace", "CUDA context + fragmentation",
                 "accelerate estimate-memory", "fits one 80GB GPU"):
        assert text in out, text
    assert cli.main(["plan", "--inference", "--arch", "llama2-70b", "--gpu-memory", "24GB"]) == 1
    assert cli.main(["plan", "--inference", "--arch", "llama3-8b", "--cuda-context", "90GB"]) == 2
    assert "leaves nothing" in capsys.readouterr().err


def test_the_allowance_takes_the_context_and_fragmentation_off_what_a_step_may_use(capsys):
    args = ["plan", "--arch", "llama-7b", "--gpus", "8", "--gpu-memory", "80GB"]
    assert cli.main(args + ["--cuda-context", "2GB", "--fragmentation", "0.25"]) == 0
    out = capsys.readouterr().out
    assert f"a step may peak at {78 / 1.25:.1f} of 80GB" in out and "an A100 ratio" in out
    assert cli.main(args + ["--fragmentation", "1.5"]) == 2
