"""``tinymem plan --config FILE``: a Hugging Face ``config.json`` (GPT-2 and LLaMA families) or
nanoGPT's ``GPTConfig`` as JSON read into the planner's Arch; every refusal names the field."""
import json

import pytest

from tinymem import cli
from tinymem.planner.model import config_files
from tinymem.planner.model.architectures import Arch, get_arch, parameter_count

# As published on the Hugging Face hub (openai-community/gpt2, meta-llama/Llama-2-7b-hf)
GPT2 = {"activation_function": "gelu_new", "architectures": ["GPT2LMHeadModel"], "attn_pdrop": 0.1,
        "bos_token_id": 50256, "embd_pdrop": 0.1, "eos_token_id": 50256, "initializer_range": 0.02,
        "layer_norm_epsilon": 1e-05, "model_type": "gpt2", "n_ctx": 1024, "n_embd": 768, "n_head": 12, "n_layer": 12,
        "n_positions": 1024, "resid_pdrop": 0.1, "summary_activation": None, "summary_first_dropout": 0.1,
        "summary_proj_to_labels": True, "summary_type": "cls_index", "summary_use_proj": True,
        "task_specific_params": {"text-generation": {"do_sample": True, "max_length": 50}}, "vocab_size": 50257}
LLAMA2_7B = {"_name_or_path": "meta-llama/Llama-2-7b-hf", "architectures": ["LlamaForCausalLM"], "bos_token_id": 1,
             "eos_token_id": 2, "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02,
             "intermediate_size": 11008, "max_position_embeddings": 4096, "model_type": "llama",
             "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 32, "pretraining_tp": 1,
             "rms_norm_eps": 1e-05, "rope_scaling": None, "tie_word_embeddings": False, "torch_dtype": "float16",
             "transformers_version": "4.31.0.dev0", "use_cache": True, "vocab_size": 32000}
NANOGPT = {"block_size": 256, "vocab_size": 65, "n_layer": 6, "n_head": 6, "n_embd": 384, "dropout": 0.2,
           "bias": False}


def _file(tmp_path, config, name="config.json"):
    path = tmp_path / name
    path.write_text(json.dumps(config) if isinstance(config, dict) else config)
    return str(path)


def test_the_published_gpt2_and_llama2_configs_are_the_presets_of_the_same_name(tmp_path):
    gpt2 = config_files.read(_file(tmp_path, GPT2))
    assert gpt2.arch == get_arch("gpt2")._replace(name="config.json (gpt2)", dropout=0.1)
    assert parameter_count(gpt2.arch) == 124_439_808
    assert gpt2.family == "gpt2" and "summary_type" in gpt2.ignored and "n_ctx" in gpt2.ignored
    assert gpt2.defaults == {"tie_word_embeddings": True}
    llama = config_files.read(_file(tmp_path, LLAMA2_7B))
    assert llama.arch == get_arch("llama2-7b")._replace(name="config.json (llama)")
    assert "_name_or_path" in llama.ignored and "rope_scaling" in llama.ignored and llama.defaults == {}


def test_the_published_gpt2_medium_config_with_openai_gpts_special_token_fields_is_read():
    medium = dict(GPT2, n_embd=1024, n_head=16, n_layer=24, n_special=0, predict_special_tokens=True)
    config = config_files.parse(medium, "config.json")
    assert config.arch == get_arch("gpt2")._replace(name="config.json (gpt2)", layers=24, hidden=1024, heads=16,
                                                    dropout=0.1)
    assert parameter_count(config.arch) == 354_823_168 and "predict_special_tokens" in config.ignored


def test_a_nanogpt_config_is_a_tied_gpt_with_its_dropout_and_bias():
    config = config_files.parse(NANOGPT, "ckpt/config.json")
    assert config.family == "nanogpt" and config.ignored == [] and config.defaults == {}
    assert config.arch == Arch("config.json (nanogpt)", 6, 384, 6, 256, 65, None, tied=True, bias=False, dropout=0.2)
    small = config_files.parse({k: NANOGPT[k] for k in ("block_size", "vocab_size", "n_layer", "n_head", "n_embd")})
    assert small.arch.bias is True and small.arch.dropout == 0.0 and small.defaults == {"dropout": 0.0, "bias": True}


def test_grouped_query_heads_and_an_untied_llama_head_are_read():
    config = dict(LLAMA2_7B, num_hidden_layers=80, hidden_size=8192, num_attention_heads=64, num_key_value_heads=8,
                  intermediate_size=28672)
    assert config_files.parse(config).arch == get_arch("llama2-70b")._replace(name="config (llama)")
    null = config_files.parse(dict(LLAMA2_7B, num_key_value_heads=None))  # LlamaConfig reads null as the heads
    assert null.arch == get_arch("llama2-7b")._replace(name="config (llama)")


@pytest.mark.parametrize("config,message", [
    (dict(GPT2, n_head=7), "n_embd 768 is not divisible by n_head 7"),
    (dict(GPT2, n_layer=0), "n_layer must be a positive integer, got 0"),
    (dict(GPT2, n_embd="768"), "n_embd must be a positive integer, got '768'"),
    ({k: v for k, v in GPT2.items() if k != "vocab_size"}, "missing field vocab_size"),
    ({k: v for k, v in GPT2.items() if k not in ("n_positions", "n_ctx")}, "missing field n_positions"),
    (dict(GPT2, activation_function="relu"), "activation_function 'relu' is not a GELU"),
    (dict(GPT2, attn_pdrop=0.0), "resid_pdrop, embd_pdrop and attn_pdrop differ"),
    (dict(GPT2, resid_pdrop=1.0, embd_pdrop=1.0, attn_pdrop=1.0), "resid_pdrop must be a probability in [0, 1)"),
    (dict(GPT2, add_cross_attention=True), "add_cross_attention is True"),
    (dict(GPT2, n_special=3), "n_special is 3; the planner counts gpt2's layer with 0"),
    (dict(LLAMA2_7B, num_key_value_heads=5), "num_key_value_heads 5 does not divide num_attention_heads 32"),
    (dict(LLAMA2_7B, head_dim=256), "head_dim 256 is not hidden_size / num_attention_heads = 128"),
    (dict(LLAMA2_7B, attention_bias=True), "attention_bias is True"),
    (dict(LLAMA2_7B, hidden_act="gelu"), "hidden_act 'gelu'"),
    (dict(LLAMA2_7B, tie_word_embeddings="no"), "tie_word_embeddings must be true or false, got 'no'"),
    (dict(LLAMA2_7B, num_local_experts=8, sliding_window=4096), "unknown fields num_local_experts, sliding_window"),
    ({k: v for k, v in LLAMA2_7B.items() if k != "intermediate_size"}, "missing field intermediate_size"),
    (dict(LLAMA2_7B, model_type="bert"), "model_type 'bert' is not read"),
    ({"n_layer": 2}, "no model_type field, and no block_size"),
    (dict(NANOGPT, n_embd=100), "n_embd 100 is not divisible by n_head 6"),
    (dict(NANOGPT, bias=1), "bias must be true or false, got 1"),
    (dict(GPT2, n_layer=None), "n_layer must be a positive integer, got None"),
    (dict(GPT2, architectures=[{"GPT2LMHeadModel": 1}], model_type=None), "architectures[0] must be a class name"),
])
def test_a_missing_unknown_or_impossible_field_is_refused_by_name(config, message):
    with pytest.raises(ValueError) as error:
        config_files.parse(config, "config.json")
    assert str(error.value).startswith("config.json: ") and message in str(error.value), str(error.value)


@pytest.mark.parametrize("text,message", [("{", "not JSON (Expecting property name"), ("[1, 2]", "got a list"),
                                          ('{"n_layer": 2, "n_embd": 64, "n_layer": 3}', "field n_layer twice")])
def test_a_file_that_is_no_config_is_refused_naming_it(tmp_path, text, message):
    path = _file(tmp_path, text)
    with pytest.raises(ValueError, match=r"config\.json: ") as error:
        config_files.read(path)
    assert message in str(error.value)
    with pytest.raises(ValueError, match="cannot read it"):
        config_files.read(str(tmp_path / "absent.json"))


def test_plan_config_prints_what_it_read_and_ignored_and_plans_that_model(tmp_path, capsys):
    path = _file(tmp_path, GPT2)
    assert cli.main(["plan", "--config", path, "--layers", "2"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"--config {path}: read as the gpt2 family; absent, so their defaults: "
                             "tie_word_embeddings=True; ignored (they change no memory of a step): architectures, ")
    assert out[1].startswith("config.json (gpt2) overridden by --layers 2: 2 layers, h=768, 12 heads, s=1024")


@pytest.mark.parametrize("args,message", [
    (["--config", "{path}", "--arch", "gpt2"], "--arch and --config both name the model: give one"),
    (["--config", "{path}", "--heads", "5"], "config.json (gpt2) overridden by --heads 5: hidden size 768 is not"),
    (["--config", "{bad}"], "config.json: n_special is 1"),
    (["--config", "{bad}", "--inference"], "config.json: n_special is 1"),
])
def test_plan_refuses_a_bad_config_in_one_line_and_prints_nothing(tmp_path, capsys, args, message):
    (tmp_path / "bad").mkdir()
    paths = {"path": _file(tmp_path, GPT2), "bad": _file(tmp_path / "bad", dict(GPT2, n_special=1))}
    assert cli.main(["plan"] + [a.format(**paths) for a in args]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.startswith("tinymem plan: ") and message in captured.err, captured.err
