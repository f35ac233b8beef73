"""Our observers beside torch.ao.quantization's: the same data, qparams agreement and time.

For each observer PyTorch also has, both observe the same 8 batches of Laplace-distributed data
(heavy tails, so the histogram search has something to clip) and compute their qparams; the
table gives both scales, whether scale and zero_point agree exactly, and the time of
observe + calculate_qparams for each (best of a few runs, measured in turns, PyTorch on one thread like NumPy here).
"""
import warnings

import numpy as np

from ..measure.timing import interleaved_times

NAME = "quantization"
DESCRIPTION = "observers vs torch.ao.quantization: scale/zero_point agreement and time"

PAIRS = [("MinMaxObserver", {}), ("MovingAverageMinMaxObserver", {}),
         ("PerChannelMinMaxObserver", {"ch_axis": 0}), ("HistogramObserver", {})]


def run(quick=False):
    from ..techniques import quantization as Q
    try:
        import torch
        from torch.ao.quantization import observer as O
    except ImportError:
        return [{"observer": "(PyTorch is not installed: nothing to compare with)"}]
    rng = np.random.default_rng(0)
    shape = (64, 256) if quick else (256, 1024)
    batches = [rng.laplace(size=shape).astype(np.float32) * (1 + 0.1 * i) for i in range(8)]
    tbatches = [torch.from_numpy(b) for b in batches]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the observers are single-threaded NumPy; compare like with like
    try:
        return _compare(Q, torch, O, batches, tbatches, quick)
    finally:
        torch.set_num_threads(threads)


def _compare(Q, torch, O, batches, tbatches, quick):
    rows = []
    for name, kw in PAIRS:
        for dtype, qscheme in (("quint8", "affine"), ("qint8", "symmetric")):
            scheme = ("per_channel_" if "PerChannel" in name else "per_tensor_") + qscheme

            def ours():
                obs = getattr(Q, name)(dtype=dtype, qscheme=scheme, **kw)
                for b in batches:
                    obs(b)
                return obs.calculate_qparams()

            def theirs():
                obs = getattr(O, name)(dtype=getattr(torch, dtype), qscheme=getattr(torch, scheme), **kw)
                for b in tbatches:
                    obs(b)
                return obs.calculate_qparams()

            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                s, z = ours()
                ts, tz = (t.numpy() for t in theirs())
                times = interleaved_times({"ours": ours, "torch": theirs}, repeats=2 if quick else 3)
            rows.append({"observer": name, "dtype": dtype, "qscheme": scheme,
                         "scale (ours)": f"{float(s.mean()):.6g}", "scale (torch)": f"{float(ts.mean()):.6g}",
                         "identical": bool(np.array_equal(s, ts) and np.array_equal(z, tz)),
                         "max rel diff": float(np.max(np.abs(s / ts - 1))),
                         "ms (ours)": round(1e3 * times["ours"], 2), "ms (torch)": round(1e3 * times["torch"], 2)})
    return rows
