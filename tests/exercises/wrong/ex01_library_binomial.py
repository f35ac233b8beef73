"""01.2, the library's formula called: tinymem's binomial_forwards."""
from tinymem.techniques.checkpoint.revolve import binomial_forwards


def revolve_forwards(n_steps, slots):
    return binomial_forwards(n_steps, slots)
