"""05.1, each optimizer class's own bytes_for called."""
from tinymem import optim

CLASSES = {"sgd": (optim.SGD, {"momentum": 0}), "sgd_momentum": (optim.SGD, {"momentum": 0.9}),
           "adam": (optim.Adam, {}), "adafactor": (optim.Adafactor, {}),
           "adam8bit": (optim.Adam8bit, {"block_size": 2048, "min_8bit_size": 4096})}


def state_bytes_for(optimizer, shape):
    cls, group = CLASSES[optimizer]
    return cls.bytes_for(shape, 4, group)
