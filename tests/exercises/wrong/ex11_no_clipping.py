"""Wrong on purpose (exercise 11.4): counts the receptive field's padding positions as computed
work (no clipping to the feature map)."""

TARGET = "recomputed_fraction"


def recomputed_fraction(size, tiles, layers):
    sizes = [size]
    for kernel, stride, padding in layers:
        sizes.append((sizes[-1] + 2 * padding - kernel) // stride + 1)
    extent, computed = sizes[-1], 0
    for t in range(tiles):
        a, b = t * extent // tiles, (t + 1) * extent // tiles
        for kernel, stride, padding in reversed(layers):
            computed += b - a
            a, b = a * stride - padding, (b - 1) * stride - padding + kernel
    return computed / sum(sizes[1:]) - 1
