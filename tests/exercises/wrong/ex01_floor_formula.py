"""01.1, k kept inputs plus n // k states, as if every segment had n // k blocks."""


def segment_peak_states(n, k):
    return k + n // k
