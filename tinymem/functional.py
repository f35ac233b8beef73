"""Differentiable ops, imported as ``tinymem.functional as F`` (PyTorch's names and arguments).

The ops themselves live in ``tinymem/ops/`` (one file per family); this module is the public
face: it accepts Tensors, numbers and arrays, and calls ``Function.apply``. Each op's memory
cost is stated in the docstring of its Function.
"""
import numbers
import operator

from . import backend
from .autograd import Tensor
from .checks import axis_index, dropout_probability, true_or_false
from .ops import batchnorm as BN
from .ops import conv as C
from .ops import elementwise as E
from .ops import layers as NL
from .ops import losses as LS
from .ops import pool as P
from .ops import reduction as R
from .ops import shape as S
from .ops.attention import chunked_attention, scaled_dot_product_attention  # noqa: F401
from .ops.embedding_bag import embedding_bag  # noqa: F401


def _as_tensor(x, like=None):
    """Arrays become constant Tensors; numbers stay numbers (NumPy keeps the tensor's dtype).
    An array given beside a Tensor ``like`` (targets beside logits, indices beside a table) is
    made on that tensor's device, so the op's inputs meet; with none, on the default device. A
    device array stays where it is: copying it to the host silently would hide the mix."""
    if isinstance(x, Tensor) or isinstance(x, (int, float, bool)):
        return x
    on_host = not hasattr(x, "__cuda_array_interface__")
    return Tensor(x, device=like.device if on_host and isinstance(like, Tensor) else None)


def _binary(fn, name):
    """The function ``name(a, b)`` that applies ``fn`` to Tensors, numbers or arrays, and names
    both shapes when they do not broadcast.

    Every Tensor operator (``a * b``) is one of these functions, so the common case, a Tensor
    operand, is tested here rather than in a call to ``_as_tensor``: the Python overhead of an
    op on tiny arrays is a handful of calls, and each one counts."""
    apply = fn.apply  # bound once: a classmethod looked up on its class is rebound per call

    def op(a, b):
        try:
            return apply(a if isinstance(a, Tensor) else _as_tensor(a, like=b),
                            b if isinstance(b, Tensor) else _as_tensor(b, like=a))
        except ValueError as exc:
            if "broadcast" not in str(exc):
                raise
            shape = lambda v: tuple(getattr(v, "shape", ()))  # noqa: E731
            raise ValueError(f"{name}: shapes {shape(a)} and {shape(b)} do not broadcast together") from None
    op.__name__ = op.__qualname__ = name
    return op


# -- arithmetic ------------------------------------------------------------------------------
add = _binary(E.Add, "add")
sub = _binary(E.Sub, "sub")
mul = _binary(E.Mul, "mul")
div = _binary(E.Div, "div")
pow = _binary(E.Pow, "pow")


def neg(a):
    return E.Neg.apply(a)


def matmul(a, b):
    if a.ndim == 0 or b.ndim == 0:
        raise ValueError("matmul needs tensors of at least one dimension; use * for scalars")
    ka = a.shape[-1]
    kb = b.shape[0] if b.ndim == 1 else b.shape[-2]
    if ka != kb:
        raise ValueError(f"matmul: shapes {tuple(a.shape)} and {tuple(b.shape)} do not fit "
                         f"({ka} != {kb})")
    return R.MatMul.apply(_as_tensor(a, like=b), _as_tensor(b, like=a))


# -- elementwise functions -------------------------------------------------------------------
def exp(x):
    return E.Exp.apply(x)


def log(x):
    return E.Log.apply(x)


def sqrt(x):
    return E.Sqrt.apply(x)


def abs(x):
    return E.Abs.apply(x)


def clamp(x, min=None, max=None):
    return E.Clamp.apply(x, min, max)


def tanh(x):
    return E.Tanh.apply(x)


def sigmoid(x):
    return E.Sigmoid.apply(x)


def relu(x):
    return E.ReLU.apply(x)


def gelu(x, approximate="tanh"):
    """GELU with the tanh approximation (PyTorch's ``approximate='tanh'``)."""
    check_gelu(approximate)
    return E.GELU.apply(x)


def check_gelu(approximate):
    if approximate != "tanh":
        raise ValueError(f"tinymem implements gelu(approximate='tanh') only (NumPy has no erf), "
                         f"got approximate={approximate!r}")


def where(condition, a, b):
    cond = condition.data if isinstance(condition, Tensor) else condition
    like = a if isinstance(a, Tensor) else b
    device = like.device if isinstance(like, Tensor) else backend.default_device()
    if hasattr(cond, "shape") and backend.device_of(cond) == "cpu":  # a NumPy mask goes to the values' device
        cond = backend.to_device(cond, device)
    return E.Where.apply(cond, _as_tensor(a, like=like), _as_tensor(b, like=like))


# -- reductions ------------------------------------------------------------------------------
def sum(x, axis=None, keepdims=False):
    return R.Sum.apply(x, axis=axis, keepdims=keepdims)


def mean(x, axis=None, keepdims=False):
    return R.Mean.apply(x, axis=axis, keepdims=keepdims)


def max(x, axis=None, keepdims=False):
    return R.Max.apply(x, axis=axis, keepdims=keepdims)


# -- shapes ----------------------------------------------------------------------------------
def reshape(x, *shape):
    shape = shape[0] if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape
    return S.Reshape.apply(x, tuple(shape))


def permute(x, *dims):
    dims = dims[0] if len(dims) == 1 and isinstance(dims[0], (tuple, list)) else dims
    return S.Permute.apply(x, tuple(dims))


def transpose(x, dim0=-2, dim1=-1):
    """Swap two dimensions (PyTorch's ``torch.transpose``)."""
    dims = list(range(x.ndim))
    i, j = axis_index("transpose", dim0, x.ndim), axis_index("transpose", dim1, x.ndim)
    dims[i], dims[j] = j, i
    return S.Permute.apply(x, tuple(dims))


def getitem(x, index):
    return S.GetItem.apply(x, S.unwrap_index(index))


def _sequence_of_tensors(op, tensors):
    """The tensors of a list or tuple; one Tensor (read as its rows by NumPy) or none is refused."""
    if hasattr(tensors, "shape") or not hasattr(tensors, "__iter__"):
        raise TypeError(f"{op} takes a list or tuple of tensors, got a {type(tensors).__name__}")
    tensors = [_as_tensor(t) for t in tensors]
    if not tensors:
        raise ValueError(f"{op} needs at least one tensor, got none")
    return tensors


def concatenate(tensors, axis=0):
    return S.Concatenate.apply(*_sequence_of_tensors("concatenate", tensors), axis=axis)


cat = concatenate


def stack(tensors, axis=0):
    return S.Stack.apply(*_sequence_of_tensors("stack", tensors), axis=axis)


# -- neural-network ops ----------------------------------------------------------------------
def linear(x, weight, bias=None):
    """x @ weight.T + bias, weight of shape (out_features, in_features)."""
    return NL.Linear.apply(x, weight, bias) if bias is not None else NL.Linear.apply(x, weight)


def softmax(x, axis=-1):
    return LS.Softmax.apply(x, axis=axis)


def log_softmax(x, axis=-1):
    return LS.LogSoftmax.apply(x, axis=axis)


def cross_entropy(logits, target, reduction="mean"):
    """Mean (or sum, or per-row) cross-entropy of logits (N, C) against class indices (N,)."""
    return LS.CrossEntropy.apply(logits, _as_tensor(target, like=logits), reduction=reduction)


def mse_loss(input, target, reduction="mean"):
    return LS.MSELoss.apply(input, _as_tensor(target, like=input), reduction=reduction)


def huber_loss(input, target, reduction="mean", delta=1.0):
    """Quadratic for |input - target| <= delta, linear beyond (``torch.nn.functional.huber_loss``)."""
    return LS.HuberLoss.apply(input, _as_tensor(target, like=input), reduction=reduction, delta=delta)


def smooth_l1_loss(input, target, reduction="mean", beta=1.0):
    """``huber_loss / beta`` (PyTorch's ``smooth_l1_loss``): the loss DQN implementations use."""
    return huber_loss(input, target, reduction, beta) / beta


def layer_norm(x, normalized_shape, weight=None, bias=None, eps=1e-5):
    ndim = 1 if isinstance(normalized_shape, int) else len(normalized_shape)
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    if tuple(x.shape[-ndim:]) != shape:
        raise ValueError(f"layer_norm: input of shape {x.shape} does not end in {shape}")
    for name, t in (("weight", weight), ("bias", bias)):
        if t is not None and tuple(t.shape) != shape:  # else NumPy's broadcast error, or a silent broadcast
            raise ValueError(f"layer_norm: {name} of shape {tuple(t.shape)} for normalized_shape {shape}; "
                             f"it must have shape {shape}")
    return NL.LayerNorm.apply(x, weight, bias, normalized_ndim=ndim, eps=eps)


# -- vision (costs stated on the Functions in ops/conv.py, pool.py and batchnorm.py) -----------
def conv2d(input, weight, bias=None, stride=1, padding=0):
    """2-D convolution (cross-correlation) of (B, C, H, W) with weight (O, C, kh, kw), by im2col."""
    args = (input, weight) if bias is None else (input, weight, bias)
    return C.Conv2d.apply(*args, stride=C.pair(stride, "stride"), padding=C.pair(padding, "padding"))


def max_pool2d(input, kernel_size, stride=None, padding=0):
    """Window maximum; ``stride`` defaults to ``kernel_size`` as in PyTorch."""
    kernel = C.pair(kernel_size, "kernel_size")
    stride = kernel if stride is None else C.pair(stride, "stride")
    return P.MaxPool2d.apply(input, kernel=kernel, stride=stride, padding=C.pair(padding, "padding"))


def avg_pool2d(input, kernel_size, stride=None, padding=0):
    """Window mean (zero padding counted); ``stride`` defaults to ``kernel_size``."""
    kernel = C.pair(kernel_size, "kernel_size")
    stride = kernel if stride is None else C.pair(stride, "stride")
    return P.AvgPool2d.apply(input, kernel=kernel, stride=stride, padding=C.pair(padding, "padding"))


def check_interpolate(scale_factor, mode, op="interpolate"):
    """The integer factor, once ``scale_factor`` and ``mode`` are known to be implemented."""
    if mode != "nearest":
        raise ValueError(f"{op}: tinymem implements mode='nearest' only, got {mode!r}")
    if not isinstance(scale_factor, numbers.Real) or int(scale_factor) != scale_factor or scale_factor < 1:
        raise ValueError(f"{op}: scale_factor must be a positive integer, got {scale_factor!r}")
    return int(scale_factor)


def interpolate(input, scale_factor=2, mode="nearest"):
    """Upsample (B, C, H, W) by an integer factor; only ``mode="nearest"`` is implemented."""
    return P.UpsampleNearest2d.apply(input, scale=check_interpolate(scale_factor, mode))


def batch_norm(input, running_mean=None, running_var=None, weight=None, bias=None,
               training=False, momentum=0.1, eps=1e-5):
    """Batch normalisation of (B, C, H, W); updates the running arrays in place when training
    (except during checkpoint recomputation, see ``tinymem/ops/batchnorm.py``)."""
    args = [input] + [t for t in (weight, bias) if t is not None]
    if weight is None and bias is not None:
        raise ValueError("batch_norm: a bias without a weight is not supported; pass both or neither")
    for name, stats in (("running_mean", running_mean), ("running_var", running_var)):
        # Updated in place: a copy on the input's device would lose the update, so no copy is made.
        if stats is not None and backend.device_of(stats) != input.device:
            raise backend.DeviceError(f"batch_norm: {name} is on {backend.device_of(stats)} but the input is on "
                                      f"{input.device}; make the running statistics on the input's device")
    return BN.BatchNorm2d.apply(*args, running_mean=running_mean, running_var=running_var,
                                training=training, momentum=momentum, eps=eps)


def dropout(x, p=0.5, training=True):
    """Zero elements with probability ``p`` (seeded RNG). Identity when not training or p == 0.
    ``p`` is in [0, 1): PyTorch also takes 1 (every value dropped), refused here (checks.py)."""
    p = dropout_probability("dropout probability p", p)
    training = true_or_false("dropout: training", training)  # "no" would drop, by its truth
    if not training or p == 0:
        return x
    return NL.Dropout.apply(x, p=p)


def embedding(indices, weight):
    """Rows ``weight[indices]``; ``indices`` is an integer Tensor or array."""
    return NL.Embedding.apply(_as_tensor(indices, like=weight), weight)


# -- Tensor's operators and array methods: one table --------------------------------------------
def _compare(op):
    def method(self, other):
        other = other.data if isinstance(other, Tensor) else other
        return Tensor.wrap(op(self.data, other))
    return method


def to(self, device=None, dtype=None):
    """Move to ``device`` and/or cast to ``dtype`` (differentiable). ``to("float16")`` and
    ``to(np.float16)`` cast."""
    return S.to_device_cast(self, *backend.device_or_dtype(device, dtype))


TENSOR_METHODS = {
    "__add__": add, "__radd__": lambda self, other: add(other, self),
    "__sub__": sub, "__rsub__": lambda self, other: sub(other, self),
    "__mul__": mul, "__rmul__": lambda self, other: mul(other, self),
    "__truediv__": div, "__rtruediv__": lambda self, other: div(other, self),
    "__neg__": neg,
    "__pow__": pow, "__rpow__": lambda self, other: pow(other, self),
    "__matmul__": matmul, "__rmatmul__": lambda self, other: matmul(_as_tensor(other), self),
    "__getitem__": getitem,
    "__lt__": _compare(operator.lt), "__le__": _compare(operator.le), "__gt__": _compare(operator.gt),
    "__ge__": _compare(operator.ge), "__eq__": _compare(operator.eq), "__ne__": _compare(operator.ne),
    "exp": exp, "log": log, "sqrt": sqrt, "abs": abs, "tanh": tanh, "sigmoid": sigmoid, "relu": relu,
    "clamp": clamp, "sum": sum, "mean": mean, "max": max,
    "reshape": reshape, "view": reshape, "permute": permute, "transpose": transpose,
    "T": property(lambda self: permute(self, tuple(reversed(range(self.ndim))))),
    "softmax": softmax, "log_softmax": log_softmax, "matmul": matmul,
    "flatten": lambda self, start_dim=0: reshape(self, tuple(self.shape[:start_dim]) + (-1,)),
    "argmax": lambda self, axis=None: Tensor.wrap(self.data.argmax(axis=axis)),
    "to": to, "cpu": lambda self: to(self, "cpu"), "cuda": lambda self: to(self, "cuda"),
    "float": lambda self: to(self, dtype="float32"), "double": lambda self: to(self, dtype="float64"),
    "half": lambda self: to(self, dtype="float16"),
}


def attach_tensor_methods(cls):
    """Give ``cls`` (Tensor) the operators and methods of :data:`TENSOR_METHODS`.

    ``tinymem/__init__.py`` calls it once. The table lives here, above the engine, because each
    entry is a differentiable op and the engine must not import the ops built on it."""
    for name, method in TENSOR_METHODS.items():
        setattr(cls, name, method)
