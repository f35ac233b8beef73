"""04.3, a window of `prefetch` layers, forgetting the layer being computed."""


def streaming_parameter_peak(sizes, prefetch):
    layer = [4 * (a * b + b) for a, b in zip(sizes[:-1], sizes[1:])]
    window = max(1, prefetch)
    return max(sum(layer[i:i + window]) for i in range(len(layer)))
