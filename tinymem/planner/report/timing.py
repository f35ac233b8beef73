"""A coarse time model of one training step, calibrated on this machine when the plan is made.

    t = k · (3 + r) · F(m) · h  +  T_opt  +  2 · A / bw_copy

F(m)   the plain fp32 forward at m samples, measured at B/4 and B samples and taken as affine in m
       (the intercept is the per-call overhead that micro-batching pays k times);
3      forward + backward, backward counted as two forwards (two matmuls per matmul);
r      the share of the forward that checkpointing runs again in backward (0 none; (n-1)/n per
       block for a chain of n blocks, every block for the U-Net; (s-1)·floor(n/s)/n for sqrt
       with s = ceil(sqrt(n)) segments, as ``checkpoint_sequential`` cuts);
h      measured: the half model's forward over the fp32 forward (on the CPU, the upcasts cost
       time: half precision saves memory, not time, here);
k, m   micro-batches and their size ceil(B / k);
T_opt  measured: one step of the optimizer (with fp32 masters, or offloaded) on the model's
       real parameters;
A      activation bytes the same combination keeps without offload; each crosses twice, at
       the measured ``memcpy`` bandwidth (``offload_bandwidth.measure_bandwidths``).

It ranks combinations; it does not promise seconds. ``--verify`` reports the measured step.
"""
import math

from ... import memory, random
from ...autograd import Tensor, no_grad
from ...measure.timing import best_time
from ...techniques.offload import measure_bandwidths, offload_optimizer
from ...techniques.precision import half
from ..measured.recipe import make_optimizer


def recompute_share(workload, schedule):
    """r: the share of the forward recomputed by ``schedule`` (see the module docstring)."""
    if schedule == "none":
        return 0.0
    if workload.name == "unet":
        return 1.0
    n = workload.n_blocks
    if schedule == "block":
        return (n - 1) / n
    s = max(1, math.ceil(math.sqrt(n)))
    return (s - 1) * (n // s) / n


class TimeModel:
    """Measurements behind :meth:`seconds` (all taken at construction, a second or so)."""

    def __init__(self, workload, batch_size, precisions, optimizers, offloads, repeats=3):
        self.workload = workload
        random.manual_seed(0)
        model = workload.build("none")
        # Measured near the sizes it predicts: extrapolating from tiny batches multiplies noise.
        small = max(2, batch_size // 4)
        large = max(small + 1, batch_size)
        self.sizes = (small, large)
        batches = {b: workload.batch(b) for b in self.sizes}

        def forward(net, b):
            with no_grad():
                workload.loss(net, batches[b])

        with memory.track(measure=False, timeline=False):
            self.forward = {b: best_time(lambda b=b: forward(model, b), repeats) for b in self.sizes}
            self.half_factor = {"fp32": 1.0}
            for precision in precisions:
                if precision != "fp32":
                    hmodel = half(workload.build("none"), dtype="float16" if precision == "fp16" else "bfloat16")
                    self.half_factor[precision] = best_time(lambda: forward(hmodel, large), repeats) / self.forward[large]
            self.optimizer = {}
            for label in optimizers:
                for variant in {"fp32", *[p for p in precisions if p != "fp32"],
                                *(["offload"] if "optimizer" in offloads else [])}:
                    self.optimizer[(label, variant)] = self._optimizer_step(label, variant, repeats)
        self.copy_bandwidth = (measure_bandwidths(chunk_bytes=1 << 20, total_bytes=4 << 20, repeats=2)["memcpy"]
                               if "activations" in offloads else None)

    def _optimizer_step(self, label, variant, repeats):
        model = self.workload.build("none")
        opt = make_optimizer(label, model.parameters())
        if variant in ("fp16", "bf16"):
            _, opt = half(model, opt, "float16" if variant == "fp16" else "bfloat16")
        elif variant == "offload":
            opt = offload_optimizer(opt, "host")
        params = model.parameters()
        grads = [p.data.copy() for p in params]  # values do not matter; dtype and shape do

        def step():
            for p, g in zip(params, grads):
                p.grad = Tensor.wrap(g.copy(), bucket="gradient")
            opt.step()

        seconds = best_time(step, repeats)
        if hasattr(opt, "close"):
            opt.close()
        return seconds

    def forward_seconds(self, m):
        (b1, t1), (b2, t2) = sorted(self.forward.items())
        return max(t1 + (t2 - t1) * (m - b1) / (b2 - b1), 0.0)

    def seconds(self, combo, batch_size, activation_bytes=0):
        """Predicted seconds of one step of ``combo`` at ``batch_size`` (see the module docstring)."""
        k = combo.micro_batches
        m = math.ceil(batch_size / k)
        r = recompute_share(self.workload, combo.checkpoint)
        compute = k * (3 + r) * self.forward_seconds(m) * self.half_factor[combo.precision]
        variant = "offload" if combo.offload == "optimizer" else combo.precision
        moved = 2 * activation_bytes / self.copy_bandwidth if combo.offload == "activations" else 0.0
        return compute + self.optimizer[(combo.optimizer, variant)] + moved
