"""Lesson 9, one plausible wrong answer: the full module paths, not cut to the depth asked for.
Only the mistaken function is here; the test puts it in place of the reference answer's."""
def activation_bytes_by_module(tracker, depth):
    sums = {}
    for row in tracker.top(10**9):
        if row["bucket"] != "activation":
            continue
        path = row["module"]
        sums[path] = sums.get(path, 0) + row["bytes"]
    return sums
