"""Offload: keep training state off the device and bring it back when it is needed.

    activations.py  save_on_host, save_on_disk: saved tensors leave the device in forward
    stream.py       stream_layers: weights on the host or disk, one layer on the device at a time
    optimizer.py    offload_optimizer: optimizer state and its update on the host or disk
    store.py        HostStore, DiskStore: where offloaded arrays live; files written atomically
    copies.py       asynchronous host<->GPU copies: their stream, and sources kept until done
    pool.py         HostPool: host buffers that offloaded arrays reuse from step to step
    prefetch.py     the background thread that brings arrays back ahead of use
    bandwidth.py    what one byte costs to move on this machine, to predict a schedule's time
"""
from .activations import saved_schedule, save_on_disk, save_on_host
from .bandwidth import measure_bandwidths, predicted_seconds
from .optimizer import OffloadedOptimizer, offload_optimizer
from .pool import HOST_POOL, HostPool, empty_host_pool
from .prefetch import Prefetcher
from .store import DiskStore, HostStore, OffloadError
from .stream import StreamedLayers, stream_layers

__all__ = ["save_on_host", "save_on_disk", "saved_schedule", "stream_layers", "StreamedLayers",
           "offload_optimizer", "OffloadedOptimizer", "HostStore", "DiskStore", "OffloadError",
           "HostPool", "HOST_POOL", "empty_host_pool", "Prefetcher", "measure_bandwidths", "predicted_seconds"]
