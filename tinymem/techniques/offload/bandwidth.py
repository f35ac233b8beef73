"""What moving one byte costs on this machine: memcpy, disk write, disk read (and PCIe on CuPy).

``disk_write`` counts a file's whole life but its read: create, write, flush and delete.

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
import time

import numpy as np

from ... import backend
from ...measure.timing import best_time
from .store import read_file, write_file


def measure_bandwidths(chunk_bytes=1 << 20, total_bytes=32 << 20, directory=None, repeats=3,
                       device="cpu", page_cache=True, sizes=None):
    """Bytes per second for ``memcpy``, ``disk_write`` and ``disk_read`` (plus ``d2h``/``h2d``
    on CuPy); best of ``repeats``.

    The arrays moved are ``sizes`` (bytes each; pass the sizes a schedule offloads, so that the
    per-file cost is in the bandwidth) or else ``total_bytes`` in arrays of ``chunk_bytes``.
    Copies and reads go into freshly allocated arrays, as offload's do. ``page_cache`` as in
    :class:`~.offload_store.DiskStore`.
    """
    device = backend.check_device(device)
    if sizes is None:
        sizes = [chunk_bytes] * max(1, total_bytes // chunk_bytes)
    chunks = [np.full(max(1, n // 4), i, np.float32) for i, n in enumerate(sizes)]
    moved = sum(c.nbytes for c in chunks)

    def memcpy():
        for src in chunks:
            np.array(src, copy=True)

    folder = tempfile.mkdtemp(prefix="tinymem-bandwidth-", dir=directory)
    paths = [os.path.join(folder, f"{i:06d}.bin") for i in range(len(chunks))]
    write_s = read_s = float("inf")
    try:
        # Each read follows a fresh write, as backward follows forward: with page_cache=False
        # the write evicted the pages, so the read goes to the disk every time. A file's
        # deletion is part of its cost (milliseconds on a disk that discards freed blocks), and
        # is counted with the write.
        for _ in range(repeats):
            start = time.perf_counter()
            for path, c in zip(paths, chunks):
                write_file(path, c, page_cache)
            middle = time.perf_counter()
            for path, c in zip(paths, chunks):
                read_file(path, np.empty_like(c))
            end = time.perf_counter()
            for path in paths:
                os.unlink(path)
            write_s = min(write_s, middle - start + time.perf_counter() - end)
            read_s = min(read_s, end - middle)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    result = {"memcpy": moved / best_time(memcpy, repeats=repeats, warmup=0),
              "disk_write": moved / write_s, "disk_read": moved / read_s}
    if device == "cuda":
        result.update(_pcie(chunks, repeats))
    result.update(files=len(chunks), total_bytes=moved)
    return result


def _pcie(chunks, repeats):
    cupy = backend.get_cupy()
    pinned = [backend.get_cupyx().empty_pinned(c.shape, c.dtype) for c in chunks]
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

    return {"h2d": moved / best_time(h2d, repeats=repeats, warmup=1),
            "d2h": moved / best_time(d2h, repeats=repeats, warmup=1)}


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
