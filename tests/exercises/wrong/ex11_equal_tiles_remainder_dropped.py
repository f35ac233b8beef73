"""Wrong on purpose (exercise 11.4): tiles of extent // tiles positions each, so when the count does
not divide the extent the last positions are never computed."""

TARGET = "recomputed_fraction"


def recomputed_fraction(size, tiles, layers):
    sizes = [size]
    for kernel, stride, padding in layers:
        sizes.append((sizes[-1] + 2 * padding - kernel) // stride + 1)
    width, computed = sizes[-1] // tiles, 0
    for t in range(tiles):
        a, b = t * width, (t + 1) * width
        for (kernel, stride, padding), in_size in zip(reversed(layers), reversed(sizes[:-1])):
            computed += b - a
            a, b = max(a * stride - padding, 0), min((b - 1) * stride - padding + kernel, in_size)
    return computed / sum(sizes[1:]) - 1
