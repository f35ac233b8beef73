"""A strategy moves the global batch each rank loaded (NumPy arrays, on the host) to the model's
device, as ``model(tm.tensor(x))`` does in one process: lesson 07's ZeRO-3 script failed under
TINYMEM_DEVICE=cuda with "Linear: tensors on different devices" (a host batch beside device
weights). One rank, in this process."""
import numpy as np
import pytest

import tinymem as tm
import tinymem.functional as F
from tinymem.distributed import Communicator, ZeRO
from tinymem.distributed.pipeline import Pipeline

STRATEGIES = {"zero3": lambda model, comm: ZeRO(model, lambda p: tm.optim.SGD(p, lr=0.1), comm, stage=3),
              "pipeline": lambda model, comm: Pipeline(model, lambda p: tm.optim.SGD(p, lr=0.1), comm,
                                                       micro_batches=2)}


@pytest.mark.mpi
@pytest.mark.parametrize("name", list(STRATEGIES))
def test_a_strategy_trains_a_device_model_on_a_host_batch(name, standin):
    x = np.random.default_rng(0).standard_normal((8, 6)).astype(np.float32)
    y = np.arange(8) % 3
    tm.manual_seed(0)
    model = tm.models.MLP([6, 5, 3])
    expected = float(F.cross_entropy(model(tm.tensor(x)), tm.tensor(y)).item())
    with Communicator() as comm:
        assert STRATEGIES[name](model, comm).step(x, y, F.cross_entropy) == pytest.approx(expected, rel=1e-6)
    assert all(p.device == "cuda" for p in model.parameters())
