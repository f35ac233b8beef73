"""The tiny Transformer LM and the recommender: shapes, causality, checkpoint-friendly blocks,
training below the baselines, and the data helpers."""
import numpy as np
import pytest
from conftest import to_np

import tinymem as tm
from tinymem import data, memory, models, nn, optim


def test_lm_is_causal_and_chunked_attention_gives_the_same_logits():
    ids = np.random.default_rng(0).integers(0, 11, (2, 12))
    plain = models.TransformerLM(11, 16, d_model=16, n_heads=2, n_layers=2)
    chunked = models.TransformerLM(11, 16, d_model=16, n_heads=2, n_layers=2, chunk_size=5)
    chunked.load_state_dict(plain.state_dict())
    logits = to_np(plain(ids))
    assert logits.shape == (2, 12, 11)
    np.testing.assert_allclose(to_np(chunked(ids)), logits, rtol=1e-5, atol=1e-5)
    changed = ids.copy()
    changed[:, 7:] = (changed[:, 7:] + 1) % 11  # the future must not change the past
    np.testing.assert_allclose(to_np(plain(changed))[:, :7], logits[:, :7], rtol=1e-6, atol=1e-6)
    assert not np.allclose(to_np(plain(changed))[:, 7:], logits[:, 7:])


def test_lm_blocks_compose_as_sequential_segments():
    model = models.TransformerLM(7, 8, d_model=8, n_heads=2, n_layers=3)
    ids = np.arange(8)[None] % 7
    h = model.embed(ids)
    for block in model.blocks:  # what checkpoint_sequential does, one segment per block
        h = block(h)
    np.testing.assert_array_equal(to_np(model.logits(h)), to_np(model(ids)))
    with pytest.raises(ValueError, match="context"):
        model(np.zeros((1, 9), dtype=np.int64))


def test_lm_learns_below_the_unigram_baseline():
    train_ids, val_ids, vocab = data.load_python_docs()
    baseline = data.unigram_loss(train_ids, val_ids, len(vocab))
    model = models.TransformerLM(len(vocab), 32, d_model=32, n_heads=2, n_layers=1)
    opt = optim.Adam(model.parameters(), lr=1e-2)
    rng = np.random.default_rng(0)
    for _ in range(40):
        x, y = data.random_windows(train_ids, 16, 32, rng)
        opt.zero_grad()
        model.loss(x, y).backward()
        opt.step()
    vx, vy = data.random_windows(val_ids, 64, 32, np.random.default_rng(1))
    with tm.no_grad():
        val = model.loss(vx, vy).item()
    assert val < baseline - 0.3, f"validation {val:.3f} vs unigram {baseline:.3f}"
    sample = model.generate(vocab.encode("The "), 20, seed=0)
    assert sample.shape == (24,) and vocab.decode(sample).startswith("The ")
    assert np.array_equal(sample, model.generate(vocab.encode("The "), 20, seed=0))


def test_text_helpers():
    train_ids, val_ids, vocab = data.load_python_docs(val_fraction=0.1)
    assert len(vocab) > 60 and abs(len(val_ids) / (len(train_ids) + len(val_ids)) - 0.1) < 1e-3
    assert vocab.decode(vocab.encode("def f(x):")) == "def f(x):"
    with pytest.raises(ValueError, match="vocabulary"):
        vocab.encode("\x00")
    x, y = data.random_windows(train_ids, 3, 10, np.random.default_rng(0))
    np.testing.assert_array_equal(x[:, 1:], y[:, :-1])
    # Unigram cross-entropy of English characters: about 3.2 nats (4.7 bits), well under log(V).
    assert 2.5 < data.unigram_loss(train_ids, val_ids, len(vocab)) < np.log(len(vocab))


def test_recommender_sparse_step_touches_only_the_batch_rows():
    bags, labels = data.synthetic_clicks(64, (5000, 300), bag_size=4, seed=0)
    assert 0.3 < labels.mean() < 0.7 and bags[0].max() < 5000
    model = models.Recommender((5000, 300), embedding_dim=4, hidden=8, sparse=True)
    before = to_np(model.tables[0].weight).copy()
    opts = [optim.RowWiseAdagrad(model.table_parameters(), lr=0.1), optim.Adam(model.dense_parameters())]
    loss = tm.functional.cross_entropy(model([b[:16] for b in bags]), tm.tensor(labels[:16]))
    loss.backward()
    assert memory.live_bytes("activation") == 0
    for opt in opts:
        opt.step()
    changed = np.flatnonzero(np.abs(to_np(model.tables[0].weight) - before).sum(1))
    np.testing.assert_array_equal(changed, np.unique(bags[0][:16]))
    with pytest.raises(ValueError, match="one per table"):
        model(bags[:1])


def test_embedding_bag_layer_repr_and_modes():
    layer = nn.EmbeddingBag(10, 3, mode="sum", sparse=True)
    assert "sparse=True" in repr(layer)
    out = layer(tm.tensor(np.array([1, 2, 3])), tm.tensor(np.array([0, 1])))
    np.testing.assert_allclose(to_np(out)[1], to_np(layer.weight)[2] + to_np(layer.weight)[3], rtol=1e-6)


def test_checkpointed_lm_blocks_give_bit_identical_gradients():
    from tinymem.techniques.checkpoint import checkpoint_sequential

    model = models.TransformerLM(9, 12, d_model=16, n_heads=2, n_layers=3, chunk_size=4)
    ids = np.random.default_rng(0).integers(0, 9, (2, 12))
    grads = []
    for segments in (None, 3):
        model.zero_grad()
        h = model.embed(ids)
        h = model.blocks(h) if segments is None else checkpoint_sequential(model.blocks, segments, h)
        tm.functional.cross_entropy(model.logits(h).reshape(-1, 9), ids.reshape(-1)).backward()
        assert memory.live_bytes("activation") == 0, memory.format_table(memory.LEDGER.by_bucket())
        grads.append([to_np(p.grad).copy() for p in model.parameters()])
    for plain, ckpt in zip(*grads):
        assert np.array_equal(plain, ckpt)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_lm_trains_in_half_precision(dtype):
    from tinymem.techniques import precision

    model = models.TransformerLM(11, 16, d_model=16, n_heads=2, n_layers=2, chunk_size=8)
    half_model, opt = precision.half(model, optim.Adam(model.parameters(), lr=1e-2), dtype=dtype)
    ids = np.random.default_rng(0).integers(0, 11, (4, 16))
    losses = []
    for _ in range(20):
        opt.zero_grad()
        loss = tm.functional.cross_entropy(half_model(ids).reshape(-1, 11), ids.reshape(-1))
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0], losses
