"""Measuring helpers shared by the techniques, the planner, the figures and the benchmarks.

    timing.py   best_time, interleaved_times: timings taken in turns, as medians and spreads;
                paired_turns: two such timings compared turn by turn and by lower quartiles
    claims.py   Claim, evaluate: the sentences a figure supports, checked on its records;
                slower_in_turns, the test every "A is slower than B" claim names (IN_TURNS)
    records.py  the machine, versions and date a run came from; writing and reading records
    torch_step.py  measure_torch_step: one PyTorch training step's peak and buckets (torch imported
                lazily; its replay, profile reading and CUDA side in torch_replay, torch_profile, torch_cuda)
"""
