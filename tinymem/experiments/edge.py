"""Figures: int8 models deployed to ONNX Runtime, and CNN inference under a microcontroller budget.

- ``edge_onnx.png``: the digits MLP quantized after training (int8 weights per channel, int8
  activations calibrated by histogram) and exported to ONNX: file size and accuracy against the
  float32 export, agreement of ONNX Runtime's int8 codes with tinymem's, and ONNX Runtime
  latency int8 against float32 (one thread, in turns) on the digits MLP and on wider MLPs,
  where its integer kernels pay off.
- ``edge_memory_profile.png``: activation bytes layer by layer (input + output + workspace,
  from the ledger) for a small CNN and the U-Net encoder at 256 px, whole-layer against
  patch-based execution, with a 256 KB SRAM line.
- ``edge_patch_tradeoff.png``: for each patch stage length and tile grid, the peak against
  the recomputed halo work.
"""
import time

import numpy as np

from .. import data, models, nn, optim, random
from .. import functional as F
from ..autograd import Tensor, no_grad
from ..measure.claims import Claim
from ..measure.timing import interleaved_samples, one_blas_thread, spread
from ..techniques import quantization as Q
from . import refuse_device

NAME = "edge"
ORDER = 85
FIGURES = ["edge_onnx.png", "edge_memory_profile.png", "edge_patch_tradeoff.png"]

SIZES = [64, 256, 256, 10]
SRAM = 256 * 1024
MAX_RECOMPUTE = 0.5


def _train_digits(epochs):
    x_train, y_train, x_test, y_test = data.load_digits()
    random.manual_seed(0)
    model = models.MLP(SIZES)
    opt = optim.Adam(model.parameters(), lr=1e-3)
    for epoch in range(epochs):
        for xb, yb in data.DataLoader((x_train, y_train), batch_size=64, shuffle=True, seed=epoch):
            loss = F.cross_entropy(model(xb), yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
    return model, x_train, x_test, y_test


def run_onnx(quick):
    import onnxruntime as ort

    from ..edge import onnx_export as E
    from ..edge import runtime as R
    model, x_train, x_test, y_test = _train_digits(4 if quick else 20)
    with no_grad():
        fp32_logits = model(Tensor(x_test)).data
    fp32_proto = E.to_onnx(model)
    calibration = [x_train[i:i + 256] for i in range(0, 1024, 256)]
    qmodel = Q.quantize_model(model, calibration, Q.HistogramObserver, per_channel=True)
    int8_proto = E.to_onnx(qmodel, expose_codes=True)
    logits, codes = R.tinymem_codes(qmodel, x_test)
    _, saturated_codes = R.tinymem_codes(qmodel, x_test, int16_pairs=True)
    acc = lambda lg: float((np.asarray(lg).argmax(1) == y_test).mean())  # noqa: E731
    runs = {"fused int8 kernels": R.session(int8_proto),
            "reference kernels": R.session(int8_proto, level=ort.GraphOptimizationLevel.ORT_DISABLE_ALL)}
    agreement = {}
    for name, sess in runs.items():
        out = R.run(sess, x_test)
        agreement[name] = {"accuracy": acc(out["logits"]), **R.code_agreement(out, codes, saturated_codes),
                           "predictions_differ": int((out["logits"].argmax(1) != logits.argmax(1)).sum()),
                           "logits_max_diff": float(np.abs(out["logits"] - logits).max())}
    return {"accuracy": {"tinymem fp32": acc(fp32_logits), "ORT fp32": acc(R.run(R.session(fp32_proto), x_test)["logits"]),
                         "tinymem int8": acc(logits), "ORT int8": agreement["fused int8 kernels"]["accuracy"]},
            "file_bytes": {"fp32": E.file_bytes(fp32_proto), "int8": E.file_bytes(E.to_onnx(qmodel))},
            "agreement": agreement, "test_inputs": int(len(y_test)),
            "ort_ops": R.fused_op_types(int8_proto),
            "latency": run_latency(model, qmodel, x_test, quick)}


def _wide(width, rng):
    """An MLP of three width x width layers and its int8 twin (min-max calibrated on noise)."""
    random.manual_seed(1)
    fp32 = models.MLP([width, width, width, 10])
    int8 = models.MLP([width, width, width, 10])
    int8.load_state_dict(fp32.state_dict())
    batches = [rng.standard_normal((64, width)).astype(np.float32) for _ in range(2)]
    return fp32, Q.quantize_model(int8, batches, Q.MinMaxObserver, per_channel=True)


def run_latency(model, qmodel, x_test, quick):
    """ONNX Runtime time per batch, fp32 and int8, one thread, in turns (process CPU time)."""
    from ..edge import onnx_export as E
    from ..edge import runtime as R
    rng = np.random.default_rng(0)
    cases = [("digits MLP", model, qmodel, x_test[:1]), ("digits MLP", model, qmodel, x_test)]
    for width in ([512] if quick else [512, 1024, 2048]):
        fp32, int8 = _wide(width, rng)
        cases.append((f"MLP {width}x3", fp32, int8, rng.standard_normal((64, width)).astype(np.float32)))
    rows = []
    for name, fp32, int8, x in cases:
        sessions = {"fp32": R.session(E.to_onnx(fp32)), "int8": R.session(E.to_onnx(int8))}
        feed = {"input": x}
        samples = interleaved_samples({k: (lambda s=s: s.run(None, feed)) for k, s in sessions.items()},
                                      repeats=20 if quick else 100, clock=time.process_time)
        rows.append({"model": name, "batch": int(len(x)), **{k: spread(v) for k, v in samples.items()}})
    return rows


def small_cnn():
    """A small MCUNet-like CNN for 128 x 128 RGB inputs (random weights: memory does not depend
    on them): a stride-2 stem, then stages that halve the resolution as channels grow."""
    random.manual_seed(2)

    def block(c_in, c_out, stride):
        return [nn.Conv2d(c_in, c_out, 3, stride=stride, padding=1, bias=False), nn.BatchNorm2d(c_out), nn.ReLU()]

    return nn.Sequential(*block(3, 16, 2), *block(16, 16, 1), *block(16, 24, 2), *block(24, 24, 1),
                         *block(24, 40, 2), *block(40, 40, 1), *block(40, 80, 2), *block(80, 80, 1)).eval()


def run_memory(quick):
    from ..edge import chain, inference_peak, patch_inference, unet_encoder
    nets = {"small CNN": (chain(small_cnn()), (1, 3, 128, 128), [2, 4, 6] if quick else [2, 3, 4, 5, 6]),
            "U-Net encoder": (unet_encoder(models.UNet(1, 4, base=8, depth=4)), (1, 1, 256, 256),
                              [3, 6, 9] if quick else [3, 5, 6, 8, 9])}
    out = {}
    for name, (layers, shape, splits) in nets.items():
        x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
        with one_blas_thread():
            whole = inference_peak(layers, shape, x)
            configs = []
            for split in splits:
                for grid in ([2, 4] if quick else [2, 3, 4, 6, 8]):
                    p = patch_inference(layers, x, split, grid)
                    configs.append({"split": split, "grid": grid, "peak": p["peak"], "layers": p["layers"],
                                    "recompute": p["macs_patch"] / max(p["macs_whole"], 1) - 1,
                                    "equal": bool(np.array_equal(p["output"], whole["output"]))})
        # the lowest peak that recomputes at most half the stage's work again
        best = min((c for c in configs if c["recompute"] <= MAX_RECOMPUTE), key=lambda c: (c["peak"], c["recompute"]))
        out[name] = {"input_shape": list(shape), "whole": whole["layers"], "whole_peak": whole["peak"],
                     "configs": configs, "best": {k: best[k] for k in ("split", "grid")}}
    return out


def run(quick=False, device="cpu"):
    refuse_device(NAME, device)
    records = {"config": {"sizes": SIZES, "sram_bytes": SRAM, "max_recompute": MAX_RECOMPUTE}}
    try:
        import onnx  # noqa: F401
        import onnxruntime  # noqa: F401
    except ImportError:
        records["onnx"] = {"skipped": "onnx / onnxruntime missing: pip install -e '.[apps]'"}
    else:
        records["onnx"] = run_onnx(quick)
    records["memory"] = run_memory(quick)
    return records


def _best(r, name):
    m = r["memory"][name]
    best = next(c for c in m["configs"] if (c["split"], c["grid"]) == (m["best"]["split"], m["best"]["grid"]))
    return m["whole_peak"] / best["peak"]


CLAIMS = [
    Claim("file_size", "the int8 ONNX file is at most 0.3x the float32 one",
          lambda r: (r["onnx"]["file_bytes"]["int8"] / r["onnx"]["file_bytes"]["fp32"],
                     r["onnx"]["file_bytes"]["int8"] <= 0.3 * r["onnx"]["file_bytes"]["fp32"])),
    Claim("accuracy", "int8 in ONNX Runtime loses at most 1 point of digits test accuracy against float32",
          lambda r: (100 * (r["onnx"]["accuracy"]["tinymem fp32"] - r["onnx"]["accuracy"]["ORT int8"]),
                     r["onnx"]["accuracy"]["tinymem fp32"] - r["onnx"]["accuracy"]["ORT int8"] <= 0.01)),
    Claim("codes_one_step", "ONNX Runtime's reference kernels give tinymem's int8 codes or one step away",
          lambda r: (r["onnx"]["agreement"]["reference kernels"]["codes_max_diff"],
                     r["onnx"]["agreement"]["reference kernels"]["codes_max_diff"] <= 1)),
    Claim("codes_int16_pairs", "every fused-kernel code more than one step from tinymem's is within one step of "
          "tinymem's arithmetic with int16-saturated pair sums (x86 without VNNI); the value counts those that are not",
          lambda r: (sum(a["codes_beyond_one_step"] - a["beyond_explained_by_int16_pairs"]
                         for a in r["onnx"]["agreement"].values()),
                     all(a["codes_beyond_one_step"] == a["beyond_explained_by_int16_pairs"]
                         for a in r["onnx"]["agreement"].values()))),
    Claim("same_predictions", "ONNX Runtime's int8 model predicts what tinymem's does on every test input",
          lambda r: (sum(a["predictions_differ"] for a in r["onnx"]["agreement"].values()),
                     all(a["predictions_differ"] == 0 for a in r["onnx"]["agreement"].values())
                     and r["onnx"]["accuracy"]["ORT int8"] == r["onnx"]["accuracy"]["tinymem int8"])),
    Claim("patch_3x", "patch-based inference has a >= 3x lower peak than layer by layer on the U-Net encoder at 256 px",
          lambda r: (_best(r, "U-Net encoder"), _best(r, "U-Net encoder") >= 3)),
    Claim("patch_exact", "patch-based outputs equal whole-layer outputs exactly, in every configuration",
          lambda r: (sum(not c["equal"] for m in r["memory"].values() for c in m["configs"]),
                     all(c["equal"] for m in r["memory"].values() for c in m["configs"]))),
]


def plot(records, outdir):
    from . import edge_plots
    return [edge_plots.plot_onnx(records, outdir, FIGURES[0]), edge_plots.plot_profile(records, outdir, FIGURES[1]),
            edge_plots.plot_tradeoff(records, outdir, FIGURES[2])]
