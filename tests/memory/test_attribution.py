"""Attribution: every ledger entry knows its module path and op; the reports sum to the ledger."""
import numpy as np
import pytest

import tinymem as tm
import tinymem.functional as F
from tinymem import memory, nn, planner
from tinymem.memory import attribution

WORKLOADS = [("mlp", "64,256,256,10", 32), ("unet", "1,4,8,3,32", 4), ("transformer", "64,32,32,2,2", 8)]


@pytest.mark.parametrize("name,sizes,batch", WORKLOADS, ids=[w[0] for w in WORKLOADS])
def test_by_module_and_top_sum_exactly_to_the_ledger_peak(name, sizes, batch):
    work = planner.workload(name, sizes)
    model = work.build("none")
    opt = tm.optim.Adam(model.parameters())
    data = work.batch(batch)
    with memory.track() as t:
        loss = work.loss(model, data)
        loss.backward()
        opt.step()
        del loss
    by_module = t.by_module(model)
    assert sum(by_module.values()) == t.peak(), t.table()
    assert sum(t.by_module().values()) == t.peak()
    assert sum(t.by_module(model, depth=1).values()) == t.peak()
    rows = t.top(10**6, model)
    assert sum(r["bytes"] for r in rows) == t.peak()
    for bucket, nbytes in t.peak_by_bucket().items():
        assert sum(r["bytes"] for r in rows if r["bucket"] == bucket) == nbytes, bucket
    assert [r["bytes"] for r in rows] == sorted((r["bytes"] for r in rows), reverse=True)
    assert len(t.top(10)) == 10
    named = [k for k in by_module if not k.startswith("(")]
    assert named, by_module  # most bytes sit in named modules


def test_the_transformer_names_its_blocks_and_ops():
    work = planner.workload("transformer", "64,32,32,2,2")
    model = work.build("none")
    with memory.track() as t:
        loss = work.loss(model, work.batch(4))
    paths = t.by_module()
    assert {"blocks.0.attn", "blocks.1.mlp.0", "head"} <= set(paths), paths
    ops = {(r["module"], r["op"]) for r in t.top(10**6)}
    assert ("blocks.0.mlp.1", "GELU") in ops and ("blocks.1.mlp.0", "Linear") in ops
    del loss


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))

    def forward(self, x):
        return self.body(x)


def _stamps(array):
    entry = memory.LEDGER.entries[id(memory.owner_of(array))]
    return entry.module, entry.label


def test_paths_and_ops_are_stamped_in_forward_and_in_backward():
    model = Block()
    x = tm.tensor(np.ones((3, 8), np.float32))
    out = model(x)
    hidden = model.body[0](x)  # a child called alone keeps its path in the tree it was named in
    assert _stamps(out.data) == ("body.2", "Linear")
    assert _stamps(hidden.data) == ("body.0", "Linear")
    out.sum().backward()
    weight = model.body[0].weight
    assert _stamps(weight.grad.data) == ("body.0", "Linear.backward")
    assert _stamps(weight.data) == (None, None)  # made in __init__, outside any forward
    assert attribution.SCOPE.path is None and attribution.SCOPE.op is None


def test_a_swapped_child_is_named_by_its_slot():
    model = Block()
    x = tm.tensor(np.ones((3, 8), np.float32))
    model(x)
    model.body.replace_child("1", nn.GELU())
    out = model(x)
    entry = [e for e in memory.LEDGER.entries.values() if e.label == "GELU"]
    assert entry and {e.module for e in entry} == {"body.1"}
    del out


def test_an_error_in_forward_leaves_no_stale_scope():
    class Broken(nn.Module):
        def forward(self, x):
            F.relu(x)
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        Broken()(tm.tensor(np.ones(3, np.float32), requires_grad=True))
    assert attribution.SCOPE.path is None and attribution.SCOPE.op is None and attribution.SCOPE.root is None
    y = tm.tensor(np.ones(5, np.float32))
    assert _stamps(y.data) == (None, None)


def test_switched_off_nothing_is_stamped_and_the_sums_still_hold():
    model = Block()
    x = tm.tensor(np.ones((3, 8), np.float32))
    with attribution.enabled(False):
        assert attribution.ENABLED is False
        with memory.track() as t:
            out = model(x)
            out.sum().backward()
        assert _stamps(out.data) == (None, None)
    assert attribution.ENABLED is True
    assert all(k.startswith("(no module") for k in t.by_module())
    assert sum(t.by_module().values()) == t.peak()


def test_the_peak_entries_are_those_of_the_peak_not_of_the_end():
    with memory.track() as t:
        big = memory.register(np.ones(100_000), "workspace")
        del big
        small = memory.register(np.ones(10), "workspace")
    top = t.top(1)
    assert top[0]["bytes"] == 800_000 and sum(t.by_module().values()) == t.peak()
    del small


def test_a_long_window_compacts_its_log_and_keeps_the_peak():
    with memory.track(timeline=False) as t:
        peak = memory.register(np.ones(50_000), "workspace")
        del peak
        for _ in range(3000):  # many events after the peak: the log is folded into one state
            memory.register(np.ones(4), "workspace")
        assert len(t._since_peak) < 3000
    assert t.top(1)[0]["bytes"] == 400_000
    assert sum(t.by_module().values()) == t.peak()


def test_an_array_made_after_the_peak_and_freed_after_the_fold_is_not_put_back_at_the_peak():
    # Before, the events after the fold were still logged and undone from the peak's state, so
    # an array made after the peak and freed after the fold was added to it: 2,000 steps of a
    # loop summed to 59,200 B in by_module for a peak of 36,800 B.
    with memory.track(timeline=False) as t:
        peak = memory.register(np.ones(50_000), "workspace")
        del peak
        later = memory.register(np.ones(1_000), "workspace")  # after the peak, before the fold
        for _ in range(3000):
            memory.register(np.ones(4), "workspace")
        assert t._peak_state is not None  # folded
        del later
    assert [row["bytes"] for row in t.top(2)] == [400_000]
    assert sum(t.by_module().values()) == t.peak() == t.start + 400_000


def test_format_rows_prints_module_op_bucket_and_bytes():
    rows = [{"module": "blocks.0.attn", "op": "Softmax", "bucket": "activation", "bytes": 1234}]
    text = attribution.format_rows(rows)
    assert "blocks.0.attn" in text and "Softmax" in text and "1,234" in text
