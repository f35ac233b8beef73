"""Text for the language model: Python's own reference documentation, as character ids.

``load_python_docs()``: the English reference text that ships with every Python
(``pydoc_data.topics``, about 465,000 characters of the language reference), as character ids.
Nothing is downloaded. :func:`load_python_source`: a second text in the same characters, the
source code of a few standard-library modules (a fine-tuning target for a model pretrained on
the documentation). :func:`unigram_loss` is the baseline a language model must beat: the
cross-entropy of the validation text under the training text's character frequencies.
"""

import numpy as np


class CharVocab:
    """Characters <-> ids: ``encode(text) -> int64 array``, ``decode(ids) -> str``."""

    def __init__(self, text):
        self.chars = sorted(set(text))
        self.index = {c: i for i, c in enumerate(self.chars)}

    def __len__(self):
        return len(self.chars)

    def encode(self, text):
        missing = sorted(set(text) - set(self.index))
        if missing:
            raise ValueError(f"characters not in the vocabulary: {missing!r}")
        return np.array([self.index[c] for c in text], dtype=np.int64)

    def decode(self, ids):
        return "".join(self.chars[int(i)] for i in np.asarray(ids).reshape(-1))


def load_python_docs(val_fraction=0.1):
    """Return ``(train_ids, val_ids, vocab)``: the last ``val_fraction`` of the text is validation."""
    from pydoc_data.topics import topics

    text = "\n".join(topics[key] for key in sorted(topics))
    vocab = CharVocab(text)
    ids = vocab.encode(text)
    split = int(len(ids) * (1 - val_fraction))
    return ids[:split], ids[split:], vocab


SOURCE_MODULES = ("bisect", "calendar", "fractions", "functools", "heapq", "json.decoder", "json.encoder",
                  "statistics", "string", "textwrap")


def load_python_source(vocab, modules=SOURCE_MODULES, val_fraction=0.1):
    """Return ``(train_ids, val_ids)``: the source of ``modules`` from this Python's standard
    library (about 240,000 characters for the default ones), encoded with ``vocab``; characters
    the vocabulary lacks (a few non-ASCII letters, backquotes) are dropped. The text is that of
    the running Python version, read from its own files: nothing is downloaded."""
    import importlib
    import inspect

    text = "\n".join(inspect.getsource(importlib.import_module(name)) for name in modules)
    ids = vocab.encode("".join(c for c in text if c in vocab.index))
    split = int(len(ids) * (1 - val_fraction))
    return ids[:split], ids[split:]


def random_windows(ids, batch_size, context, rng):
    """``(x, y)`` int64 arrays (batch_size, context): random windows and the same shifted by one."""
    if len(ids) <= context:
        raise ValueError(f"text of {len(ids)} ids is too short for a context of {context}")
    starts = rng.integers(0, len(ids) - context, batch_size)
    x = np.stack([ids[s:s + context] for s in starts])
    y = np.stack([ids[s + 1:s + context + 1] for s in starts])
    return x, y


def unigram_loss(train_ids, val_ids, vocab_size):
    """Cross-entropy (nats per character) of ``val_ids`` under the training character
    frequencies (add-one smoothed): what a model that ignores context scores."""
    counts = np.bincount(train_ids, minlength=vocab_size) + 1.0
    logp = np.log(counts / counts.sum())
    return float(-logp[val_ids].mean())
