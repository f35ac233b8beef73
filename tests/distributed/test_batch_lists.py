"""A strategy takes the global batch as lists too, as ``model(tm.tensor(x))`` does in one process
(Python floats float32, ints int64): DataParallel, ZeRO and Pipeline read ``.shape`` off a list
before ("'list' object has no attribute 'shape'"). One rank, in this process, on either device."""
import numpy as np
import pytest

import tinymem as tm
import tinymem.functional as F
from tinymem.distributed import Communicator, DataParallel, ZeRO
from tinymem.distributed.pipeline import Pipeline

STRATEGIES = {"data_parallel": lambda model, comm: DataParallel(model, lambda p: tm.optim.SGD(p, lr=0.1), comm),
              "zero3": lambda model, comm: ZeRO(model, lambda p: tm.optim.SGD(p, lr=0.1), comm, stage=3),
              "pipeline": lambda model, comm: Pipeline(model, lambda p: tm.optim.SGD(p, lr=0.1), comm,
                                                       micro_batches=2)}


@pytest.mark.mpi
@pytest.mark.parametrize("name", list(STRATEGIES))
def test_a_strategy_trains_on_a_batch_given_as_lists(name, device):
    x = np.random.default_rng(0).standard_normal((8, 6)).tolist()
    y = [i % 3 for i in range(8)]
    tm.manual_seed(0)
    model = tm.models.MLP([6, 5, 3]).to(device)
    expected = float(F.cross_entropy(model(tm.tensor(x, device=device)), tm.tensor(y, device=device)).item())
    with Communicator() as comm:
        assert STRATEGIES[name](model, comm).step(x, y, F.cross_entropy) == pytest.approx(expected, rel=1e-6)
    assert all(p.device == device for p in model.parameters())
