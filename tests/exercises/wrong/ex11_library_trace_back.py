"""Wrong on purpose (exercise 11.2): asks tinymem's own trace_back, on a map too large to clip."""
from types import SimpleNamespace

from tinymem.edge.patch import trace_back

TARGET = "input_rows"


def input_rows(a, b, layers):
    chain = [SimpleNamespace(kernel=k, stride=s, padding=p) for k, s, p in layers]
    shift = 10**4  # far from the border: nothing is clipped
    stride = 1
    for _, s, _ in layers:
        stride *= s
    lo, hi, _, _ = trace_back((a + shift, b + shift), chain, [10**9] * (len(layers) + 1))[0]
    return lo - shift * stride, hi - shift * stride
