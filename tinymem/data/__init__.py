"""Data sets that work offline (nothing is downloaded), and a seeded batch iterator.

    loader.py    DataLoader: shuffled batches of Tensors, one seed per epoch
    digits.py    load_digits: scikit-learn's bundled 8x8 digits
    text.py      Python's reference documentation and some stdlib source as characters; the unigram baseline
    clicks.py    synthetic click logs for the recommender, tables of any size
    phantoms.py  procedural CT-like phantoms with segmentation labels, any resolution
"""
from .clicks import synthetic_clicks
from .digits import load_digits
from .loader import DataLoader
from .phantoms import CLASSES, make_phantoms, phantom
from .text import CharVocab, load_python_docs, load_python_source, random_windows, unigram_loss

__all__ = ["DataLoader", "load_digits", "CharVocab", "load_python_docs", "load_python_source", "random_windows", "unigram_loss",
           "synthetic_clicks", "make_phantoms", "phantom", "CLASSES"]
