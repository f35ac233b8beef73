"""8-bit Adam (Dettmers et al., 2022): both moments stored block-wise quantized.

Each step, for a parameter of n >= ``min_8bit_size`` elements:
    m, v = dequantize(state)              (float32 temporaries, 8n bytes, freed after the step)
    Adam's update with m, v in float32    (the same arithmetic as ``Adam._direction``)
    state = quantize(m), quantize(v)      (block-wise: 1 byte per element + 4 bytes per block)
The update itself uses the float32 moments of this step; only what is carried to the next step
is rounded, as in bitsandbytes. ``m`` uses the signed map, ``v`` (never negative) the unsigned
one, so its 256 codes all cover [0, 1].

State: 2n + 8·ceil(n / block_size) bytes instead of 8n: 2.004 bytes per parameter at block
2048 (0.2505x Adam). Tensors under ``min_8bit_size`` = 4096 elements (biases, norms) stay
float32 (8 bytes per parameter), as in the paper: their state is small and they are sensitive.
The two codebooks (each map and a 128 KiB lookup table that replaces a search, 258 KiB in all)
are counted once per optimizer.

``qmap="linear"`` swaps in evenly spaced maps, the paper's ablation: small second-moment entries
round to zero, and the step m / (sqrt(v) + eps) blows up for them. Pitfall: bitsandbytes fuses
dequantize-update-quantize in one kernel; here the float32 moments of one parameter exist for
the duration of its step (8n bytes of workspace at the largest parameter, and requantizing
adds 20n bytes of temporaries: normalised values, keys, bucket indices, table entries).
"""
import math

import numpy as np

from .. import backend, memory
from . import blockwise
from .adam import Adam


class Adam8bit(Adam):
    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0,
                 block_size=2048, min_8bit_size=4096, qmap="dynamic"):
        if qmap not in blockwise.MAPS:
            raise ValueError(f"unknown qmap {qmap!r}; choose one of {', '.join(blockwise.MAPS)}")
        if block_size < 1 or min_8bit_size < 0:
            raise ValueError(f"block_size must be >= 1 and min_8bit_size >= 0, got {block_size}, {min_8bit_size}")
        super().__init__(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)
        for group in self.param_groups:
            group.update(block_size=block_size, min_8bit_size=min_8bit_size, qmap=qmap)
        self._maps = {}

    # Two codebooks (m's signed map, v's unsigned one), each 256 float32 values and a table of
    # 2**15 uint32 entries that finds a value's code in one lookup (see blockwise.Codebook).
    MAP_BYTES = 2 * (256 * 4 + 4 * 2 ** 15)

    @staticmethod
    def bytes_for(shape, itemsize, group):
        """State bytes of one parameter: codes and block scales for m and v, or float32 Adam."""
        n = math.prod(shape)
        if n < group["min_8bit_size"]:
            return 2 * n * itemsize
        return 2 * (n + 4 * blockwise.num_blocks(n, group["block_size"]))

    def state_bytes(self):
        return super().state_bytes() + sum(a.nbytes for pair in self._maps.values() for a in pair)

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
        g = self._decay(p, grad, group)
        m = blockwise.dequantize(state["exp_avg_codes"], state["exp_avg_absmax"], qm, block, self.scratch)
        v = blockwise.dequantize(state["exp_avg_sq_codes"], state["exp_avg_sq_absmax"], qv, block, self.scratch)
        p.data -= self._direction(m, v, g.astype(np.float32, copy=False), state["step"], group).astype(p.dtype, copy=False)
        blockwise.quantize(m, qm, block, state["exp_avg_codes"], state["exp_avg_absmax"], self.scratch)
        blockwise.quantize(v, qv, block, state["exp_avg_sq_codes"], state["exp_avg_sq_absmax"], self.scratch)
