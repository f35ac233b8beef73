"""04.3, the first layers' window taken as the peak instead of the largest window."""


def streaming_parameter_peak(sizes, prefetch):
    layer = [4 * (a * b + b) for a, b in zip(sizes[:-1], sizes[1:])]
    return sum(layer[:prefetch + 1])
