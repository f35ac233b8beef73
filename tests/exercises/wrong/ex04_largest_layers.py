"""04.3, the prefetch + 1 largest layers, as if any of them could be on the device together."""


def streaming_parameter_peak(sizes, prefetch):
    layer = sorted((4 * (a * b + b) for a, b in zip(sizes[:-1], sizes[1:])), reverse=True)
    return sum(layer[:prefetch + 1])
