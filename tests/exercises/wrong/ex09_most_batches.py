"""Lesson 9, one plausible wrong answer: the most micro-batches that fit instead of the fewest
(slower than needed). Only the mistaken function is here; the test puts it in place of the
reference answer's."""
def micro_batches_for(peaks, budget, fraction):
    share = fraction * budget
    fitting = [k for k, peak in peaks.items() if peak <= share]
    return max(fitting) if fitting else None
