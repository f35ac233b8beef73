"""The bytes-per-parameter table (computed from each optimizer's formula) against the issue's
numbers, against ``state_bytes()`` and against the ledger's ``optimizer`` bucket."""
import gc
import math

import numpy as np
import pytest

from tinymem import backend, memory
from tinymem.nn import Parameter
from tinymem.optim import table
from tinymem.optim.table import CONFIGS

BIG = (512, 512)


@pytest.mark.parametrize("label, expected", [
    ("SGD", 0), ("SGD momentum", 4), ("Adagrad", 4), ("RMSprop", 4),
    ("RMSprop momentum centered", 12), ("Adam", 8), ("AdamW", 8), ("AdamW amsgrad", 12), ("Lion", 4),
])
def test_full_size_state_bytes_per_parameter(label, expected):
    assert table.bytes_per_param(label, BIG) == expected
    assert table.bytes_per_param(label, (7,)) == expected


def test_adafactor_is_4_m_plus_n_per_matrix_and_full_for_vectors():
    m, n = 512, 64
    assert table.bytes_per_param("Adafactor", (m, n)) == 4 * (m + n) / (m * n)
    assert table.bytes_per_param("Adafactor", (3, m, n)) == 4 * 3 * (m + n) / (3 * m * n)
    assert table.bytes_per_param("Adafactor", (n,)) == 4


def test_adam8bit_is_about_2_bytes_plus_scales_and_32_bit_under_4096():
    n = math.prod(BIG)
    assert table.bytes_per_param("Adam8bit", BIG) == 2 + 8 * math.ceil(n / 2048) / n
    assert table.bytes_per_param("Adam8bit", (4095,)) == 8
    assert table.bytes_per_param("Adam8bit", (4096,)) == 2 + 8 * 2 / 4096


def _model_params(device):
    rng = np.random.default_rng(0)
    shapes = [(48, 100), (48,), (100, 48), (3, 5, 4), (7,)]
    return [Parameter(backend.to_device(rng.standard_normal(s).astype(np.float32), device)) for s in shapes]


@pytest.mark.parametrize("label", list(CONFIGS))
def test_state_bytes_equal_the_formula_and_the_ledger(label, device):
    cls, options = CONFIGS[label]
    options = dict(options, rank=8) if "rank" in options else options
    params = _model_params(device)
    gc.collect()
    before = memory.live_bytes("optimizer")
    opt = cls(params, **options)
    for p in params:
        p.grad = backend.to_device(np.ones(p.shape, np.float32), device)
    opt.step()
    ledger = memory.live_bytes("optimizer") - before
    expected = table.expected_state_bytes(opt)
    assert opt.state_bytes() == expected == ledger, (
        f"{label}: state_bytes {opt.state_bytes()}, formula {expected}, ledger {ledger}\n"
        + memory.format_table(memory.LEDGER.by_bucket()))
    if label != "SGD":
        assert ledger > 0, "the test would be vacuous"
    del opt
    gc.collect()
    assert memory.live_bytes("optimizer") == before, "optimizer state outlived its optimizer"


def test_table_rows_follow_the_formulas():
    shapes = [(512, 64), (512,), (10, 512), (10,)]
    rows = {r["optimizer"]: r for r in table.table(shapes)}
    total = sum(math.prod(s) for s in shapes)
    assert rows["Adam"]["state_bytes"] == 8 * total
    assert rows["Adafactor"]["state_bytes"] == 4 * (512 + 64 + 10 + 512 + 512 + 10)
    assert rows["Adam8bit"]["state_bytes"] == (2 * 32768 + 8 * 16 + 2 * 5120 + 8 * 3
                                               + 8 * (512 + 10) + 2 * (256 * 4 + 4 * 2 ** 15))
