"""Measuring helpers shared by the techniques, the planner, the figures and the benchmarks.

    timing.py   best_time, interleaved_times: timings taken in turns, as medians and spreads
    claims.py   Claim, evaluate: the sentences a figure supports, checked on its records
    records.py  the machine, versions and date a run came from; writing and reading records
    torch_step.py  measure_torch_step: one PyTorch training step's peak and buckets (torch imported
                lazily; its replay, profile reading and CUDA side in torch_replay, torch_profile, torch_cuda)
"""
