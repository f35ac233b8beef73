"""8-bit Adam (Dettmers et al., 2022): both moments stored block-wise quantized.

Each step, for a parameter of n >= ``min_8bit_size`` elements, chunk after chunk of whole
blocks (``CHUNK`` = 131,072 elements on the CPU; up to 16M on a GPU, ``backend.chunk_elements``):
    m, v = dequantize(state chunk)        (float32, into buffers reused by every chunk)
    Adam's update with m, v in float32    (``Adam._direction``, into two reused buffers)
    state chunk = quantize(m), quantize(v)   (1 byte per element + 4 bytes per block)
The update itself uses the float32 moments of this step; only what is carried to the next step
is rounded, as in bitsandbytes. ``m`` uses the signed map, ``v`` (never negative) the unsigned
one, so its 256 codes all cover [0, 1]. Chunks give what bitsandbytes gets from fusing the three
in one kernel: the temporaries stay small and in cache, 24 bytes per element of one chunk
(m, v, Adam's two, and an int64 index; quantizing normalises each moment in place and puts its
table entries in Adam's update, free once the weights moved), 3 MiB at most, where a whole
parameter at once needs its float32 moments (8n bytes) and temporaries as large. On a GPU each
pass over a chunk is a kernel launch: there 128K-element chunks made the step 138x Adam's and
whole tensors 2.7x, so a chunk holds up to 16M elements (384 MiB of temporaries at most).
Weights, codes and scales are those of the whole-array step bit for bit (a test holds them).

State: 2n + 8·ceil(n / block_size) bytes instead of 8n: 2.004 bytes per parameter at block
2048 (0.2505x Adam). Tensors under ``min_8bit_size`` = 4096 elements (biases, norms) stay
float32 (8 bytes per parameter), as in the paper: their state is small and they are sensitive.
The two codebooks (each map and a 128 KiB lookup table that replaces a search, 258 KiB in all)
are counted once per optimizer.

``qmap="linear"`` swaps in evenly spaced maps, the paper's ablation: small second-moment entries
round to zero, and the step m / (sqrt(v) + eps) blows up for them.
"""
import math

import numpy as np

from .. import backend, memory
from . import blockwise
from .blockwise import num_blocks
from .adam import Adam


class Adam8bit(Adam):
    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0,
                 block_size=2048, min_8bit_size=4096, qmap="dynamic"):
        super().__init__(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)
        for group in self.param_groups:
            # A group's own values win, as for lr (e.g. min_8bit_size=0 for one group's small tensors).
            group.setdefault("block_size", block_size)
            group.setdefault("min_8bit_size", min_8bit_size)
            group.setdefault("qmap", qmap)
            if group["qmap"] not in blockwise.MAPS:
                raise ValueError(f"unknown qmap {group['qmap']!r}; choose one of {', '.join(blockwise.MAPS)}")
            if group["block_size"] < 1 or group["min_8bit_size"] < 0:
                raise ValueError(f"block_size must be >= 1 and min_8bit_size >= 0, got {group['block_size']}, "
                                 f"{group['min_8bit_size']}")
        self._maps = {}

    # Two codebooks (m's signed map, v's unsigned one), each 256 float32 values and a table of
    # 2**15 uint32 entries that finds a value's code in one lookup (see blockwise.Codebook).
    MAP_BYTES = 2 * (256 * 4 + 4 * 2 ** 15)
    # Elements per pass of the update (512 KiB per float32 temporary): each chunk costs 40-90 us
    # of Python and ufunc calls whatever its size, so halving it (16 chunks of a 1024 x 1024
    # parameter) made the step 10% slower, and doubling it 2% faster for twice the memory.
    CHUNK = 2 ** 17

    @staticmethod
    def bytes_for(shape, itemsize, group):
        """State bytes of one parameter: codes and block scales for m and v, or float32 Adam."""
        n = math.prod(shape)
        if n < group["min_8bit_size"]:
            return 2 * n * itemsize
        return 2 * (n + 4 * blockwise.num_blocks(n, group["block_size"]))

    def state_bytes(self):
        return super().state_bytes() + self.map_bytes()

    def map_bytes(self):
        """The maps' share of :meth:`state_bytes`: fixed, once per optimizer (and device)."""
        return sum(a.nbytes for pair in self._maps.values() for a in pair)

    def _qmaps(self, kind, like):
        """(signed codebook for m, unsigned one for v) on ``like``'s device, made once and counted."""
        key = (kind, backend.device_of(like))
        if key not in self._maps:
            make = blockwise.MAPS[kind]
            books = tuple(blockwise.Codebook(backend.to_device(make(signed), key[1])) for signed in (True, False))
            for book in books:
                for array in (book.values, book.entries):
                    memory.register(array, "optimizer", place=self.update_place)
            self._maps[key] = books
        return self._maps[key]

    def update_parameter(self, p, grad, state, group):
        if p.size < group["min_8bit_size"]:
            return super().update_parameter(p, grad, state, group)
        block, n = group["block_size"], p.size
        qm, qv = self._qmaps(group["qmap"], grad)
        if "exp_avg_codes" not in state:
            state["step"] = 0
            blocks = blockwise.num_blocks(n, block)
            for name in ("exp_avg", "exp_avg_sq"):
                state[name + "_codes"] = self.state_array(grad, dtype=np.uint8)
                # an all-zero code block must dequantize to 0: the scale starts at 0
                state[name + "_absmax"] = self.state_array(grad, dtype=np.float32, shape=(blocks,))
        state["step"] += 1
        g = self._decay(p, grad, group).astype(np.float32, copy=False).reshape(-1)
        weights = p.data.reshape(-1)  # a view of p when p is contiguous, else a copy put back below
        xp = backend.array_module(g)
        # Whole blocks, so each keeps one scale; on a GPU a chunk is most often the whole tensor.
        chunk = min(n, block * max(1, backend.chunk_elements(xp, self.CHUNK) // block))
        m, v, tmp, update = (self.scratch(xp.empty(chunk, np.float32)) for _ in range(4))
        index = self.scratch(xp.empty(chunk, np.intp))  # codes for take, then table buckets
        moments = [(state[name + "_codes"].reshape(-1), state[name + "_absmax"], book, buffer)
                   for name, book, buffer in (("exp_avg", qm, m), ("exp_avg_sq", qv, v))]
        with blockwise.block_buffers(xp, block):
            for start in range(0, n, chunk):
                part = slice(start, min(start + chunk, n))
                size, blocks = part.stop - start, slice(start // block, num_blocks(part.stop, block))
                for codes, absmax, book, buffer in moments:
                    blockwise.dequantize(codes[part], absmax[blocks], book, block, out=buffer[:size], index=index[:size])
                step = self._direction(m[:size], v[:size], g[part], state["step"], group, work=(tmp[:size], update[:size]))
                weights[part] -= step.astype(p.dtype, copy=False)
                # Each moment is normalised in place (its float32 values are done with), and the
                # table entries go to Adam's temporary, free once the weights moved.
                for codes, absmax, book, buffer in moments:
                    blockwise.quantize(buffer[:size], book, block, codes[part], absmax[blocks],
                                       work=(buffer[:size], index[:size], update[:size].view(np.uint32)),
                                       check=False)  # m is signed; v >= 0 by construction
        if not p.data.flags.c_contiguous:
            p.data[...] = weights.reshape(p.shape)
