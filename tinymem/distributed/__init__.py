"""Partitioning across processes: data parallel, ZeRO stages 1-3 and a pipeline, over MPI.

One file per concept:

    comm.py           Communicator: mpi4py collectives on arrays, bytes counted, watchdog
    ring.py           the ring all-reduce, reduce-scatter and all-gather from point-to-point steps
    nccl.py           the same collectives for CuPy arrays through NCCL
    launch.py         mpiexec next to this Python, abort-on-exception hook, run(argv, nprocs)
    flat.py           FlatUnit: one layer's parameters as one padded buffer cut into N shards
    units.py          forward/backward unit by unit, with hooks between units
    data_parallel.py  DataParallel: replicas, gradients averaged by all-reduce
    zero.py           ZeRO stage 1, 2, 3: optimizer state, gradients, parameters sharded
    pipeline.py       Pipeline: stages on ranks, micro-batches, GPipe and 1F1B schedules
    calculator.py     the ZeRO paper's bytes-per-device and traffic formulas
    worker.py         what each rank runs when the tests, figures and lesson launch mpiexec
    ring_tasks.py     the ring checked against MPI's built-in collectives, and timed beside them

Launch a training script on N ranks with ``mpiexec -n N python script.py`` (see README).
Importing this package does not import mpi4py; making a Communicator does.
"""
from . import calculator, launch
from .comm import Communicator
from .calculator import model_state_bytes, paper_table, traffic_bytes
from .data_parallel import DataParallel
from .pipeline import Pipeline, bubble_fraction
from .zero import ZeRO


__all__ = ["Communicator", "DataParallel", "ZeRO", "Pipeline", "bubble_fraction", "calculator",
           "launch", "model_state_bytes", "paper_table", "traffic_bytes"]
