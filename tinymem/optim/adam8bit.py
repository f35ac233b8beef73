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

On a device (float32, contiguous) the step is 5 kernels, 6 when n is not a whole number of
blocks, instead of 30 and 3 reductions: (1) ``ADAM8BIT_MOMENTS`` dequantizes m and v, steps
them and the weights, and writes the float32 moments into a scratch of 8 bytes per element
(padded with zeros to whole blocks: one more fill); (2-4) |m|, its block maxima and v's (v >= 0),
straight into the state's scales; (5) ``ADAM8BIT_CODES`` finds both moments' codes with the
codebook's table. The kernels' bodies run on the stand-in in CI, against this CPU code.

``qmap="linear"`` swaps in evenly spaced maps, the paper's ablation: small second-moment entries
round to zero, and the step m / (sqrt(v) + eps) blows up for them.
"""
import math

import numpy as np

from .. import backend, memory
from ..fused import Kernel
from . import blockwise
from .blockwise import num_blocks
from .adam import _SCALARS, Adam

_LOW15, _TINY = 0x7FFF, np.float32(np.finfo(np.float32).smallest_subnormal)


def _moments_body(ops, g, m_codes, v_codes, m_scale, v_scale, m_map, v_map, block,
                  wd, decay, beta1, beta2, one_minus_beta1, one_minus_beta2, bias2_sqrt, step_size, eps, p, m, v):
    blk = ops.cast(ops.index(), np.uint64) // block
    m = ops.take(m_map, m_codes) * ops.take(m_scale, blk)  # dequantize, as blockwise.dequantize
    v = ops.take(v_map, v_codes) * ops.take(v_scale, blk)
    g = g + wd * p
    m = m * beta1 + g * one_minus_beta1
    v = v * beta2 + g * g * one_minus_beta2
    update = m / (ops.sqrt(v) / bias2_sqrt + eps) * step_size
    return p * decay - update, m, v


def _code(ops, x, scale, entries, blk, signed):
    """The codebook's code of x / scale (``blockwise.Codebook.codes``; the bucket is taken modulo
    2**15, as ``take`` wraps -0.0's bucket there)."""
    bits = ops.bitcast(x / ops.maximum(ops.take(scale, blk), _TINY), np.int32)
    key = ops.cast(bits, np.uint32)
    if signed:
        key = ops.where(bits < 0, 0 - key, key)
    return (ops.take(entries, (key >> 16) & _LOW15) + key) >> 16


def _codes_body(ops, m, v, m_scale, v_scale, m_entries, v_entries, block, m_codes, v_codes):
    blk = ops.cast(ops.index(), np.uint64) // block
    return _code(ops, m, m_scale, m_entries, blk, True), _code(ops, v, v_scale, v_entries, blk, False)


ADAM8BIT_MOMENTS = Kernel(
    "adam8bit_moments", "float32 g, uint8 m_codes, uint8 v_codes, raw float32 m_scale, raw float32 v_scale, "
    "raw float32 m_map, raw float32 v_map, uint64 block, " + ", ".join(f"float32 {n}" for n in _SCALARS),
    "float32 p, float32 m, float32 v", _moments_body, ("block",) + _SCALARS)
ADAM8BIT_CODES = Kernel(
    "adam8bit_codes", "float32 m, float32 v, raw float32 m_scale, raw float32 v_scale, raw uint32 m_entries, "
    "raw uint32 v_entries, uint64 block", "uint8 m_codes, uint8 v_codes", _codes_body, ("block",))


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
        if n == 0:  # nothing to step (and no chunk of 0 elements to loop over)
            return
        if backend.array_module(grad) is not np and grad.dtype == p.data.dtype == np.float32 \
                and p.data.flags.c_contiguous and qm.signed and not qv.signed:
            return self._fused_8bit_update(p, grad, state, group, qm, qv)
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

    def _fused_8bit_update(self, p, grad, state, group, qm, qv):
        """The step in 5 or 6 kernels on a device (see the module docstring). Workspace: the
        float32 moments, padded to whole blocks, and |m|: 12 bytes per element."""
        xp, block, n = backend.array_module(grad), group["block_size"], p.size
        blocks = num_blocks(n, block)
        padded = (xp.zeros if blocks * block > n else xp.empty)((2, blocks * block), np.float32)
        moments = self.scratch(padded)
        m, v = moments[0, :n], moments[1, :n]
        codes, scales = [state[name + "_codes"].reshape(-1) for name in ("exp_avg", "exp_avg_sq")], \
            [state[name + "_absmax"] for name in ("exp_avg", "exp_avg_sq")]
        t, (beta1, beta2), lr = state["step"], group["betas"], group["lr"]
        scalars = [group["weight_decay"], 1.0, beta1, beta2, 1 - beta1, 1 - beta2, math.sqrt(1 - beta2 ** t),
                   lr / (1 - beta1 ** t), group["eps"]]
        ADAM8BIT_MOMENTS(grad.reshape(-1), *codes, *scales, qm.values, qv.values, np.uint64(block),
                         *(np.float32(x) for x in scalars), p.data.reshape(-1), m, v)
        magnitude = self.scratch(xp.abs(moments[0].reshape(blocks, block)))
        magnitude.max(axis=1, out=scales[0])
        del magnitude
        moments[1].reshape(blocks, block).max(axis=1, out=scales[1])
        ADAM8BIT_CODES(m, v, *scales, qm.entries, qv.entries, np.uint64(block), *codes)
