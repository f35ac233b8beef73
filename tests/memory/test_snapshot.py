"""The ledger's window as PyTorch's memory snapshot: PyTorch's own memory-viz tools read it on
the CPU and agree with the ledger to the byte; refused windows and paths write nothing."""
import os
import pickle
import re

import numpy as np
import pytest

import tinymem as tm
import tinymem.functional as F
from tinymem import memory
from tinymem.memory import page, snapshot


def _step(device="cpu", model=None):
    """One Adam step of a small MLP inside a closed window: (tracker, model)."""
    tm.manual_seed(0)
    model = model or tm.models.MLP([16, 32, 32, 4], device=device)
    opt = tm.optim.Adam(model.parameters(), lr=1e-3)
    x = tm.tensor(np.random.default_rng(0).standard_normal((8, 16)).astype(np.float32), device=device)
    y = tm.backend.to_device(np.arange(8) % 4, device)
    with memory.track(measure=False) as t:
        memory.mark("forward")
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        del loss
    return t, model


def _active_bytes(flamegraph_lines):
    """Bytes of the active blocks in ``_memory_viz.memory``'s flamegraph input."""
    return sum(int(line.rsplit(" ", 1)[1]) for line in flamegraph_lines.splitlines()
               if ";active_allocated;" in line)


def _replay_peak(snap):
    """The highest live bytes over the trace, counted as PyTorch's Active Memory Timeline counts
    them (process_alloc_data in torch/utils/viz/MemoryViz.js): a free with no alloc before it,
    and an active block at the end with no open alloc, were live at the start."""
    open_allocs, live, deltas = {}, 0, []
    for e in snap["device_traces"][0]:
        if e["action"] == "alloc":
            open_allocs[e["addr"]] = e["size"]
            deltas.append(e["size"])
        elif e["action"] == "free_completed":
            if e["addr"] in open_allocs:
                del open_allocs[e["addr"]]
            else:
                live += e["size"]
            deltas.append(-e["size"])
    live += sum(b["requested_size"] for seg in snap["segments"] for b in seg["blocks"]
                if b["state"] == "active_allocated" and b["address"] not in open_allocs)
    peak = live
    for d in deltas:
        live += d
        peak = max(peak, live)
    return peak


@pytest.mark.torch
def test_pytorch_memory_viz_reads_the_snapshot_and_agrees_with_the_ledger(tmp_path):
    from torch.cuda import _memory_viz as viz

    t, _ = _step()
    path = tmp_path / "step.pickle"
    t.export_snapshot(path)
    with open(path, "rb") as f:
        snap = pickle.load(f)
    text = viz.trace(snap)
    actions = [e["action"] for e in snap["device_traces"][0]]
    # Each alloc is one "name = segment[offset:size]" line (MEM[...] past the end state's blocks).
    assert len(re.findall(r"^\w+ = (?:seg_0|MEM)\[", text, re.M)) == actions.count("alloc") > 0
    assert text.count("# free completed for ") == actions.count("free_completed") > 0
    end = sum(t.events[-1][5])  # device bytes when the window closed
    assert _active_bytes(viz.memory(snap, format_flamegraph=lambda lines: lines)) == end
    assert f"total_allocated: {viz.Bytes(end)}" in viz.segsum(snap)
    assert _replay_peak(snap) == t.peak()
    # Cut at the peak, as _snapshot() called right there: the tools' live bytes are the peak.
    at_peak = snapshot.build(t, at="peak")
    assert _active_bytes(viz.memory(at_peak, format_flamegraph=lambda lines: lines)) == t.peak()
    assert f"total_allocated: {viz.Bytes(t.peak())}" in viz.segsum(at_peak)
    html = viz.trace_plot(snap)
    assert html.startswith("\n<!DOCTYPE html>") and "Active Memory Timeline" in html


def test_frames_name_bucket_op_module_and_the_users_line():
    t, model = _step()
    snap = snapshot.build(t)
    allocs = [e for e in snap["device_traces"][0] if e["action"] == "alloc"]
    names = {(f["filename"], f["name"]) for e in allocs for f in e["frames"]}
    assert ("[bucket]", "activation") in names and ("[bucket]", "optimizer") in names
    assert ("[op]", "Linear") in names and ("[module]", "0") in names
    here = [f for e in allocs for f in e["frames"] if f["filename"] == __file__]
    assert here and all(f["line"] > 0 for f in here)
    # The first-fit model never lays two live blocks over each other.
    live = {}
    for e in snap["device_traces"][0]:
        if e["action"] == "alloc":
            assert all(e["addr"] + e["size"] <= a or a + n <= e["addr"] for a, n in live.items())
            live[e["addr"]] = e["size"]
        elif e["action"] == "free_completed":
            live.pop(e["addr"], None)


def test_first_fit_reuses_the_first_hole_that_fits():
    heap = snapshot.FirstFit()
    a, b, c = heap.alloc(100), heap.alloc(50), heap.alloc(100)
    assert (a, b, c) == (0, 100, 150)
    heap.free(a, 100)
    assert heap.alloc(40) == 0 and heap.alloc(70) == 250  # 60 left in the hole: 70 goes on top
    heap.free(c, 100)
    heap.free(b, 50)
    assert heap.alloc(150) == 40  # the freed neighbours merged with the rest of the first hole


def test_the_standin_device_exports_the_ledgers_sizes(standin):
    t, _ = _step(device="cuda")
    snap = snapshot.build(t, at="peak")
    active = sum(b["size"] for b in snap["segments"][0]["blocks"] if b["state"] == "active_allocated")
    assert active == t.peak() > 0
    numbers = page.data(t, "on the stand-in")
    x = numbers["peak"]["x"]
    assert sum(a[1] for a in numbers["arrays"] if a[2] <= x and (a[3] < 0 or a[3] > x)) == t.peak()


def test_refused_windows_and_paths_write_nothing(tmp_path):
    with memory.track() as t:
        with pytest.raises(RuntimeError, match="still open"):
            t.export_snapshot(tmp_path / "open.pickle")
    with pytest.raises(ValueError, match="empty"):
        t.export_snapshot(tmp_path / "empty.pickle")
    with memory.track(timeline=False) as quiet:
        tm.tensor(np.ones(4, np.float32))
    with pytest.raises(ValueError, match="timeline=False"):
        quiet.export_page(tmp_path / "quiet.html")
    done, _ = _step()
    with pytest.raises(FileNotFoundError, match="does not exist"):
        done.export_snapshot(tmp_path / "missing" / "step.pickle")
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        if not os.access(locked, os.W_OK):  # root writes anywhere
            with pytest.raises(PermissionError, match="not writable"):
                done.export_page(locked / "step.html")
    finally:
        locked.chmod(0o700)
    assert sorted(os.listdir(tmp_path)) == ["locked"] and os.listdir(locked) == []


@pytest.mark.parametrize("title", [None, 3, b"step"])
def test_a_page_title_that_is_not_text_is_refused_and_nothing_is_written(tmp_path, title):
    done, _ = _step()
    with pytest.raises(TypeError, match="title must be a str"):
        done.export_page(tmp_path / "step.html", title)
    assert os.listdir(tmp_path) == []
