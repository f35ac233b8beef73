"""The closed form's 8-bit Adam chunks are the device's even where it computes as NumPy does:
on CuPy bf16 computes in float32 (backend "numpy") but 8-bit Adam updates a 256,000-value
embedding in one chunk, not in the CPU's 65,536-value ones. predict() counted the CPU's chunk for
bf16 under TINYMEM_DEVICE=cuda: 2,998,272 B (a peak of 13,416,752 B for 16,415,024) short."""
from tinymem.planner import exactness
from tinymem.planner.terms.analytic import Stack


def test_bf16_with_8bit_adam_on_cuda_counts_the_gpus_chunk(standin):
    sizes, batch, stack = (2000, 2, 128, 2, 1), 1, Stack("bf16", optimizer="Adam8bit")  # 2000 x 128 embedding
    predicted, measured = exactness.compare(sizes, batch, stack, 4)
    assert predicted.buckets["workspace"] == measured["buckets"]["workspace"]
    assert predicted.peak == measured["peak"]
