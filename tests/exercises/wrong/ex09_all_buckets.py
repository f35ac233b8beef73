"""Lesson 9, one plausible wrong answer: every bucket at the peak, not only the activations. Only
the mistaken function is here; the test puts it in place of the reference answer's."""
def activation_bytes_by_module(tracker, depth):
    sums = {}
    for row in tracker.top(10**9):
        path = row["module"]
        if not path.startswith("("):
            path = ".".join(path.split(".")[:depth])
        sums[path] = sums.get(path, 0) + row["bytes"]
    return sums
