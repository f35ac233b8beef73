"""Two training jobs on one simulated device: the job each process runs, and the scenarios.

Each job trains an MLP with SGD + momentum inside ``track(budget, shared=device)``, so the
processes share one budget through the table in shared memory. The scenarios:

    no limit    both start at once and take what they need: the second to reach its peak
                finds the first's bytes in the way and fails with an OutOfMemoryError
    fractions   each process is capped at half the device (``fraction=0.5``) and plans for it:
                it runs k micro-batches, the fewest whose peak fits its half
    queue       each job waits for ``device_queue``: one runs after the other, each alone
    devices     each job is launched with its own ``CUDA_VISIBLE_DEVICES`` and uses
                ``device_name()``: two devices, no contention

Memory per job: parameters, gradients and momentum (3 x the weights) plus one micro-batch's
activations. Time: measured per job from the wall clock, including any wait in the queue.
"""
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid

import numpy as np

from .. import memory, models, optim, random
from .. import functional as F
from ..autograd import Tensor
from ..techniques.microbatch import accumulate_gradients

SCENARIOS = ("no limit", "fractions", "queue", "devices")


def _model_and_batch(spec):
    """The job's MLP and one batch of synthetic data (a job starts in a fresh process: no data set
    to load, which would cost seconds of start-up)."""
    random.manual_seed(spec["seed"])
    model = models.MLP(spec["sizes"])
    x = Tensor(random.randn((spec["batch"], spec["sizes"][0]), "cpu"))
    y = np.arange(spec["batch"]) % spec["sizes"][-1]
    return model, (x, y)


def step_peak(spec, micro_batches):
    """``(peak, floor)``: the ledger's peak in a training step of the job and the bytes that
    stay between steps (weights, gradients, momentum, the batch), everything on the device."""
    model, (x, y) = _model_and_batch(spec)
    opt = optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    with memory.track(measure=False, timeline=False) as t:
        for _ in range(2):  # the second step has the momentum buffers from the first
            model.zero_grad()
            accumulate_gradients(lambda a, b: F.cross_entropy(model(a), b), (x, y), micro_batches)
            opt.step()
    return t.peak(), memory.live_bytes()


def _downsample(events, wall0, bin_s=0.01):
    """``[(wall time, device bytes)]``, the largest value in each ``bin_s`` bin."""
    bins = {}
    for e in events:
        if e[1] == "mark":
            continue
        key = int(e[0] / bin_s)
        bins[key] = max(bins.get(key, 0), sum(e[5]))
    return [(wall0 + k * bin_s, v) for k, v in sorted(bins.items())]


def _wait_for(path):
    while not os.path.exists(path):
        time.sleep(0.005)


def run_job(spec, folder):
    """One job (run in its own process): trains ``spec["steps"]`` steps and writes its result to
    ``folder/<label>.json``. Files in ``folder`` order the start: both jobs first get ready (an
    interpreter takes a second to start), then A trains, and B starts once A has finished its
    first step, so that B always meets A's weights, gradients and momentum on the device."""
    if spec.get("visible") is not None:  # what a launcher does: one device per job
        os.environ["CUDA_VISIBLE_DEVICES"] = spec["visible"]
    label, other = spec["label"], "B" if spec["label"] == "A" else "A"
    running_path = os.path.join(folder, f"{label}.running")
    device = spec["device"] or memory.device_name()
    model, (x, y) = _model_and_batch(spec)
    opt = optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    _touch(os.path.join(folder, f"{label}.ready"))
    _wait_for(os.path.join(folder, f"{other}.ready"))
    if label == "B":
        _wait_for(os.path.join(folder, "A.running"))
    result = {"label": spec["label"], "pid": os.getpid(), "device": device, "status": "done",
              "micro_batches": spec["micro_batches"], "steps": 0, "start": time.time(), "message": ""}
    queue = memory.device_queue(device) if spec["queue"] else contextlib.nullcontext()
    timeline = []
    try:
        with queue, memory.track(budget=spec["budget"], shared=device, fraction=spec["fraction"],
                                 measure=False) as t:
            result["run_start"] = time.time()
            wall0 = time.time() - (time.perf_counter() - t.t0)
            try:
                for _ in range(spec["steps"]):
                    model.zero_grad()
                    accumulate_gradients(lambda a, b: F.cross_entropy(model(a), b), (x, y),
                                         spec["micro_batches"])
                    opt.step()
                    result["steps"] += 1
                    _touch(running_path)
            finally:
                timeline = _downsample(t.events, wall0)
                result["peak"], result["end"] = t.peak(), time.time()  # before the queue lets go
    except memory.OutOfMemoryError as exc:
        result["status"], result["message"] = "oom", str(exc)
        result.setdefault("run_start", time.time())
    finally:
        _touch(running_path)  # never leave the other job waiting
    result.setdefault("end", time.time())
    result["timeline"] = timeline
    path = os.path.join(folder, f"{label}.json")
    with open(path + ".tmp", "w") as f:
        json.dump(result, f)
    os.replace(path + ".tmp", path)


def _touch(path):
    with open(path, "a"):
        pass


def run_scenario(scenario, spec, fits_half):
    """Both jobs of one scenario in two fresh interpreters (``python -m`` this module), B
    launched once A runs (with the queue: once A holds the device); returns their results, A
    first. Fresh interpreters, not forks: a fork would inherit this process's ledger."""
    if scenario not in SCENARIOS:
        raise ValueError(f"unknown scenario {scenario!r}; choose one of {', '.join(SCENARIOS)}")
    name = f"watching-{uuid.uuid4().hex[:10]}"
    # One BLAS thread per job: two jobs on two cores, not four threads fighting over them.
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    with tempfile.TemporaryDirectory(prefix="tinymem-jobs-") as folder:
        procs, paths = [], []
        for i, label in enumerate(("A", "B")):
            job = dict(spec, label=label, seed=i, device=name, queue=scenario == "queue",
                       fraction=0.5 if scenario == "fractions" else None,
                       micro_batches=fits_half if scenario == "fractions" else 1, visible=None)
            if scenario == "devices":
                job.update(device=None, visible=str(i))  # cuda0 and cuda1: two simulated devices
            procs.append(subprocess.Popen([sys.executable, "-m", __name__, json.dumps(job), folder], env=env))
            paths.append(os.path.join(folder, f"{label}.json"))
        try:
            for proc in procs:
                if proc.wait(timeout=600) != 0:
                    raise RuntimeError(f"a {scenario!r} job exited with {proc.returncode}; its error is above")
            results = []
            for path in paths:
                with open(path) as f:
                    results.append(json.load(f))
        finally:  # no lock file (nor, after a crash, table) left behind
            for proc in procs:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
            for path in _lock_files(name) + [f for i in range(2) for f in _lock_files(f"cuda{i}")]:
                with contextlib.suppress(OSError):
                    os.remove(path)
            with contextlib.suppress(OSError):
                os.remove(f"/dev/shm/tinymem_{name}")
    t0 = min(r["start"] for r in results)  # time from the first job's launch
    for r in results:
        for key in ("start", "run_start", "end"):
            r[key] -= t0
        r["timeline"] = [(t - t0, b) for t, b in r["timeline"]]
    return results


def _lock_files(name):
    folder = tempfile.gettempdir()
    return [os.path.join(folder, f"tinymem-{name}.{kind}") for kind in ("lock", "queue")]


if __name__ == "__main__":
    run_job(json.loads(sys.argv[1]), sys.argv[2])
