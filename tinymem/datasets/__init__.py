"""Procedural data sets that work offline at any size."""
