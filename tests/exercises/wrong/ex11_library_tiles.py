"""Wrong on purpose (exercise 11.4): counts the work with the library's own tiling and trace-back."""
from types import SimpleNamespace

from tinymem.edge.patch import out_extent, tiles as library_tiles, trace_back

TARGET = "recomputed_fraction"


def recomputed_fraction(size, tiles, layers):
    chain = [SimpleNamespace(kernel=k, stride=s, padding=p) for k, s, p in layers]
    sizes = [size]
    for layer in chain:
        sizes.append(out_extent(sizes[-1], layer))
    computed = 0
    for a, b in library_tiles(sizes[-1], tiles):
        computed += (b - a) + sum(hi - lo for lo, hi, _, _ in trace_back((a, b), chain, sizes)[1:])
    return computed / sum(sizes[1:]) - 1
