"""04.1, the int64 targets the loss saves left out."""


def offloaded_files(sizes, batch):
    return [4 * batch * width for width in sizes[:-1]] + [4 * batch * sizes[-1]]
