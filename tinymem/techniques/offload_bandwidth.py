"""What moving one byte costs on this machine: memcpy, disk write, disk read (and PCIe on CuPy).

Offload trades memory for traffic, so its time is predictable: a step with offload should take
the step without it plus ``bytes_out / write_bandwidth + bytes_in / read_bandwidth`` when nothing
overlaps, and less when prefetch hides the reads behind compute. :func:`measure_bandwidths`
measures the bandwidths with the very functions offload uses (``np.copyto``, and
:func:`~.offload_store.write_file` / :func:`~.offload_store.read_file` on files of the same
size as the offloaded arrays), in the same run as the step it predicts.

Pitfall: a file read back soon after it was written usually comes from the OS page cache (RAM),
not from the disk itself; the read bandwidth measured here is the one offload actually gets.
"""
import os
import shutil
import tempfile

import numpy as np

from .. import backend
from ..benchmarks._timing import best_time
from .offload_store import read_file, write_file


def _best(fn, repeats):
    return best_time(fn, repeats=repeats, warmup=0)


def measure_bandwidths(chunk_bytes=1 << 20, total_bytes=32 << 20, directory=None, repeats=3, device="cpu"):
    """Bytes per second for ``memcpy``, ``disk_write`` and ``disk_read`` (plus ``d2h``/``h2d``
    on CuPy), moving ``total_bytes`` in arrays (files) of ``chunk_bytes``; best of ``repeats``."""
    count = max(1, total_bytes // chunk_bytes)
    chunks = [np.full(chunk_bytes // 4, i, np.float32) for i in range(count)]
    copies = [np.empty_like(c) for c in chunks]
    moved = sum(c.nbytes for c in chunks)

    def memcpy():
        for src, dst in zip(chunks, copies):
            np.copyto(dst, src)

    folder = tempfile.mkdtemp(prefix="tinymem-bandwidth-", dir=directory)
    paths = [os.path.join(folder, f"{i:06d}.bin") for i in range(count)]
    try:
        def write():
            for path, c in zip(paths, chunks):
                write_file(path, c)

        def read():
            for path, c in zip(paths, copies):
                read_file(path, c)

        result = {"memcpy": moved / _best(memcpy, repeats), "disk_write": moved / _best(write, repeats),
                  "disk_read": moved / _best(read, repeats)}
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    if device == "cuda":
        result.update(_pcie(chunks, repeats))
    result.update(chunk_bytes=chunks[0].nbytes, total_bytes=moved)
    return result


def _pcie(chunks, repeats):
    import cupyx
    cupy = backend.get_cupy()
    pinned = [cupyx.empty_pinned(c.shape, c.dtype) for c in chunks]
    for p, c in zip(pinned, chunks):
        p[...] = c
    on_device = [cupy.empty(c.shape, c.dtype) for c in chunks]
    moved = sum(c.nbytes for c in chunks)

    def h2d():
        for d, p in zip(on_device, pinned):
            d.set(p)
        cupy.cuda.Device().synchronize()

    def d2h():
        for d, p in zip(on_device, pinned):
            d.get(out=p)
        cupy.cuda.Device().synchronize()

    return {"h2d": moved / _best(h2d, repeats), "d2h": moved / _best(d2h, repeats)}


def predicted_seconds(base_s, bytes_out, bytes_in, bandwidths, place):
    """The step time offload should take if no transfer overlaps compute.

    ``place="host"``: copies at ``memcpy`` speed (``d2h``/``h2d`` on a GPU); ``"disk"``: writes
    at ``disk_write`` and reads at ``disk_read``.
    """
    if place == "host":
        out_bw = bandwidths.get("d2h", bandwidths["memcpy"])
        in_bw = bandwidths.get("h2d", bandwidths["memcpy"])
    elif place == "disk":
        out_bw, in_bw = bandwidths["disk_write"], bandwidths["disk_read"]
        if "d2h" in bandwidths:  # on a GPU a file is written from, and read into, host memory
            base_s += bytes_out / bandwidths["d2h"] + bytes_in / bandwidths["h2d"]
    else:
        raise ValueError(f"place must be 'host' or 'disk', got {place!r}")
    return base_s + bytes_out / out_bw + bytes_in / in_bw
