"""Checks for lesson 4: offload's files, time, streamed weights and ZeRO-Offload traffic."""
import os

import numpy as np
import pytest

import tinymem as tm
import tinymem.functional as F
from tinymem import memory
from tinymem.techniques import offload

pytestmark = pytest.mark.exercise_04


def _batch(sizes, batch):
    rng = np.random.default_rng(0)
    x = tm.tensor(rng.standard_normal((batch, sizes[0])).astype(np.float32))
    return x, tm.tensor(rng.integers(0, sizes[-1], batch))


@pytest.mark.parametrize("sizes,batch", [([8, 16, 4], 3), ([20, 30, 30, 10], 7)])
def test_offloaded_files_match_what_save_on_disk_wrote(exercise, forbid, sizes, batch, tmp_path):
    model = tm.models.MLP(sizes)
    x, y = _batch(sizes, batch)
    with offload.save_on_disk(str(tmp_path), prefetch=0) as ctx:  # no prefetch: every write done
        loss = F.cross_entropy(model(x), y)
        names = sorted(os.listdir(ctx.path))  # numbered in the order they were written
        written = [os.path.getsize(os.path.join(ctx.path, name)) for name in names]
        loss.backward()
    assert sum(written) == ctx.stats()["bytes_out"]
    forbid(offload.save_on_disk, offload.save_on_host, offload.saved_schedule)
    assert exercise("ex04").offloaded_files(sizes, batch) == written


def test_predicted_step_seconds(exercise, forbid):
    bw = {"disk_write": 100, "disk_read": 50, "memcpy": 1}
    library = offload.predicted_seconds(1.0, 200, 100, bw, "disk")
    forbid(offload.predicted_seconds)
    f = exercise("ex04").predicted_step_seconds
    assert f(1.0, 200, 100, 100, 50) == pytest.approx(1.0 + 2.0 + 2.0) == pytest.approx(library)
    assert f(1.0, 200, 100, 100, 50, backward_s=0.5) == pytest.approx(1.0 + 2.0 + 1.5)
    assert f(1.0, 200, 100, 100, 50, backward_s=5.0) == pytest.approx(3.0)
    assert f(0.5, 300, 600, 150, 200, backward_s=1.0) == pytest.approx(0.5 + 2.0 + 2.0)


# The second: its two largest layers are not neighbours, which stream_layers never holds together.
@pytest.mark.parametrize("sizes", [[12, 40, 24, 32, 6], [12, 40, 4, 40, 6]])
@pytest.mark.parametrize("prefetch", [0, 1, 2])
def test_streaming_parameter_peak_matches_the_ledger(exercise, forbid, prefetch, sizes):
    elsewhere = memory.live_bytes("parameter")  # weights of models other checks left alive
    model = tm.models.MLP(sizes)
    x, y = _batch(sizes, 5)
    with offload.stream_layers(model, "host", prefetch=prefetch) as net:
        with memory.track(measure=False) as t:
            F.cross_entropy(net(x), y).backward()
    forbid(offload.stream_layers, offload.StreamedLayers)
    assert exercise("ex04").streaming_parameter_peak(sizes, prefetch) == t.max_by_bucket()["parameter"] - elsewhere


def test_zero_offload_traffic_matches_the_wrapper(exercise, forbid):
    sizes = [10, 16, 4]
    model = tm.models.MLP(sizes)
    x, y = _batch(sizes, 6)
    with offload.offload_optimizer(tm.optim.Adam(model.parameters()), "host") as opt:
        F.cross_entropy(model(x), y).backward()
        opt.step()
        stats = opt.stats()
        host = memory.live_bytes("optimizer", "host") + stats["bytes_master"]
        forbid(offload.offload_optimizer, offload.OffloadedOptimizer)
        got = exercise("ex04").zero_offload_traffic(sizes)
        assert got["link_bytes_per_step"] == stats["bytes_grad_down"] + stats["bytes_param_up"]
        assert got["host_bytes"] == host
