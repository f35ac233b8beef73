"""Host syncs of per-step code paths, held on the CuPy stand-in (as ``tests/test_gpu_budgets.py``).

A host sync (``float()``, ``int()``, ``bool()``, ``.item()``, ``.tolist()``, ``asnumpy`` of a
device array; an ``if`` on a device value is a ``bool()``) stalls the host until the device has
finished everything queued. A step of row-wise Adagrad, of gradient clipping, of micro-batching
and of compressed saved activations reads on the host only what its caller asked for; each test
prints where every sync came from when a budget is broken, and checks that the device's numbers
are the CPU's.
"""
import numpy as np
import pytest

import standin_cupy as sc
import tinymem as tm
from tinymem import backend, models, nn, optim


@pytest.fixture
def cuda(standin):
    return standin


def _within(counts, syncs, what):
    assert counts.syncs <= syncs, f"{what}: syncs over budget ({syncs}): {counts.report()}"


def _mlp_problem(widths, device):
    """One MLP and batch, made on the CPU and moved: the same numbers on either device."""
    tm.manual_seed(0)
    model = models.MLP(widths).to(device)
    rng = np.random.default_rng(0)
    x = tm.tensor(rng.standard_normal((8, widths[0])).astype(np.float32), device=device)
    y = tm.tensor(rng.integers(0, widths[-1], 8), device=device)
    return model, x, y


@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "sparse"])
@pytest.mark.parametrize("weight_decay", [0.0, 0.1])
def test_a_rowwise_adagrad_step_makes_no_host_sync(cuda, sparse, weight_decay):
    """Rows 2..5 get no gradient (they must stay put); the step is the CPU's."""
    tables = {}
    for device in ("cpu", "cuda"):
        tm.manual_seed(0)
        layer = nn.EmbeddingBag(6, 3, mode="sum", sparse=sparse).to(device)
        opt = optim.RowWiseAdagrad(layer.parameters(), lr=0.1, eps=0.0 if not weight_decay else 1e-10,
                                   weight_decay=weight_decay)
        ids = tm.tensor(np.array([[0, 1], [1, 1]]), device=device)
        for _ in range(2):
            opt.zero_grad()
            layer(ids).sum().backward()
            with sc.counting() as counts:
                opt.step()
        tables[device] = (layer.weight.numpy(), backend.to_numpy(opt.state[layer.weight]["sum"]))
    _within(counts, 0, "RowWiseAdagrad step")
    for cpu, dev in zip(tables["cpu"], tables["cuda"]):
        assert np.array_equal(cpu, dev)
