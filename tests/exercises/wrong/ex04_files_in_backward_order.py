"""04.1, the files listed in the order backward reads them, not the order forward writes them."""


def offloaded_files(sizes, batch):
    return ([4 * batch * width for width in sizes[:-1]] + [4 * batch * sizes[-1], 8 * batch])[::-1]
