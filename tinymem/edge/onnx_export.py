"""Export a tinymem MLP, float or post-training-quantized, to ONNX with the ``onnx`` package alone.

An ONNX model is a graph of standard operators plus its weights (*initializers*) in one
protobuf file, which a runtime on a phone, a browser or a microcontroller toolchain executes.
The graph is built with ``onnx.helper`` (no PyTorch anywhere in the path):

- float32: ``MatMul(x, W^T) -> Add(b) -> Relu`` per layer; 4 bytes per weight in the file.
- int8 (QDQ format, what ONNX Runtime's quantization tools write), per ``QuantizedLinear``:

      x --QuantizeLinear(sx, zx)--> uint8 codes --DequantizeLinear--> x'
      W^T int8 initializer --DequantizeLinear(sw per output channel, axis=1)--> W'
      MatMul(x', W') -> Add(b) -> Relu

  1 byte per weight plus a float32 scale and an int8 zero point per output channel. The
  runtime recognises the Q/DQ pairs around a MatMul and runs an integer kernel
  (``MatMulIntegerToFloat``: uint8 x int8 products summed in int32, scaled once) instead of
  the float math the graph spells out; both give sx·sw·sum((qx - zx)·qw) + b.

Agreement with tinymem. ``QuantizeLinear`` computes round(x / s) + z; tinymem (as PyTorch)
computes round(x · (1/s)) + z. The two differ where x/s lands within one float32 rounding of a
.5 tie: the code then differs by exactly one step. Everything else is the same arithmetic.
Opset 13 (per-axis DequantizeLinear), IR version 8: old enough for most edge runtimes.
"""
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from .. import backend, nn
from ..measure.files import write_atomically
from ..techniques.quantization import QuantizedLinear

OPSET, IR_VERSION = 13, 8


def _layers(model):
    """(kind, module) for each layer of a Sequential of Linear / QuantizedLinear / ReLU."""
    layers = list(model) if isinstance(model, nn.Sequential) else None
    if layers is None:
        raise TypeError(f"export needs an nn.Sequential (an MLP), got {type(model).__name__}")
    out = []
    for m in layers:
        if isinstance(m, QuantizedLinear):
            if m.input_dtype not in ("quint8", "uint8") or tuple(m.input_qrange) != (0, 255):
                raise ValueError("ONNX QuantizeLinear saturates to 0..255 for uint8: calibrate with "
                                 f"the full quint8 range (got {m.input_dtype} {m.input_qrange})")
            out.append(("int8", m))
        elif isinstance(m, nn.Linear):
            out.append(("linear", m))
        elif isinstance(m, nn.ReLU):
            out.append(("relu", m))
        else:
            raise TypeError(f"cannot export {type(m).__name__}: the exporter knows Linear, "
                            "QuantizedLinear and ReLU")
    return out


def _array(a, dtype=None):
    a = np.asarray(backend.to_numpy(a))
    return a.astype(dtype) if dtype is not None else a


def to_onnx(model, expose_codes=False, name="tinymem_mlp"):
    """An ``onnx.ModelProto`` of ``model`` (input ``"input"`` (N, in) float32, output ``"logits"``).

    With ``expose_codes`` the uint8 codes of every quantized layer's input are extra outputs
    (``"codes_0"``, ...), to compare them with tinymem's.
    """
    nodes, inits, extra = [], [], []
    x, width = "input", None
    for i, (kind, m) in enumerate(_layers(model)):
        if kind == "relu":
            nodes.append(helper.make_node("Relu", [x], [f"relu_{i}"]))
            x = f"relu_{i}"
            continue
        w = _array(m.weight.data)
        width = width or w.shape[1]
        if kind == "linear":
            inits.append(numpy_helper.from_array(_array(w.T, np.float32), f"w_{i}"))
            weight = f"w_{i}"
        else:
            codes = f"codes_{len(extra)}"
            inits += [numpy_helper.from_array(np.array(m.input_scale, np.float32), f"sx_{i}"),
                      numpy_helper.from_array(np.array(m.input_zero_point, np.uint8), f"zx_{i}"),
                      numpy_helper.from_array(np.ascontiguousarray(w.T).astype(np.int8), f"wq_{i}"),
                      numpy_helper.from_array(_weight_scale(m), f"sw_{i}"),
                      numpy_helper.from_array(np.zeros(w.shape[0], np.int8), f"zw_{i}")]
            nodes += [helper.make_node("QuantizeLinear", [x, f"sx_{i}", f"zx_{i}"], [codes]),
                      helper.make_node("DequantizeLinear", [codes, f"sx_{i}", f"zx_{i}"], [f"xd_{i}"]),
                      helper.make_node("DequantizeLinear", [f"wq_{i}", f"sw_{i}", f"zw_{i}"], [f"wd_{i}"], axis=1)]
            extra.append(helper.make_tensor_value_info(codes, TensorProto.UINT8, ["N", w.shape[1]]))
            x, weight = f"xd_{i}", f"wd_{i}"
        nodes.append(helper.make_node("MatMul", [x, weight], [f"mm_{i}"]))
        x = f"mm_{i}"
        if m.bias is not None:
            inits.append(numpy_helper.from_array(_array(m.bias.data, np.float32), f"b_{i}"))
            nodes.append(helper.make_node("Add", [x, f"b_{i}"], [f"add_{i}"]))
            x = f"add_{i}"
    nodes.append(helper.make_node("Identity", [x], ["logits"]))
    outputs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", None])]
    graph = helper.make_graph(nodes, name, [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", width])],
                              outputs + (extra if expose_codes else []), inits)
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="tinymem")
    proto.ir_version = IR_VERSION
    onnx.checker.check_model(proto)
    return proto


def _weight_scale(m):
    scale = _array(m.weight_scale, np.float32).reshape(-1)
    return np.full(m.out_features, scale[0], np.float32) if scale.size == 1 else scale


def file_bytes(proto):
    """Size of the serialized model in bytes (what the ``.onnx`` file takes)."""
    return len(proto.SerializeToString())


def save(proto, path):
    """Write ``proto`` to ``path`` atomically (a temporary file renamed into place)."""
    write_atomically(path, lambda f: f.write(proto.SerializeToString()), suffix=".onnx")
    return path
