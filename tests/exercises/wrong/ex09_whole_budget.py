"""Lesson 9, one plausible wrong answer: the peak is held against the whole device, not this
process's share. Only the mistaken function is here; the test puts it in place of the reference
answer's."""
def micro_batches_for(peaks, budget, fraction):
    share = budget
    fitting = [k for k, peak in peaks.items() if peak <= share]
    return min(fitting) if fitting else None
