# %% [markdown]
# # Lesson 6 (language and recommenders) — attention that grows linearly, tables that stay sparse
#
# Two workloads whose memory goes to places an MLP never shows you:
#
# - A **Transformer language model** saves, in every attention layer, the weights
#   softmax(QKᵀ) of shape (batch, heads, L, L): **quadratic in the sequence length**. Double
#   the context and that term quadruples. The cure is to never store them: compute attention in
#   blocks with an *online softmax* and recompute the blocks in backward (FlashAttention).
# - A **recommender** keeps embedding tables of millions of rows, but one batch touches a few
#   thousand. A dense gradient and Adam's two moments each cost a full table; the cure is a
#   **row-sparse gradient** (only the touched rows) and an optimizer with **one number per row**.
#
# Sources to keep open: `tinymem/ops/attention.py` (both attention ops), `tinymem/nn/attention.py`
# (`MultiheadAttention`, `EmbeddingBag`), `tinymem/models/transformer.py` (`TransformerLM`,
# `Recommender`), `tinymem/sparse.py` (`RowSparse`), `tinymem/optim/rowwise_adagrad.py`,
# `tinymem/data/text.py`, and the figure families `tinymem/experiments/workload_seq_len.py` and
# `workload_embeddings.py`.

# %%
import numpy as np

import tinymem as tm
import tinymem.functional as F
from tinymem import data, memory, models, nn
from tinymem.experiments import workload_embeddings, workload_seq_len
from tinymem.measure.records import read_records
from tinymem.techniques.checkpoint import checkpoint_sequential
from course import FIGURES, OUT, QUICK, RECORDS, predict, reveal

tm.manual_seed(0)

# %% [markdown]
# ## 1. Where attention's memory goes
#
# For one head with L queries and M keys (M = L in self-attention),
# `scaled_dot_product_attention(q, k, v)` computes the scores Z = q kᵀ / √E, P = softmax(Z),
# O = P v. Backward needs P (dV = Pᵀ dO, and the softmax backward dZ = P ⊙ (dP − rowsum(dP ⊙ P))),
# so the plain op saves it: an L x M matrix per head, besides q, k, v (linear in L). The
# chunked op saves no L x M matrix at all. Count both with the ledger at L = 1024, 4 heads of
# 16 features (the shape of our tiny LM); exercise 2 asks for the formula behind each number.

# %%
L, H, E = 1024, 4, 16
predict(f"L = {L}, {H} heads of {E} features, float32: how many bytes does each op save for backward, "
        "and what share of the plain op's bytes does the chunked one keep?")
q, k, v = (tm.randn(1, H, L, E, requires_grad=True) for _ in range(3))
saved = {}
for name, fn in (("plain", lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True)),
                 ("chunked", lambda: F.chunked_attention(q, k, v, 128, is_causal=True))):
    before = memory.live_bytes("activation")
    out = fn()
    saved[name] = memory.live_bytes("activation") - before
    del out
reveal(f"plain saves {saved['plain']:,d} B, chunked {saved['chunked']:,d} B: "
       f"{saved['chunked'] / saved['plain']:.3f} of plain",
       "the plain op saves an L x L float32 matrix per head; the chunked op saves less than those alone",
       saved["chunked"] < H * L * L * 4 <= saved["plain"])

# %% [markdown]
# ## 2. The online softmax, by hand
#
# Softmax needs the row maximum (for stability) and the row sum before any weight is known.
# The trick: walk the keys in blocks and keep, per query row, three running numbers — a
# maximum m, a sum l of exponentials taken relative to it, and the weighted sum acc of the
# values. When a block raises the maximum, what was accumulated relative to the old one is
# rescaled to the new one. At the end O = acc / l, and lse = m + log l is all backward needs
# to rebuild any block of P. Exercise 1 writes the merge of two such partial results (the step
# that also lets attention be split across devices).
#
# `ChunkedAttention` in `tinymem/ops/attention.py` does this for (chunk x chunk) blocks of all
# heads at once; with `is_causal` it skips the key blocks right of the diagonal, so it also
# does half the work. Its result equals the plain op to rounding (the sums run in another
# order) — `tests/nn/test_attention.py` holds both against PyTorch. The largest difference here:

# %%
out_plain = F.scaled_dot_product_attention(q, k, v, is_causal=True)
out_chunked = F.chunked_attention(q, k, v, 128, is_causal=True)
print("max |chunked - plain| =", float(np.abs(out_chunked.numpy() - out_plain.numpy()).max()))
del out_plain, out_chunked

# %% [markdown]
# ## 3. The figure: memory against sequence length, and a language model that learns
#
# The sweep (`workload_seq_len.run`) measures both ops from L = 128 upward: the bytes saved (the
# ledger), the peak of forward + backward (the ledger and tracemalloc), and the time. It then
# trains the tiny `TransformerLM` (2 blocks, width 64, 4 heads, context 64) character by
# character on `pydoc_data.topics` — the language reference that ships inside Python — and
# compares the validation loss with the **unigram baseline** (the cross-entropy of a model that
# only knows character frequencies).

# %%
records = {"config": {"heads": H, "head_dim": E, "chunk_size": 128, "batch": 1, "causal": True,
                      "dtype": "float32"},
           "attention": workload_seq_len._attention_sweep([128, 256, 512, 1024] if QUICK else
                                                          [128, 256, 512, 1024, 2048], "cpu"),
           "lm": workload_seq_len.train_lm(20 if QUICK else 600, batch_size=16 if QUICK else 32,
                                           log_every=10 if QUICK else 50)}
records["meta"] = RECORDS["meta"]
for p in records["attention"]:
    print(f"{p['impl']:>8} L={p['L']:>5}: saved {memory.format_bytes(p['saved_bytes']):>10}, "
          f"measured peak {memory.format_bytes(p['measured_peak']):>10}, {p['seconds'] * 1e3:7.1f} ms")
seconds = {(p["impl"], p["L"]): p["seconds"] for p in records["attention"]}
faster = [n for impl, n in seconds if impl == "chunked" and seconds["chunked", n] < seconds["plain", n]]
print(f"chunked was faster than plain in this run at L = {faster or 'none of the lengths'}")
lm = records["lm"]
committed = read_records(FIGURES, "workload_seq_len")["lm"]
print(f"\nLM validation loss {lm['val_loss']:.3f} nats/char after {lm['steps']} steps, unigram baseline "
      f"{lm['unigram_loss']:.3f} ({lm['unigram_loss'] - lm['val_loss']:+.3f} below it); the committed full "
      f"run: {committed['val_loss']:.3f} after {committed['steps']} steps")
print("sample:\n" + lm["sample"])
print("wrote", workload_seq_len.plot(records, OUT))

# %% [markdown]
# In quick mode the model trains for the few steps printed above and barely gets below the unigram
# baseline — it has learned little more than which characters are frequent, and the sample
# shows it. The committed full run (last number above) is what learning looks like.

# %% [markdown]
# Read the left panel on log axes: plain attention's line has slope 2 (quadratic), chunked has
# slope 1. The middle panel shows what the allocator saw: the plain op also needs a second
# (L, L) temporary in backward, so its real peak is about twice what it saves.
#
# ## 4. Checkpointing the language model
#
# Chunked attention removes the L² term; what is left grows with L · width · layers: the inputs
# of every Linear, LayerNorm and GELU. Those are what checkpointing (lesson 1) trades for
# recomputation. The blocks of `TransformerLM` take and return (B, T, d), so `model.blocks` cuts
# straight into segments:

# %%
_, _, vocab = data.load_python_docs()
T = 64 if QUICK else 256
lm_model = models.TransformerLM(len(vocab), T, d_model=64, n_heads=4, n_layers=4, chunk_size=64)
ids = np.random.default_rng(0).integers(0, len(vocab), (4, T))
for segments in (None, 2):
    with memory.track() as t:
        h = lm_model.embed(ids)
        h = lm_model.blocks(h) if segments is None else checkpoint_sequential(lm_model.blocks, segments, h)
        F.cross_entropy(lm_model.logits(h).reshape(-1, len(vocab)), ids.reshape(-1)).backward()
        del h
    print(f"segments={segments}: activation peak {memory.format_bytes(t.max_by_bucket()['activation'])}")
lm_model.zero_grad()

# %% [markdown]
# ## 5. Embedding tables: sparse gradients and one accumulator per row
#
# `nn.EmbeddingBag(rows, dim, mode="mean", sparse=True)` averages the rows each sample names.
# Its backward returns a `RowSparse` gradient (`tinymem/sparse.py`): `indices` (u,) and
# `values` (u, dim) for the u distinct rows of the batch, `to_dense()` to compare. The ledger
# counts it in the `gradient` bucket like any gradient:

# %%
table = nn.EmbeddingBag(1_000_000, 16, mode="mean", sparse=True)
bag = tm.tensor(np.random.default_rng(0).integers(0, 1_000_000, (256, 8)))
table(bag).sum().backward()
grad = table.weight.grad.data
print(grad, f"-> {memory.format_bytes(grad.nbytes)} instead of {memory.format_bytes(table.weight.nbytes)}")
np.testing.assert_array_equal(tm.backend.to_numpy(grad.to_dense()[grad.indices]), tm.backend.to_numpy(grad.values))
del table, grad

# %% [markdown]
# Adam would need two moments of the full table (8 bytes per weight) and cannot take a sparse
# gradient at all (tinymem raises, as PyTorch does). **Row-wise Adagrad** keeps one number per
# row — the running sum of each step's mean g² over the row — and updates only the rows it is
# given: 4 bytes per *row*. The figure trains the same recommender three ways and stacks each
# bucket's maximum:

# %%
emb_records = workload_embeddings.run(quick=True)
emb_records["meta"] = records["meta"]
print("wrote", workload_embeddings.plot(emb_records, OUT))
chance = emb_records["config"]["label_entropy"]
for point in emb_records["points"]:
    print(f"{point['config']:<26} test loss {point['test_loss']:.3f} (chance: {chance:.3f}, "
          f"{chance - point['test_loss']:+.3f} below it)")

# %% [markdown]
# These are a handful of steps on a small table (the quick sizes of the figure): the losses sit
# barely below chance, the cross-entropy of always predicting the click rate. The point of this
# figure is the memory of each bucket, which is exact from the first step; how far training
# gets is the figure's full run.

# %% [markdown]
# ## Which technique to reach for first
#
# | workload | the bucket that fills | first cure | second |
# | --- | --- | --- | --- |
# | Transformer LM, long context | activation (L² attention weights) | chunked attention | checkpoint blocks, half-precision activations |
# | Transformer LM, short context | activation (L · width · layers) | checkpoint blocks | half precision, micro-batching |
# | Recommender | parameter, gradient, optimizer (tables) | sparse gradients + row-wise Adagrad | table offload to host, int8 tables |
#
# ## Pitfalls
#
# - **Causal alignment**: PyTorch's `is_causal` masks key j > query i counting from the top-left;
#   with L ≠ M (a cache of past keys) you need the bottom-right variant — not what `is_causal` does.
# - **Half precision** in attention: the running sums of the online softmax overflow float16;
#   keep the accumulators (m, l, acc) in float32 as FlashAttention does.
# - Chunked attention trades memory for **compute**: backward recomputes every score block.
#   In NumPy its smaller working set (and the skipped blocks above the diagonal) can still make
#   it faster at long L — the sweep above says at which lengths it was, on this machine, in
#   this run; on a GPU the win comes from the fused kernel, which NumPy cannot show.
# - A **sparse gradient only reaches a leaf table**: casting or slicing the table before the
#   lookup makes it flow into a dense op. Weight decay with sparse gradients decays only the
#   touched rows ("lazy" decay): not the same as dense weight decay.
# - **Row-wise Adagrad is not Adam**: one step size per row suits embeddings (rows are
#   updated rarely, and the per-row scale is what matters); use Adam for the dense layers.
#
# ## Exercises (`lessons/exercises/ex06_seq.py`, check with `TINYMEM_EXERCISES=student python -m pytest -m exercise_06 tests/exercises/test_ex06_seq.py`)
#
# 1. `merge_partials(a, b)`: merge two online-softmax partial results (m, l, acc) of the same
#    query rows over disjoint key sets — the step that lets attention be split across devices.
# 2. `attention_saved_bytes(batch, heads, L, head_dim, chunked)`: the bytes each op saves, by
#    formula; the check holds it against the ledger. At which L does chunked reach 0.1x for
#    head_dim 64?
# 3. `coalesce_rows(indices, values)`: sum the rows of a gradient that share an index.
# 4. `rowwise_adagrad_rows(weight, accumulator, indices, grad_rows, lr, eps)`: one sparse step
#    of row-wise Adagrad, in place; the check compares it with `optim.RowWiseAdagrad`.
