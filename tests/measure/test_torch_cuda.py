"""The CUDA side of measure_torch_step: the allocator trace's peak and the 512-byte blocks on hand-made
values here; a real step on a GPU when torch sees one (unmeasured in this project until then)."""
import pytest

from tinymem.measure.torch_cuda import _trace_peak, baseline_blocks


def test_the_trace_peak_counts_allocs_and_requested_frees_from_the_start():
    trace = [{"action": "alloc", "size": 1024}, {"action": "alloc", "size": 512},
             {"action": "free_requested", "size": 1024},  # no longer allocated, as memory_allocated() says
             {"action": "alloc", "size": 2048}, {"action": "free_completed", "size": 1024},
             {"action": "segment_alloc", "size": 2 << 20}, {"action": "alloc", "size": 512}]
    snapshot = {"device_traces": [[], trace]}
    assert _trace_peak(snapshot, 1, start=4096) == 4096 + 512 + 2048 + 512
    assert _trace_peak(snapshot, 0, start=4096) == 4096


def test_on_cuda_the_baseline_is_every_active_block_in_its_own_bytes():
    class FakeCuda:  # what torch.cuda.memory_snapshot() says: blocks of two devices
        @staticmethod
        def current_device():
            return 0

        @staticmethod
        def memory_snapshot():
            return [{"device": 0, "blocks": [{"address": 10, "size": 512, "state": "active_allocated"},
                                             {"address": 20, "size": 2048, "state": "active_allocated"},
                                             {"address": 25, "size": 512, "state": "active_allocated"},
                                             {"address": 30, "size": 512, "state": "inactive"}]},
                    {"device": 1, "blocks": [{"address": 40, "size": 512, "state": "active_allocated"}]}]

    class FakeTorch:
        cuda = FakeCuda

    storages = {10: (4, "parameter"), 20: (1536, "optimizer")}  # a cached 2 KiB block handed out whole
    assert baseline_blocks(FakeTorch, storages, "cuda") == {  # a block nothing names is still counted
        10: (512, "parameter"), 20: (2048, "optimizer"), 25: (512, "temporary")}
    assert baseline_blocks(FakeTorch, {**storages, 99: (8, "input")}, "cpu") == {**storages, 99: (8, "input")}


@pytest.mark.torch
def test_a_step_on_a_gpu_agrees_with_the_allocator():
    import torch
    if not torch.cuda.is_available():
        pytest.skip("torch sees no CUDA GPU: the CUDA measurement is unmeasured here")
    from tinymem.measure.torch_step import CUDA_NOTE, measure_torch_step
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.GELU(), torch.nn.Linear(1024, 256)).cuda()
    opt = torch.optim.AdamW(model.parameters())
    x = torch.randn(64, 256, device="cuda")

    def step():
        model(x).square().mean().backward()
        opt.step()
        opt.zero_grad()

    r = measure_torch_step(step, model=model, optimizer=opt, inputs=(x,))
    assert r.device == "cuda" and CUDA_NOTE in r.note and sum(r.buckets.values()) == r.peak
    assert r.allocator_trace_peak == r.allocator_requested_peak
    assert r.peak == r.allocator_peak  # the same blocks, from the start's active list and the profile
