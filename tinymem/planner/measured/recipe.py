"""A combination of techniques, and the training step it makes of a model.

A :class:`Combination` names one choice per knob:

    checkpoint   none | sqrt | block        (see :mod:`.workloads`)
    precision    fp32 | fp16 | bf16         (``precision.half``: half weights, grads and saved
                                             tensors, fp32 masters; fp16 adds a GradScaler)
    optimizer    SGD | SGD momentum | Adam | Adafactor | Adam8bit   (``optim.table.CONFIGS``)
    offload      none | activations | optimizer   (``save_on_host`` around forward+backward, or
                                             ``offload_optimizer(place="host")``)
    micro_batches k                          (k equal micro-batches, gradients accumulated)

Combinations that do not compose are not offered (:func:`supported` says why): half precision
with activation offload (both are ``saved_tensors_hooks``; the innermost wins, so the tensors
would be stored half *or* offloaded, not both) and half precision with optimizer offload (the
fp32 masters are the state ZeRO-Offload moves, and ``MasterOptimizer`` keeps them on the device).
"""
import contextlib
import gc
from collections import namedtuple

from ... import memory
from ...checks import is_int
from ...optim.table import CONFIGS
from ...techniques.offload import offload_optimizer, save_on_host
from ...techniques.microbatch import split_batch
from ...techniques.precision import GradScaler, get_format, half
from .workloads import set_half_format

PRECISIONS = ("fp32", "fp16", "bf16")
OPTIMIZERS = ("SGD", "SGD momentum", "Adam", "Adafactor", "Adam8bit")
OFFLOADS = ("none", "activations", "optimizer")
# PyTorch starts at 2**16; on these small models that overflows the first steps' fp16 gradients,
# and a skipped step has another memory profile than a taken one. 2**10 overflows none of them.
FP16_INIT_SCALE = 2.0 ** 10
LEARNING_RATES = {"SGD": 0.05, "SGD momentum": 0.02, "Adam": 2e-3, "Adafactor": 1e-2, "Adam8bit": 2e-3}

Combination = namedtuple("Combination", "checkpoint precision optimizer offload micro_batches")
Combination.__new__.__defaults__ = ("none", "fp32", "Adam", "none", 1)


def supported(combo):
    """``None`` when ``combo`` can be built, else the reason it is not offered (a value outside
    the knobs' choices included: an unknown precision used to train silently in bf16)."""
    for what, value, known in (("precision", combo.precision, PRECISIONS), ("optimizer", combo.optimizer, OPTIMIZERS),
                               ("offload", combo.offload, OFFLOADS)):
        if value not in known:
            return f"unknown {what} {value!r}; choose one of {', '.join(map(repr, known))}"
    k = combo.micro_batches
    if not is_int(k) or k < 1:
        return f"micro_batches must be a positive integer, got {k!r}"
    if combo.precision != "fp32" and combo.offload != "none":
        return (f"{combo.precision} with {combo.offload} offload: half storage and offload do not "
                "compose here (see tinymem.planner.recipe)")
    return None


def make_optimizer(label, params, lr=None):
    cls, options = CONFIGS[label]
    return cls(params, lr=LEARNING_RATES[label] if lr is None else lr, **options)


class TrainingStep:
    """The model, optimizer and loop of one combination: ``step(batch)`` -> loss (float).

    One step: zero_grad; for each of k micro-batches (sizes differ by at most one): forward
    (``memory.mark("forward")``), backward of the loss weighted by n_i / N (``"backward"``);
    then the optimizer (it marks ``"optimizer"``). With fp16 the loss is scaled and the step
    goes through a GradScaler.
    """

    def __init__(self, workload, combo, lr=None):
        reason = supported(combo)
        if reason:
            raise ValueError(reason)
        self.workload, self.combo = workload, combo
        self.root = workload.build(combo.checkpoint)
        self.optimizer = make_optimizer(combo.optimizer, self.root.parameters(), lr)
        self.net, self.scaler = self.root, None
        if combo.precision != "fp32":
            dtype = "float16" if combo.precision == "fp16" else "bfloat16"
            self.net, self.optimizer = half(self.root, self.optimizer, dtype)
            set_half_format(self.root, get_format(dtype))
            if combo.precision == "fp16":
                self.scaler = GradScaler(init_scale=FP16_INIT_SCALE)
        if combo.offload == "optimizer":
            self.optimizer = offload_optimizer(self.optimizer, "host")

    def _saving(self):
        # prefetch=0: no background thread, so the ledger's events come in a repeatable order.
        return save_on_host(prefetch=0) if self.combo.offload == "activations" else contextlib.nullcontext()

    def step(self, batch):
        self.optimizer.zero_grad()
        n = len(batch[0])
        total = 0.0
        with self._saving():
            for s in split_batch(n, micro_batches=min(self.combo.micro_batches, n)):
                memory.mark("forward")
                loss = self.workload.loss(self.net, tuple(part[s] for part in batch))
                total += loss.item() * (s.stop - s.start) / n
                scaled = loss if self.scaler is None else self.scaler.scale(loss)
                memory.mark("backward")
                (scaled * ((s.stop - s.start) / n)).backward()
                del loss, scaled
        if self.scaler is None:
            self.optimizer.step()
        else:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        return total

    def close(self):
        if hasattr(self.optimizer, "close"):
            self.optimizer.close()


def tracked_step(workload, combo, batch_size, saving=contextlib.nullcontext):
    """The tracker of one step of ``combo`` on a batch of ``batch_size``, after a warm-up step
    (so that the optimizer state exists), each inside ``saving()``: the model is built here
    (after the caller's seed and its reading of the ledger) and closed before returning."""
    step = TrainingStep(workload, combo)
    batch = workload.batch(batch_size)
    try:
        with saving():
            step.step(batch)
        step.optimizer.zero_grad()
        gc.collect()
        with memory.track(measure=False, timeline=False) as tracker:
            with saving():
                step.step(batch)
    finally:
        step.close()
    return tracker
