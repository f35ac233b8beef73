"""Running an exported model in ONNX Runtime, and tinymem's int8 codes to hold against it.

ONNX Runtime is the runtime edge deployments use (mobile, browser, embedded Linux); unlike
NumPy it has integer GEMM kernels, so it is where int8 can be faster than float32, not only
smaller. Sessions here run on ``threads`` intra-op threads (1 by default: an edge CPU core, and
steady timings on a shared machine) with all graph optimizations on, which is what fuses the
QuantizeLinear/DequantizeLinear pairs into integer kernels.
"""
import os
import tempfile

import numpy as np
import onnx
import onnxruntime as ort

from .. import backend, nn
from ..autograd import Tensor, no_grad
from ..techniques.quantization import QuantizedLinear, quantize


def session(proto, threads=1, level=ort.GraphOptimizationLevel.ORT_ENABLE_ALL, optimized_path=None):
    """An ``onnxruntime.InferenceSession`` for ``proto`` on the CPU.

    ``level=ORT_DISABLE_ALL`` runs the graph as written (reference kernels: the int8 math done
    in float, as the QDQ operators define it); the default fuses Q/DQ pairs into integer
    kernels. ``optimized_path`` writes the graph actually run there."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = threads
    options.graph_optimization_level = level
    options.log_severity_level = 3  # the warning about saving a hardware-specific graph is expected
    if optimized_path:
        options.optimized_model_filepath = optimized_path
    return ort.InferenceSession(proto.SerializeToString(), options, providers=["CPUExecutionProvider"])


def run(sess, x):
    """All outputs of ``sess`` on float32 input ``x``, as a dict by output name."""
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(names, {"input": np.asarray(x, np.float32)})))


def int16_pair_matmul(codes, weight):
    """``codes @ weight.T`` as an x86 int8 kernel without VNNI computes it: uint8 x int8 products
    are added in adjacent pairs along the inner dimension and each pair sum saturates to int16
    (the ``VPMADDUBSW`` instruction) before the int32 accumulation.

    A pair can reach 2 x 255 x 127 = 64,770, past int16's 32,767, so large codes against large
    weights of the same sign lose the excess. ONNX Runtime's documentation names this as the
    reason for ``reduce_range`` (7-bit weights) on such CPUs. ``codes`` (N, K) uint8, ``weight``
    (M, K) int8; returns (N, M) int64. Workspace: the (N, M, K) products, for checking only.
    """
    q, w = np.asarray(codes, np.int64), np.asarray(weight, np.int64)
    if q.shape[1] % 2:
        q, w = np.pad(q, ((0, 0), (0, 1))), np.pad(w, ((0, 0), (0, 1)))
    products = q[:, None, :] * w[None, :, :]
    pairs = products[:, :, 0::2] + products[:, :, 1::2]
    return np.clip(pairs, -32768, 32767).sum(axis=2)


def _pair_saturated_layer(m, h, q):
    """A QuantizedLinear's float output with its int sum from :func:`int16_pair_matmul`."""
    weight = backend.to_numpy(m.weight.data)
    acc = int16_pair_matmul(q, weight) - int(m.input_zero_point) * weight.astype(np.int64).sum(axis=1)
    y = acc.astype(np.float32) * (np.float32(m.input_scale) * backend.to_numpy(m.weight_scale).astype(np.float32))
    if m.bias is not None:
        y = y + backend.to_numpy(m.bias.data)
    return Tensor(y.astype(np.float32))


def tinymem_codes(model, x, int16_pairs=False):
    """tinymem's logits and the uint8 codes each QuantizedLinear made of its input, in order.

    With ``int16_pairs`` each QuantizedLinear sums its products as :func:`int16_pair_matmul`
    does (saturating pair sums, as ONNX Runtime's fused kernels do on x86 CPUs without VNNI)
    instead of exactly; everything else is tinymem's arithmetic.
    """
    codes, data = [], backend.to_numpy(x if not isinstance(x, Tensor) else x.data)
    with no_grad():
        h = Tensor(np.asarray(data, np.float32))
        for m in model if isinstance(model, nn.Sequential) else [model]:
            if isinstance(m, QuantizedLinear):
                q = backend.to_numpy(quantize(h.data, m.input_scale, m.input_zero_point, m.input_dtype,
                                              *m.input_qrange))
                codes.append(q)
                if int16_pairs and q.dtype == np.uint8:
                    h = _pair_saturated_layer(m, h, q)
                    continue
            h = m(h)
    return backend.to_numpy(h.data), codes


def code_agreement(out, codes, saturated_codes):
    """How ONNX Runtime's codes (``out["codes_i"]``) stand against tinymem's exact ``codes`` and
    against ``saturated_codes`` (tinymem's arithmetic with int16 pair sums): the count of codes,
    those one step off, the largest gap, and how many codes lie more than one step from the exact
    ones and how many of those are within one step of the saturating arithmetic."""
    exact = [np.abs(out[f"codes_{i}"].astype(int) - c.astype(int)) for i, c in enumerate(codes)]
    paired = [np.abs(out[f"codes_{i}"].astype(int) - c.astype(int)) for i, c in enumerate(saturated_codes)]
    beyond = [d > 1 for d in exact]
    return {"codes": int(sum(d.size for d in exact)),
            "codes_off_by_one": int(sum((d == 1).sum() for d in exact)),
            "codes_max_diff": int(max(d.max() for d in exact)),
            "codes_beyond_one_step": int(sum(b.sum() for b in beyond)),
            "beyond_explained_by_int16_pairs": int(sum((b & (p <= 1)).sum() for b, p in zip(beyond, paired)))}


def fused_op_types(proto):
    """The operator types ONNX Runtime runs for ``proto`` after its graph optimizations."""
    with tempfile.TemporaryDirectory(prefix="tinymem-ort-") as folder:
        path = os.path.join(folder, "optimized.onnx")
        session(proto, optimized_path=path)
        return sorted({node.op_type for node in onnx.load(path).graph.node})
