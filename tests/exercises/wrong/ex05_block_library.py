"""05.3, the library's block-wise quantizer called on the one block."""
from tinymem.optim import blockwise


def quantize_block(x, qmap):
    codes, absmax = blockwise.quantize(x, qmap, x.size)
    return codes.reshape(x.shape), float(absmax[0])
