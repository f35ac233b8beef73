"""What each rank runs when the tests, the ``partition`` figures and the lesson launch mpiexec.

    mpiexec -n 2 python -m tinymem.distributed.worker check        # equalities, in float64
    mpiexec -n 4 python -m tinymem.distributed.worker measure      # bytes and traffic per rank
    mpiexec -n 2 python -m tinymem.distributed.worker collectives  # ring against MPI, timed
    mpiexec -n 2 python -m tinymem.distributed.worker crash        # rank 1 raises mid-step

Rank 0 prints one line ``RESULT {json}``; :func:`parse_result` reads it back.

``check`` trains the same seeded MLP with Adam for a few steps five ways (single process on the
full batch, data parallel, ZeRO-1/2/3) and two pipelines (GPipe, 1F1B) and reports the
largest parameter difference of each against its reference, plus per-rank optimizer bytes;
then data parallel and ZeRO once more over the ring algorithm (against the built-in runs) and
the ring's own collectives on every sub-ring (:func:`.ring_tasks.check_ring`).
It runs in float64 so the comparison measures the method, not float32 rounding (in float32,
Adam's m/sqrt(v) turns 1e-7 differences of near-zero gradients into visible ones).

``measure`` runs one warm-up step (Adam creates its state) and then one tracked step per
strategy in float32, recording per rank: the ledger at the end of backward, each bucket's
peak in the step, the allocator's peak, the bytes communicated (measured, and by formula) and
the step time. With ``--algorithm ring`` the collectives are the ring's, and the bytes sent
are the ones handed to ``MPI.Sendrecv``.
"""
import argparse
import gc
import json
import os
import signal
import sys
import time

import numpy as np

from .. import functional as F
from .. import backend, memory, models, optim, random
from ..measure.timing import best_time
from .calculator import traffic_bytes
from .comm import Communicator
from .data_parallel import DataParallel
from .launch import install_excepthook
from .pipeline import Pipeline
from .ring_tasks import check_ring, time_collectives
from .zero import ZeRO

STRATEGIES = ("dp", "zero1", "zero2", "zero3", "gpipe", "1f1b")
RING_CHECKED = ("dp", "zero1", "zero3")  # trained again over the ring in ``check``


def make_model(sizes, dtype, device="cpu"):
    random.manual_seed(0)
    return models.MLP(sizes).to(device, dtype=dtype)


def make_batch(sizes, batch, dtype, device="cpu", seed=1):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((batch, sizes[0])).astype(dtype)
    y = rng.integers(0, sizes[-1], batch).astype(np.int64)
    return backend.to_device(x, device), backend.to_device(y, device)


def adam(params):
    return optim.Adam(params, lr=1e-2, weight_decay=1e-2)


def build(name, model, comm, micro_batches):
    if name == "dp":
        return DataParallel(model, adam, comm)
    if name.startswith("zero"):
        return ZeRO(model, adam, comm, stage=int(name[-1]))
    return Pipeline(model, adam, comm, micro_batches=micro_batches, schedule=name)


def full_state(name, strategy, model, comm):
    """Every parameter's value on rank 0 (a collective; test plumbing, not counted as traffic)."""
    if name.startswith("zero"):
        return strategy.gathered_state_dict()
    if name in ("gpipe", "1f1b"):
        mine = {k: v for k, v in model.state_dict().items() if v.size}
        parts = comm.comm.gather(mine, root=0)
        return {k: v for part in parts or [] for k, v in part.items()}
    return model.state_dict()


def max_diff(a, b):
    if set(a) != set(b):
        raise KeyError(f"state dicts differ in keys: {sorted(set(a) ^ set(b))}")
    return max(float(np.max(np.abs(a[k] - b[k]))) for k in a)


def task_check(args, comm):
    sizes, dtype = [12, 16, 16, 16, 4], np.float64
    x, y = make_batch(sizes, args.batch, dtype)
    reference = make_model(sizes, dtype)
    opt = adam(reference.parameters())
    for _ in range(args.steps):
        opt.zero_grad()
        F.cross_entropy(reference(x), y).backward()
        opt.step()
    ref_state = reference.state_dict()
    ref_opt_bytes = opt.state_bytes()
    del reference, opt
    result = {"world_size": comm.size, "steps": args.steps, "diff": {}, "optimizer_bytes": {},
              "optimizer_bytes_single": ref_opt_bytes}
    states = {}
    for name in STRATEGIES:
        model = make_model(sizes, dtype)
        strategy = build(name, model, comm, args.micro_batches)
        for _ in range(args.steps):
            strategy.step(x, y, F.cross_entropy)
        gc.collect()
        result.setdefault("activation_after_step", {})[name] = comm.comm.gather(
            memory.live_bytes("activation"), root=0)
        states[name] = full_state(name, strategy, model, comm)
        own = strategy.optimizer.state_bytes() if strategy.optimizer is not None else 0
        result["optimizer_bytes"][name] = comm.comm.gather(own, root=0)
        strategy = model = None  # free both before the next strategy is built
        gc.collect()
    frozen = _check_frozen(sizes, dtype, x, y, comm, args.steps)
    ring = Communicator(comm.comm, timeout=comm.timeout, algorithm="ring")
    for name in RING_CHECKED:
        model = make_model(sizes, dtype)
        strategy = build(name, model, ring, args.micro_batches)
        for _ in range(args.steps):
            strategy.step(x, y, F.cross_entropy)
        states[name + "_ring"] = full_state(name, strategy, model, comm)
        strategy = model = None  # free both before the next strategy is built
    result["ring_collectives"] = check_ring(comm)
    if comm.rank == 0:
        for name in RING_CHECKED:
            result["diff"][name + "_ring"] = max_diff(states[name + "_ring"], states[name])
        result["diff"]["dp"] = max_diff(states["dp"], ref_state)
        for name in ("zero1", "zero2", "zero3"):
            result["diff"][name] = max_diff(states[name], states["dp"])
        for name in ("gpipe", "1f1b"):
            result["diff"][name] = max_diff(states[name], ref_state)
        result["diff"].update(frozen)
        print("RESULT " + json.dumps(result), flush=True)


def _check_frozen(sizes, dtype, x, y, comm, steps):
    """ZeRO with parameters that have no gradient against one process: the second Linear's bias frozen
    from the start, the first one's from the second step (after SGD gave it momentum), with weight
    decay; a plain optimizer skips both. Returns ``{"zero<k>_frozen": largest difference}``."""
    def sgd(params):
        return optim.SGD(params, lr=0.05, momentum=0.9, weight_decay=0.1)

    def train(step_fn, model):
        for i in range(steps):
            model[2].bias.requires_grad = False
            model[0].bias.requires_grad = i == 0
            step_fn()
        return model

    reference = make_model(sizes, dtype)
    opt = sgd(reference.parameters())

    def plain_step():
        opt.zero_grad()
        F.cross_entropy(reference(x), y).backward()
        opt.step()

    ref_state = train(plain_step, reference).state_dict()
    out = {}
    for stage in (1, 2, 3):
        model = make_model(sizes, dtype)
        strategy = ZeRO(model, sgd, comm, stage=stage)
        train(lambda: strategy.step(x, y, F.cross_entropy), model)
        state = strategy.gathered_state_dict()
        if comm.rank == 0:
            out[f"zero{stage}_frozen"] = max_diff(state, ref_state)
    return out


def textbook_sent(name, strategy, params, batch, itemsize, world_size):
    """Bytes this rank should send per step by the textbook formula (ring collectives, no padding)."""
    if name in ("gpipe", "1f1b"):
        # activations forward to the next stage, gradients back to the previous one (MLP widths)
        linears = [u for u in strategy.units if hasattr(u, "in_features")]
        sent = 0
        if strategy.stage < strategy.stages - 1:
            sent += batch * linears[-1].out_features * itemsize
        if strategy.stage > 0:
            sent += batch * linears[0].in_features * itemsize
        return sent
    return traffic_bytes(params, world_size, name, itemsize)


def task_measure(args, comm):
    sizes = [int(s) for s in args.sizes.split(",")]
    x, y = make_batch(sizes, args.batch, np.float32, args.device)
    params = sum(a * b + b for a, b in zip(sizes[:-1], sizes[1:]))
    largest_layer = 4 * max(a * b + b for a, b in zip(sizes[:-1], sizes[1:]))
    records = []
    for name in STRATEGIES:
        gc.collect()
        model = make_model(sizes, np.float32, args.device)
        strategy = build(name, model, comm, args.micro_batches)
        strategy.step(x, y, F.cross_entropy)  # warm-up: the optimizer creates its state
        comm.traffic.reset()
        gc.collect()
        with memory.track(measure=True, timeline=False, device=args.device) as t:
            strategy.step(x, y, F.cross_entropy)
        traffic = comm.traffic.snapshot()
        comm.barrier()
        # every rank runs the same number of steps, so the collectives stay paired
        seconds = best_time(lambda: strategy.step(x, y, F.cross_entropy), repeats=3, warmup=0)
        mine = {"strategy": name, "rank": comm.rank,
                "at_backward_end": strategy.state_at_backward_end,
                "max_by_bucket": t.max_by_bucket(), "peak": t.peak(),
                "measured_peak": t.measured_peak(), "peak_delta": t.peak_delta(),
                "optimizer_state_bytes": strategy.optimizer.state_bytes() if strategy.optimizer else 0,
                "traffic": traffic,
                "sent": sum(r["sent"] for r in traffic.values()),
                "received": sum(r["received"] for r in traffic.values()),
                "formula_sent": sum(r["formula"] for r in traffic.values()),
                "textbook_sent": textbook_sent(name, strategy, params, args.batch, 4, comm.size),
                "step_seconds": seconds, "largest_unit_bytes": largest_layer}
        records += comm.comm.gather(mine, root=0) or []
        strategy = model = None  # free both before the next strategy is built
    if comm.rank == 0:
        print("RESULT " + json.dumps({"world_size": comm.size, "sizes": sizes, "params": params,
                                      "batch": args.batch, "micro_batches": args.micro_batches,
                                      "algorithm": comm.algorithm, "records": records}), flush=True)


def task_collectives(args, comm):
    """Ring against MPI's built-in collectives, timed in turns at each ``--numels`` size."""
    numels = [int(s) for s in args.numels.split(",")]
    load_before = os.getloadavg()[0]  # how busy the machine was: timings on a shared one vary with it
    rows = time_collectives(comm, numels, args.repeats)
    if comm.rank == 0:
        print("RESULT " + json.dumps({"world_size": comm.size, "dtype": "float32", "repeats": args.repeats,
                                      "load_average": [load_before, os.getloadavg()[0]],
                                      "cpu_count": os.cpu_count(), "rows": rows}), flush=True)


def task_crash(args, comm):
    """Rank 1 fails while the others wait in an all-reduce: the job must stop, not hang.

    ``--how raise``: rank 1 raises (the excepthook aborts the job at once); ``exit``: rank 1
    calls ``sys.exit(3)`` (aborts at once too); ``kill``: rank 1 dies by SIGKILL (mpiexec sees
    it and stops the others); ``hang``: rank 1 never arrives (the others' watchdog aborts the
    job after ``--timeout`` seconds).
    """
    if comm.rank == 1:
        if args.how == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        if args.how == "hang":
            time.sleep(3600)
        if args.how == "exit":
            sys.exit(3)
        raise RuntimeError("deliberate failure on rank 1 (the crash test)")
    comm.all_reduce(np.ones(4))
    print("RESULT {}", flush=True)  # only reached if the failure went unnoticed


def parse_result(stdout):
    """The JSON that rank 0 printed on its ``RESULT`` line."""
    for line in stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    raise ValueError(f"no RESULT line in the output:\n{stdout[-2000:]}")


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m tinymem.distributed.worker")
    parser.add_argument("task", choices=["check", "measure", "collectives", "crash"])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--micro-batches", type=int, default=4)
    parser.add_argument("--sizes", default="64,256,256,256,256,10")
    parser.add_argument("--device", default="cpu", help="measure: cpu or cuda (one GPU per rank)")
    parser.add_argument("--transport", default="auto", help="auto (NCCL for CuPy) or mpi")
    parser.add_argument("--algorithm", default="mpi", help="measure: mpi (built-in collectives) or ring")
    parser.add_argument("--numels", default="1024,1048576", help="collectives: buffer sizes (elements)")
    parser.add_argument("--repeats", type=int, default=20, help="collectives: samples per algorithm")
    parser.add_argument("--timeout", type=float, default=None, help="watchdog seconds")
    parser.add_argument("--how", choices=["raise", "exit", "kill", "hang"], default="raise", help="crash: how rank 1 fails")
    args = parser.parse_args(argv)
    install_excepthook()
    backend.set_default_device(args.device)  # labels and anything else made without device= go there too
    comm = Communicator(timeout=args.timeout, transport=args.transport, algorithm=args.algorithm)
    if args.device == "cuda":
        comm.select_gpu()
    tasks = {"check": task_check, "measure": task_measure, "collectives": task_collectives,
             "crash": task_crash}
    tasks[args.task](args, comm)


if __name__ == "__main__":
    sys.exit(main())
