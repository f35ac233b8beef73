"""Differentiable ops on raw arrays, one file per family; ``tinymem.functional`` is their public face."""
