"""Synthetic click logs for the recommender workload, generated offline at any table size.

``synthetic_clicks()``: click logs for an embedding-bag recommender. Each sample is one bag of
item ids per table drawn from a power law (a few items are hot, most are rare, as in real
logs), and the label is 1 when a hidden per-item score, averaged over the bags, plus noise is
positive. The score of an item comes from a hash of its id, so a table of millions of rows
costs nothing to generate.
"""
import math

import numpy as np


def _item_score(ids):
    """A fixed pseudo-random score in [-0.5, 0.5) per item id (Knuth's multiplicative hash)."""
    return ((ids.astype(np.uint64) * np.uint64(2654435761)) % np.uint64(2**32)).astype(np.float64) / 2**32 - 0.5


def synthetic_clicks(n_samples, table_sizes, bag_size=4, noise=0.1, seed=0):
    """Return ``(bags, labels)``: ``bags`` is a list with one (n_samples, bag_size) int64 array of
    row ids per table, ``labels`` (n_samples,) int64 in {0, 1}."""
    rng = np.random.default_rng(seed)
    bags, logit = [], np.zeros(n_samples)
    for rows in table_sizes:
        # Power law: rank r is drawn with probability ~ r^(-2/3); hashing spreads hot rows out.
        rank = np.floor(rng.random((n_samples, bag_size)) ** 3 * rows).astype(np.int64)
        ids = (rank * 40503 + 7) % rows
        bags.append(ids)
        logit += _item_score(ids).mean(axis=1) * math.sqrt(bag_size)
    labels = (logit + noise * rng.standard_normal(n_samples) > 0).astype(np.int64)
    return bags, labels
