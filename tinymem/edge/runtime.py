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


def tinymem_codes(model, x):
    """tinymem's logits and the uint8 codes each QuantizedLinear made of its input, in order."""
    codes, data = [], backend.to_numpy(x if not isinstance(x, Tensor) else x.data)
    with no_grad():
        h = Tensor(np.asarray(data, np.float32))
        for m in model if isinstance(model, nn.Sequential) else [model]:
            if isinstance(m, QuantizedLinear):
                codes.append(backend.to_numpy(quantize(h.data, m.input_scale, m.input_zero_point, m.input_dtype,
                                                       *m.input_qrange)))
            h = m(h)
    return backend.to_numpy(h.data), codes


def fused_op_types(proto):
    """The operator types ONNX Runtime runs for ``proto`` after its graph optimizations."""
    with tempfile.TemporaryDirectory(prefix="tinymem-ort-") as folder:
        path = os.path.join(folder, "optimized.onnx")
        session(proto, optimized_path=path)
        return sorted({node.op_type for node in onnx.load(path).graph.node})
