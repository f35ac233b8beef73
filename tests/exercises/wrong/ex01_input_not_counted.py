"""01.1, the last segment's own input left out: k - 1 kept inputs plus the last segment's outputs."""


def segment_peak_states(n, k):
    return (k - 1) + (n - (k - 1) * (n // k))
