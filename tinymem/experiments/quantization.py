"""Figures: int8 post-training quantization and compressed saved activations on the digits MLP.

- ``quant_calibration.png``: test accuracy of the int8 model for each calibrator x per-tensor /
  per-channel weights, beside fp32; calibrated on clean data and on the same data with a few
  injected outliers (4 input values of ±1000 in 1,024 samples, a glitching sensor; the data's
  own largest value is about 38).
- ``quant_ranges.png``: the input histogram of the second Linear with each calibrator's range.
- ``quant_activation_bits.png``: training with saved activations at 32, 8, 4, 2 bits: saved
  bytes (ledger and allocator), final accuracy, step time and the error of the first gradient.
"""
import time
import tracemalloc

import numpy as np

from .. import backend, data, memory, models, optim, random
from .. import functional as F
from ..autograd import Tensor, no_grad
from ..measure.claims import IN_TURNS, Claim, slower_in_turns
from ..measure.timing import interleaved_samples, one_blas_thread, spread
from ..techniques import quantization as Q
from . import quantization_plots as figures

NAME = "quantization"
ORDER = 30
FIGURES = ["quant_calibration.png", "quant_ranges.png", "quant_activation_bits.png"]

SIZES = [64, 128, 128, 10]
OUTLIER = 1000.0
CALIBRATORS = {
    "min-max": Q.MinMaxObserver,
    "moving avg": Q.MovingAverageMinMaxObserver,
    "percentile 99.99": Q.PercentileObserver,
    "histogram (L2)": Q.HistogramObserver,
    "entropy (KL)": Q.EntropyObserver,
}


def _accuracy(model, x, y):
    with no_grad():
        return float((model(Tensor(x)).numpy().argmax(1) == y).mean())


def _train(sizes, x, y, epochs, batch, bits=32, seed=0):
    random.manual_seed(seed)
    model = models.MLP(sizes)
    opt = optim.Adam(model.parameters(), lr=1e-3)
    loader = data.DataLoader((x, y), batch_size=batch, shuffle=True, seed=seed)
    times = []
    for _ in range(epochs):
        for xb, yb in loader:
            start = time.perf_counter()
            loss = _loss(model, xb, yb, bits)
            opt.zero_grad()
            loss.backward()
            opt.step()
            times.append(time.perf_counter() - start)
    return model, float(np.median(times))


def _loss(model, x, y, bits):
    if bits == 32:
        return F.cross_entropy(model(x), y)
    with Q.compress_saved_activations(bits):
        return F.cross_entropy(model(x), y)


def _fresh(state, sizes=SIZES):
    model = models.MLP(sizes)
    model.load_state_dict(state)
    return model


def parameter_bytes(state):
    """Ledger ``parameter`` bytes of the fp32 model and of its int8 conversion (weights alone too)."""
    base = memory.live_bytes("parameter")
    model = _fresh(state)
    fp32 = memory.live_bytes("parameter") - base
    fp32_weights = sum(m.weight.nbytes for m in model if hasattr(m, "weight"))
    Q.quantize_model(model, [np.zeros((2, SIZES[0]), np.float32)], Q.MinMaxObserver)
    int8 = memory.live_bytes("parameter") - base
    int8_weights = sum(m.weight.nbytes for m in model if hasattr(m, "weight"))
    return {"fp32": fp32, "int8_model": int8, "fp32_weights": fp32_weights, "int8_weights": int8_weights}


def _calibration_sets(x_train):
    clean = [x_train[i:i + 256].copy() for i in range(0, 1024, 256)]
    rng = np.random.default_rng(0)
    noisy = [b.copy() for b in clean]
    for k in range(4):
        b = noisy[k]
        b[rng.integers(len(b)), rng.integers(b.shape[1])] = OUTLIER * (1 if k % 2 else -1)
    return {"clean": clean, "outliers": noisy}


def _layer_inputs(model, batches, layer=2):
    """The inputs of ``model[layer]`` over the calibration batches (a flat array)."""
    out = []
    with no_grad():
        for b in batches:
            out.append(model[:layer](Tensor(b)).numpy().ravel())
    return np.concatenate(out)


def _calls(fn, k):
    """``fn`` run ``k`` times in a row: one timing sample long enough to rise above the clock's
    and the scheduler's jitter (divided by ``k`` again in :func:`_per_call`)."""
    def repeated():
        for _ in range(k):
            fn()
    return repeated


def _per_call(samples, k):
    return {name: [t / k for t in ts] for name, ts in samples.items()}


def run_calibration(state, x_train, x_test, y_test):
    fp32 = _fresh(state)
    records = {"fp32_accuracy": _accuracy(fp32, x_test, y_test), "accuracy": {}, "calibrate_seconds": {},
               "ranges": {}}
    sets = _calibration_sets(x_train)
    for data_name, batches in sets.items():
        for cal, observer in CALIBRATORS.items():
            for per_channel in (False, True):
                start = time.perf_counter()
                model = Q.quantize_model(_fresh(state), batches, observer, per_channel)
                key = f"{data_name}|{cal}|{'per-channel' if per_channel else 'per-tensor'}"
                records["calibrate_seconds"][key] = time.perf_counter() - start
                records["accuracy"][key] = _accuracy(model, x_test, y_test)
        acts = _layer_inputs(fp32, batches)
        counts, edges = np.histogram(acts, bins=120)
        ranges = {}
        for cal, observer in CALIBRATORS.items():
            obs = observer()
            for b in batches:
                with no_grad():
                    obs(fp32[:2](Tensor(b)))
            ranges[cal] = [float(v) for v in obs.observed_range()]
        records["ranges"][data_name] = {"counts": counts.tolist(), "edges": edges.tolist(), "calibrators": ranges}
    int8 = Q.quantize_model(_fresh(state), sets["clean"], Q.HistogramObserver, per_channel=True)
    x = Tensor(x_test)
    with no_grad(), one_blas_thread():
        samples = _per_call(interleaved_samples({"fp32": _calls(lambda: fp32(x), 100),
                                                 "int8": _calls(lambda: int8(x), 100)},
                                                repeats=21, clock=time.process_time), 100)
    records["inference_samples"] = samples
    records["inference_seconds"] = {k: spread(v)["median"] for k, v in samples.items()}
    return records


def run_bits(x_train, y_train, x_test, y_test, epochs, batch, device):
    sizes = [64, 256, 256, 10]
    random.manual_seed(1)
    state = models.MLP(sizes).state_dict()
    # Copies: a slice is a view, and the ledger (rightly) counts a saved view's whole base array.
    xb, yb = Tensor(x_train[:batch].copy()), Tensor(y_train[:batch].copy())
    rows, ref = [], None
    for bits in (32, 8, 4, 2):
        model = _fresh(state, sizes)
        random.manual_seed(2)
        with memory.track(device=device) as t:
            entry = tracemalloc.get_traced_memory()[0]
            loss = _loss(model, xb, yb, bits)
            saved = memory.live_bytes("activation")
            measured_after_forward = tracemalloc.get_traced_memory()[0] - entry
            loss.backward()
        g = np.concatenate([p.grad.numpy().ravel() for p in model.parameters()])
        ref = g if ref is None else ref
        trained, _ = _train(sizes, x_train, y_train, epochs, batch, bits)
        rows.append({"bits": bits, "saved_bytes": int(saved), "measured_after_forward": measured_after_forward,
                     "measured_peak": t.measured_peak(), "ledger_peak_delta": t.peak_delta(),
                     "accuracy": _accuracy(trained, x_test, y_test),
                     "grad_rel_error": float(np.linalg.norm(g - ref) / np.linalg.norm(ref)),
                     "grad_cosine": float(g @ ref / (np.linalg.norm(g) * np.linalg.norm(ref)))})
    model = _fresh(state, sizes)

    def step(bits):
        model.zero_grad()
        _loss(model, xb, yb, bits).backward()

    # one saved array of the step, packed and unpacked alone: where the compressed step's time goes
    array = backend.to_device(np.maximum(np.random.default_rng(0).standard_normal((batch, sizes[1])), 0)
                              .astype(np.float32), device)
    codecs = {bits: (lambda b=bits: Q.decompress(Q.compress(array, b, stochastic=b < 8))) for bits in (8, 4, 2)}
    with one_blas_thread():
        samples = _per_call(interleaved_samples({r["bits"]: _calls(lambda b=r["bits"]: step(b), 5) for r in rows},
                                                repeats=21, clock=time.process_time), 5)
        codec = _per_call(interleaved_samples({b: _calls(f, 5) for b, f in codecs.items()}, repeats=21,
                                              clock=time.process_time), 5)
    for r in rows:
        r["saved_ratio"] = r["saved_bytes"] / rows[0]["saved_bytes"]
        r["step_samples"] = samples[r["bits"]]
        r["step_seconds"] = spread(samples[r["bits"]])["median"]
        r["step_time_ratio"] = r["step_seconds"] / spread(samples[32])["median"]
        r["codec_seconds"] = spread(codec[r["bits"]])["median"] if r["bits"] in codec else 0.0
    return {"sizes": sizes, "batch": batch, "epochs": epochs, "rows": rows,
            "codec_array": list(array.shape)}


def run(quick=False, device="cpu"):
    x_train, y_train, x_test, y_test = data.load_digits()
    epochs = 6 if quick else 20
    model, step = _train(SIZES, x_train, y_train, epochs, 64)
    records = {"config": {"sizes": SIZES, "epochs": epochs, "batch": 64, "calibration": "4 batches of 256",
                          "outliers": f"4 input values of +-{OUTLIER:g}"}}
    records["calibration"] = run_calibration(model.state_dict(), x_train, x_test, y_test)
    records["parameter_bytes"] = parameter_bytes(model.state_dict())
    records["bits"] = run_bits(x_train, y_train, x_test, y_test, 4 if quick else 15, 128, device)
    return records


def _acc(r, key):
    return 100 * r["calibration"]["accuracy"][key]


def _within(r, keys, points):
    """The largest distance (percentage points) of ``keys``' accuracy from fp32's, and <= points."""
    worst = max(abs(_acc(r, k) - 100 * r["calibration"]["fp32_accuracy"]) for k in keys)
    return worst, worst <= points


def _row(r, bits):
    return next(x for x in r["bits"]["rows"] if x["bits"] == bits)


def _formula_ratio(bits, group_size=256):
    """Saved bytes per float32 byte by formula: bits/8 of codes + 12/group_size of (min, start, step)."""
    return (bits / 8 + 12 / group_size) / 4


def _inference_slower(r):
    t = r["calibration"]["inference_samples"]
    return slower_in_turns(t["int8"], t["fp32"])


KINDS = ("per-tensor", "per-channel")
CLAIMS = [
    Claim("int8_weights_quarter", "int8 weights take 1/4 of the float32 weights' bytes (ledger)",
          lambda r: (lambda v: (v, v == 4))(r["parameter_bytes"]["fp32_weights"] / r["parameter_bytes"]["int8_weights"])),
    Claim("clean_calibration", "calibrated on clean data, every calibrator is within 1 point of fp32's accuracy",
          lambda r: _within(r, [f"clean|{c}|{k}" for c in CALIBRATORS for k in KINDS], 1.0)),
    Claim("minmax_breaks", "4 outliers in the calibration data break min-max: accuracy below 50%",
          lambda r: (lambda v: (v, v < 50))(max(_acc(r, f"outliers|min-max|{k}") for k in KINDS))),
    Claim("robust_calibrators", "with the outliers, percentile and entropy stay within 2 points of fp32",
          lambda r: _within(r, [f"outliers|{c}|{k}" for c in ("percentile 99.99", "entropy (KL)") for k in KINDS], 2.0)),
    Claim("int8_inference_slower", f"int8 inference is slower than fp32 here (NumPy has no int8 kernels), {IN_TURNS}",
          _inference_slower, modes=("full",)),
    Claim("saved_bytes_formula", "saved activations at 8, 4, 2 bits are within 5% of bits/8 + 12/256 bytes per float (targets stay uncompressed)",
          lambda r: (lambda v: (v, v <= 0.05))(max(abs(_row(r, b)["saved_ratio"] / _formula_ratio(b) - 1) for b in (8, 4, 2)))),
    Claim("gradient_error_grows", "the first step's gradient error grows as the bits shrink (8 < 4 < 2)",
          lambda r: (_row(r, 2)["grad_rel_error"], _row(r, 8)["grad_rel_error"] < _row(r, 4)["grad_rel_error"]
                     < _row(r, 2)["grad_rel_error"])),
    Claim("bits_keep_accuracy", "training with 8-, 4- or 2-bit saved activations ends within 1 point of fp32's accuracy",
          lambda r: (lambda v: (v, v <= 1.0))(max(abs(100 * (_row(r, b)["accuracy"] - _row(r, 32)["accuracy"]))
                                                  for b in (8, 4, 2))), modes=("full",)),
    Claim("compression_costs_time", f"an 8-bit compressed step is slower than the fp32 step, {IN_TURNS}",
          lambda r: slower_in_turns(_row(r, 8)["step_samples"], _row(r, 32)["step_samples"]), modes=("full",)),
]


def plot(records, outdir):
    return figures.plot(records, outdir, FIGURES, CALIBRATORS, OUTLIER)
