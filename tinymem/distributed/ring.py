"""The ring algorithm: reduce-scatter, all-gather and all-reduce built from point-to-point exchanges.

N ranks stand in a ring: rank r only ever sends to r+1 and receives from r-1 (mod N). The
buffer of n elements is cut into N equal blocks of s = ceil(n/N) elements (zero-padded to N·s
when N does not divide n: padding is what makes every message the same size).

    reduce-scatter, N-1 steps. At step t rank r sends block (r-t-1) mod N to r+1, receives
    block (r-t-2) mod N from r-1 and adds it into its own copy of that block. The partial
    sum of block b starts on rank b+1 and travels once around the ring, one rank's share
    added per hop; after N-1 hops it lands, complete, on rank b.

    all-gather, N-1 steps. At step t rank r sends block (r-t) mod N (its own at t = 0, then
    the one it just received) and receives block (r-t-1) mod N, overwriting it.

    all-reduce = reduce-scatter, then all-gather of the reduced blocks: 2(N-1) steps.

Bytes each rank sends, and as many it receives (b bytes per element):

    reduce-scatter, all-gather   (N-1)·s·b          = (N-1)/N·n·b when N divides n
    all-reduce                   2(N-1)·s·b         = 2(N-1)/N·n·b

Every rank sends the same amount, whatever N: that is why the ring is bandwidth-optimal. Its
cost is latency: 2(N-1) messages one after the other, where a tree needs about 2·log2(N).

Float order: block b of the sum is ((x[b+1] + x[b+2]) + ...) + x[b], ranks taken mod N,
starting after the block's owner. The all-gather copies that result, so every rank ends with
the same bits; a plain sum over ranks 0..N-1 (or MPI's own algorithm) may differ in the last bit.

Each function here is one rank's side of the algorithm. ``exchange(send, recv)`` is the only
communication: send the array ``send`` to the right neighbour while receiving the left
neighbour's array into ``recv`` (MPI's ``Sendrecv``, see :mod:`.comm`), so the same code runs
over MPI or on the simulated ring of :func:`simulate` (one thread per rank, in one process).

Memory cost (both counted as ``workspace`` in the ledger): one receive block of s elements during
the reduce-scatter; :func:`all_reduce` of a buffer whose size N does not divide also makes a
padded copy of N·s elements.
"""
import queue
import threading

from .. import backend, memory

OPS = {"sum": "add", "max": "maximum"}


def block_size(numel, world_size):
    """Elements per block: ceil(numel / world_size)."""
    return -(-numel // world_size)


def ring_bytes(kind, numel, itemsize, world_size):
    """Bytes one rank sends (and receives) in a ring ``kind`` over ``numel`` elements, padding included."""
    steps = {"all_reduce": 2, "reduce_scatter": 1, "all_gather": 1}[kind] * (world_size - 1)
    return steps * block_size(numel, world_size) * itemsize


def _check_blocks(blocks, rank):
    if blocks.ndim != 2 or not blocks.flags.c_contiguous:
        raise ValueError(f"the ring works on a C-contiguous (world_size, block) array; got shape "
                         f"{blocks.shape} (reshape the padded flat buffer to (N, -1))")
    if not 0 <= rank < blocks.shape[0]:
        raise ValueError(f"rank {rank} is not in a ring of {blocks.shape[0]}")


def reduce_scatter(blocks, rank, exchange, op="sum"):
    """Reduce the (N, s) array ``blocks`` over the ring: block ``rank`` ends as the sum over ranks.

    The other blocks are left holding partial sums. Returns ``blocks[rank]`` (a view).
    """
    _check_blocks(blocks, rank)
    size = blocks.shape[0]
    combine = getattr(backend.array_module(blocks), OPS[op])
    incoming = memory.register(backend.array_module(blocks).empty_like(blocks[0]), "workspace")
    for step in range(size - 1):
        send, recv = (rank - step - 1) % size, (rank - step - 2) % size
        exchange(blocks[send], incoming)
        combine(blocks[recv], incoming, out=blocks[recv])
    return blocks[rank]


def all_gather(blocks, rank, exchange):
    """Fill every block of the (N, s) array ``blocks`` from the rank that owns it (block r on rank r)."""
    _check_blocks(blocks, rank)
    size = blocks.shape[0]
    for step in range(size - 1):
        exchange(blocks[(rank - step) % size], blocks[(rank - step - 1) % size])
    return blocks


def all_reduce(flat, rank, world_size, exchange, op="sum"):
    """Reduce the 1-D contiguous array ``flat`` over the ring, in place; returns it."""
    if flat.ndim != 1 or not flat.flags.c_contiguous:
        raise ValueError(f"all_reduce takes a flat contiguous array; got shape {flat.shape} (pass a.reshape(-1))")
    s = block_size(flat.size, world_size)
    padded = s * world_size != flat.size
    if padded:  # zeros after the data, so that every message is one block of s elements
        blocks = memory.register(backend.array_module(flat).zeros((world_size, s), flat.dtype), "workspace")
        blocks.reshape(-1)[:flat.size] = flat
    else:
        blocks = flat.reshape(world_size, s)
    reduce_scatter(blocks, rank, exchange, op)
    all_gather(blocks, rank, exchange)
    if padded:
        flat[...] = blocks.reshape(-1)[:flat.size]
    return flat


def simulate(world_size, body, timeout=30):
    """Run ``body(rank, exchange)`` for every rank on its own thread, in one process.

    ``exchange`` passes a copy of ``send`` to the right neighbour's inbox and takes the left
    neighbour's message from this rank's own, so the ranks meet at each step as they do under
    MPI. Returns ``(results, sent)``: each rank's return value, and the bytes each rank passed
    to ``exchange`` (the same measurement the communicator makes of ``Sendrecv``).
    """
    inboxes = [queue.Queue() for _ in range(world_size)]
    results, sent, errors = [None] * world_size, [0] * world_size, []

    device = backend.default_device()  # a rank makes its arrays where the caller's thread would

    def rank_main(rank):
        def exchange(send, recv):
            inboxes[(rank + 1) % world_size].put(send.copy())
            incoming = inboxes[rank].get(timeout=timeout)
            if incoming.shape != recv.shape:
                raise ValueError(f"rank {rank} expected a block of shape {recv.shape}, got {incoming.shape}")
            recv[...] = incoming
            sent[rank] += send.nbytes
        try:
            with backend.default_device_as(device):
                results[rank] = body(rank, exchange)
        except Exception as exc:  # re-raised in the caller's thread
            errors.append(exc)

    threads = [threading.Thread(target=rank_main, args=(r,), daemon=True) for r in range(world_size)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return results, sent
