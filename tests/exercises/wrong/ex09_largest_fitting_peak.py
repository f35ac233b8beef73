"""Lesson 9, one plausible wrong answer: the micro-batch count whose peak is the largest that fits
(the same as the fewest micro-batches only while peaks fall steadily with k). Only the mistaken
function is here; the test puts it in place of the reference answer's."""
def micro_batches_for(peaks, budget, fraction):
    fitting = {k: peak for k, peak in peaks.items() if peak <= fraction * budget}
    return max(fitting, key=fitting.get) if fitting else None
