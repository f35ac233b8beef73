"""No leaks: 200 training steps of each technique with the garbage collector off.

From step 10 on, the ledger's live bytes (every place) and the array buffers the allocator
reports to tracemalloc must be flat: a technique that keeps something of each step alive (a saved tensor, a file, a closure
holding a graph) grows one of them and fails here. (tinygrad's test_gc.py, for every seam.)
"""
import contextlib
import gc
import tracemalloc

import numpy as np
import pytest

import tinymem as tm
import tinymem.functional as F
from tinymem import memory
from tinymem.techniques import checkpoint as ckpt
from tinymem.techniques import microbatch, offload, precision
from tinymem.techniques.precision.grad_scaler import GradScaler
from tinymem.techniques.quantization import compressed

STEPS, FLAT_FROM = 200, 10
SIZES = [16, 32, 32, 32, 4]


def _batch():
    rng = np.random.default_rng(0)
    return tm.tensor(rng.standard_normal((8, 16)).astype(np.float32)), tm.tensor(rng.integers(0, 4, 8))


def _plain(context=contextlib.nullcontext):
    model = tm.models.MLP(SIZES, dropout=0.1)
    opt = tm.optim.Adam(model.parameters(), lr=1e-3)
    x, y = _batch()

    def step():
        opt.zero_grad()
        with context():
            F.cross_entropy(model(x), y).backward()
        opt.step()
    return step, lambda: None


def _checkpointed():
    model = tm.models.MLP(SIZES, dropout=0.1)
    opt = tm.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x, y = _batch()
    x.requires_grad = True

    def step():
        opt.zero_grad()
        x.grad = None
        F.cross_entropy(ckpt.checkpoint_sequential(model, "sqrt", x), y).backward()
        opt.step()
    return step, lambda: None


def _half_with_scaler():
    model = tm.models.MLP(SIZES)
    half_model, opt = precision.half(model, tm.optim.Adam(model.parameters(), lr=1e-3), dtype="float16")
    # The scale backs off from 2**16 in the first steps (skipped, inf gradients), then holds:
    # a skipped step keeps other buffers than a taken one, so the tail must be all taken steps.
    scaler = GradScaler(growth_interval=10**9)
    x, y = _batch()

    def step():
        opt.zero_grad()
        scaler.scale(F.cross_entropy(half_model(x), y)).backward()
        scaler.step(opt)
        scaler.update()
    return step, lambda: None


def _offloaded_optimizer(place):
    def make():
        model = tm.models.MLP(SIZES)
        opt = offload.offload_optimizer(tm.optim.Adam(model.parameters(), lr=1e-3), place=place)
        x, y = _batch()

        def step():
            opt.zero_grad()
            F.cross_entropy(model(x), y).backward()
            opt.step()
        return step, getattr(opt, "close", lambda: None)
    return make


def _streamed():
    model = tm.models.MLP(SIZES)
    streamed = offload.stream_layers(model, place="host")
    opt = tm.optim.SGD(model.parameters(), lr=0.01)
    x, y = _batch()

    def step():
        opt.zero_grad()
        F.cross_entropy(streamed(x), y).backward()
        opt.step()
    return step, getattr(streamed, "close", lambda: None)


def _micro_batched():
    model = tm.models.MLP(SIZES)
    opt = tm.optim.Adam(model.parameters(), lr=1e-3)
    x, y = _batch()

    def step():
        opt.zero_grad()
        microbatch.accumulate_gradients(lambda a, b: F.cross_entropy(model(a), b), (x, y), micro_batches=3)
        opt.step()
    return step, lambda: None


TECHNIQUES = {
    "plain": _plain,
    "checkpoint_sqrt": _checkpointed,
    "fp16_master_gradscaler": _half_with_scaler,
    "int8_saved_activations": lambda: _plain(lambda: compressed.compress_saved_activations(bits=8)),
    "2bit_saved_activations": lambda: _plain(lambda: compressed.compress_saved_activations(bits=2)),
    "save_on_host": lambda: _plain(offload.save_on_host),
    "save_on_disk": lambda: _plain(offload.save_on_disk),
    "optimizer_state_on_host": _offloaded_optimizer("host"),
    "optimizer_state_on_disk": _offloaded_optimizer("disk"),
    "layer_streaming": _streamed,
    "micro_batching": _micro_batched,
}


def _array_bytes():
    """Bytes of NumPy data buffers alive now, as the allocator reports them to tracemalloc.

    NumPy traces its buffers in a domain of their own; Python's own objects (ints, dicts,
    interpreter caches) are left out, since their pools grow and shrink for reasons of their own.
    """
    domain = tracemalloc.DomainFilter(True, np.lib.tracemalloc_domain)
    return sum(s.size for s in tracemalloc.take_snapshot().filter_traces([domain]).statistics("filename"))


@pytest.mark.parametrize("name", sorted(TECHNIQUES))
def test_live_bytes_and_allocations_are_flat(name):
    tm.manual_seed(0)
    step, close = TECHNIQUES[name]()
    gc.collect()
    gc.disable()
    started = not tracemalloc.is_tracing()
    if started:
        tracemalloc.start()
    ledger, traced = [], {}
    try:
        for i in range(STEPS):
            step()
            ledger.append(memory.live_bytes(place=None))
            if i in (FLAT_FROM, STEPS - 1):
                traced[i] = _array_bytes()
    finally:
        if started:
            tracemalloc.stop()
        gc.enable()
        close()
    tail = ledger[FLAT_FROM:]
    assert min(tail) == max(tail), (
        f"{name}: ledger live bytes drift {min(tail):,} .. {max(tail):,}\n"
        + memory.format_table(memory.LEDGER.by_bucket()))
    growth = traced[STEPS - 1] - traced[FLAT_FROM]
    assert growth == 0, f"{name}: array buffers grew by {growth:,} B over {STEPS - FLAT_FROM} steps"
    assert memory.live_bytes("activation", place=None) == 0
