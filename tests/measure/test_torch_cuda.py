"""The CUDA side of measure_torch_step: the allocator trace's peak and the 512-byte blocks on hand-made
values here; a real step on a GPU when torch sees one (unmeasured in this project until then)."""
import pytest

from tinymem.measure.torch_cuda import _trace_peak, as_blocks


def test_the_trace_peak_counts_allocs_and_completed_frees_from_the_start():
    trace = [{"action": "alloc", "size": 1024}, {"action": "alloc", "size": 512},
             {"action": "free_requested", "size": 1024},  # still allocated until completed
             {"action": "alloc", "size": 2048}, {"action": "free_completed", "size": 1024},
             {"action": "segment_alloc", "size": 2 << 20}, {"action": "alloc", "size": 512}]
    snapshot = {"device_traces": [[], trace]}
    assert _trace_peak(snapshot, 1, start=4096) == 4096 + 1024 + 512 + 2048
    assert _trace_peak(snapshot, 0, start=4096) == 4096


def test_storages_are_counted_in_whole_allocator_blocks_on_cuda_only():
    storages = {1: (4, "parameter"), 2: (512, "input"), 3: (513, "optimizer")}
    assert as_blocks(storages, "cuda") == {1: (512, "parameter"), 2: (512, "input"), 3: (1024, "optimizer")}
    assert as_blocks(storages, "cpu") == storages


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
    assert r.allocator_trace_peak == r.allocator_peak
    assert abs(r.peak - r.allocator_peak) <= 0.02 * r.allocator_peak
