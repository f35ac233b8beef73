"""MLP: Linear layers with an activation between, the model of the foundation lessons."""
from .. import nn

_ACTIVATIONS = {"relu": nn.ReLU, "gelu": nn.GELU, "tanh": nn.Tanh, "sigmoid": nn.Sigmoid}


class MLP(nn.Sequential):
    """Linear layers of the given ``sizes`` with an activation (and optional dropout) between.

    ``MLP([64, 128, 10])`` is Linear(64,128) -> ReLU -> Linear(128,10). Memory: parameters
    4·sum(in·out + out) bytes; per sample it saves each layer's input and each activation's
    output for backward.
    """

    def __init__(self, sizes, activation="relu", dropout=0.0, layernorm=False, device=None):
        if len(sizes) < 2:
            raise ValueError(f"MLP needs at least an input and an output size, got {sizes}")
        if activation not in _ACTIVATIONS:
            raise ValueError(f"unknown activation {activation!r}; choose one of {', '.join(_ACTIVATIONS)}")
        layers = []
        for i, (n_in, n_out) in enumerate(zip(sizes[:-1], sizes[1:])):
            layers.append(nn.Linear(n_in, n_out, device=device))
            if i < len(sizes) - 2:
                if layernorm:
                    layers.append(nn.LayerNorm(n_out, device=device))
                layers.append(_ACTIVATIONS[activation]())
                if dropout:
                    layers.append(nn.Dropout(dropout))
        super().__init__(*layers)
        self.sizes = list(sizes)
