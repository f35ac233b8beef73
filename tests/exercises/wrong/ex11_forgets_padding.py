"""Wrong on purpose (exercise 11.2): traces the rows back without the layers' padding."""

TARGET = "input_rows"


def input_rows(a, b, layers):
    for kernel, stride, _ in reversed(layers):
        a, b = a * stride, (b - 1) * stride + kernel
    return a, b
