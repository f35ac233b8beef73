"""``tinymem plan --arch NAME`` with ``--layers/--hidden/--heads/--vocab/--ffn``: each size given
replaces the named model's, in every mode, and says so in the header. Before, every flag but
``--seq`` was dropped without a word (the output byte-identical to the stock model's, exit 0)
and ``--ffn`` alone was refused."""
import pytest

from tinymem import cli
from tinymem.planner.model.architectures import describe, get_arch
from tinymem.planner.search import fits

MODES = {"training": [], "layout": ["--tensor-parallel", "2"], "inference": ["--inference"]}


def _plan(capsys, *args):
    code = cli.main(["plan", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("flags,sizes", [
    (["--layers", "2"], dict(layers=2)),
    (["--hidden", "256", "--heads", "4"], dict(hidden=256, heads=4)),
    (["--vocab", "1000", "--ffn", "1024"], dict(vocab=1000, ffn=1024)),
])
def test_every_size_given_with_arch_replaces_the_named_models_in_every_mode(capsys, mode, flags, sizes):
    stock = _plan(capsys, "--arch", "gpt2", *MODES[mode])
    code, out, err = _plan(capsys, "--arch", "gpt2", *flags, *MODES[mode])
    assert code in (0, 1) and not err and out != stock[1]
    arch = get_arch("gpt2")._replace(name="gpt2 overridden by " + " ".join(flags), **sizes)
    assert out.splitlines()[0] == describe(arch), out  # the header names the flags and the sizes


def test_the_overridden_model_is_the_one_planned(capsys):
    code, out, _ = _plan(capsys, "--arch", "llama2-7b", "--layers", "4", "--ffn", "2048", "--gpus", "2")
    arch = get_arch("llama2-7b")._replace(name="llama2-7b overridden by --layers 4 --ffn 2048", layers=4, ffn=2048)
    rows, _ = fits.plan_arch(arch, 2, (80e9 - 0.5e9) / 1.05)
    assert code == 0
    for row in fits.table(rows, 2, 80e9, "80GB"):
        assert f"{row['stack']} " in out and f" {row['peak GB']} " in out.split(row["stack"] + " ", 1)[1].splitlines()[0]


@pytest.mark.parametrize("flags,message", [
    (["--hidden", "100"], "gpt2 overridden by --hidden 100: hidden size 100 is not divisible by 12 heads"),
    (["--heads", "7"], "gpt2 overridden by --heads 7: hidden size 768 is not divisible by 7 heads"),
    (["--ffn", "0"], "gpt2 overridden by --ffn 0: ffn must be a positive integer"),
    (["--layers", "-1", "--inference"], "gpt2 overridden by --layers -1: layers must be a positive integer"),
    (["--seq", "0"], "--seq must be a positive integer, got 0"),
    (["--seq", "-3", "--mode", "torch"], "--seq must be a positive integer, got -3"),
])
def test_an_impossible_override_is_refused_naming_its_flag_and_writes_nothing(capsys, flags, message):
    code, out, err = _plan(capsys, "--arch", "gpt2", *flags)
    assert code == 2 and out == "" and err.startswith("tinymem plan: ") and message in err, err
    assert _plan(capsys, "--arch", "gpt2", "--layers", "2")[0] in (0, 1)  # a good call after it works


def test_grouped_query_heads_must_still_divide_the_overridden_heads(capsys):
    code, _, err = _plan(capsys, "--arch", "llama2-70b", "--heads", "4", "--hidden", "512")
    assert code == 2 and "llama2-70b overridden by --hidden 512 --heads 4: kv_heads" in err, err
