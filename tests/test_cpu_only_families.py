"""The CPU-only figure families (``experiments.CPU_ONLY_FAMILIES``): any spelling of the CPU runs
them, any other device is refused with their reason, and ``tinymem figures --device cuda`` skips
them in a sweep (it stopped at rl's refusal before, leaving edge and the families after unrun)
and refuses them by name with exit code 2."""
import types

import pytest

import tinymem.experiments
from tinymem import backend, cli
from tinymem.experiments import CPU_ONLY_FAMILIES, refuse_device


@pytest.mark.parametrize("device", ["cpu", "CPU", "Cpu", None])  # None: the default, the CPU here
def test_any_spelling_of_the_cpu_is_accepted(device):
    for name in CPU_ONLY_FAMILIES:
        refuse_device(name, device)


@pytest.mark.parametrize("device", ["cuda", "cuda:0", "CUDA", None])
def test_another_device_is_refused_with_the_reason(standin, device):  # None: the default, cuda here
    for name, reason in CPU_ONLY_FAMILIES.items():
        with pytest.raises(ValueError, match=f"the {name} figures run on the CPU: {reason}"):
            refuse_device(name, device)


def _families_with_a_cpu_only_one(monkeypatch):
    ran = []
    fake = {name: types.SimpleNamespace(NAME=name, plot=lambda records, outdir: [],
                                        run=lambda quick, device, name=name: ran.append((name, device)) or {})
            for name in ("stub", *CPU_ONLY_FAMILIES)}
    monkeypatch.setattr(tinymem.experiments, "families", lambda: fake)
    return ran


def test_a_cuda_sweep_skips_the_cpu_only_families(standin, monkeypatch, tmp_path):
    ran = _families_with_a_cpu_only_one(monkeypatch)
    assert cli.main(["figures", "--quick", "--device", "cuda", "--out", str(tmp_path)]) == 0
    assert ran == [("stub", "cuda")] and (tmp_path / "data" / "stub.json").exists()


def test_a_cpu_only_family_asked_for_on_cuda_is_refused_by_name(standin, monkeypatch, capsys, tmp_path):
    ran = _families_with_a_cpu_only_one(monkeypatch)
    assert cli.main(["figures", "--quick", "--device", "cuda", "--only", "rl", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert f"rl skipped on cuda: it runs on the CPU only ({CPU_ONLY_FAMILIES['rl']})" in err and "--device cpu" in err
    assert ran == [] and backend.default_device() == "cuda"
