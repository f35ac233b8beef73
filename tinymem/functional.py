"""Differentiable ops, imported as ``tinymem.functional as F`` (PyTorch's names and arguments).

The ops themselves live in ``tinymem/ops/`` (one file per family); this module is the public
face: it accepts Tensors, numbers and arrays, and calls ``Function.apply``. Each op's memory
cost is stated in the docstring of its Function.
"""
from .autograd import Tensor
from .layers.conv_functional import avg_pool2d, batch_norm, conv2d, interpolate, max_pool2d  # noqa: F401
from .ops import elementwise as E
from .ops import nn_ops as N
from .ops import reduction as R
from .ops import shape as S
from .ops.attention import chunked_attention, scaled_dot_product_attention  # noqa: F401
from .ops.embedding_bag import embedding_bag  # noqa: F401


def _t(x):
    """Arrays become constant Tensors; numbers stay numbers (NumPy keeps the tensor's dtype)."""
    if isinstance(x, Tensor) or isinstance(x, (int, float, bool)):
        return x
    return Tensor(x)


def _binary(fn, name, a, b):
    try:
        return fn.apply(_t(a), _t(b))
    except ValueError as exc:
        if "broadcast" not in str(exc):
            raise
        shape = lambda v: tuple(getattr(v, "shape", ()))  # noqa: E731
        raise ValueError(f"{name}: shapes {shape(a)} and {shape(b)} do not broadcast together") from None


# -- arithmetic ------------------------------------------------------------------------------
def add(a, b):
    return _binary(E.Add, "add", a, b)


def sub(a, b):
    return _binary(E.Sub, "sub", a, b)


def mul(a, b):
    return _binary(E.Mul, "mul", a, b)


def div(a, b):
    return _binary(E.Div, "div", a, b)


def neg(a):
    return E.Neg.apply(a)


def pow(a, b):
    return _binary(E.Pow, "pow", a, b)


def matmul(a, b):
    if a.ndim == 0 or b.ndim == 0:
        raise ValueError("matmul needs tensors of at least one dimension; use * for scalars")
    ka = a.shape[-1]
    kb = b.shape[0] if b.ndim == 1 else b.shape[-2]
    if ka != kb:
        raise ValueError(f"matmul: shapes {tuple(a.shape)} and {tuple(b.shape)} do not fit "
                         f"({ka} != {kb})")
    return R.MatMul.apply(_t(a), _t(b))


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
    if approximate != "tanh":
        raise ValueError("tinymem implements gelu(approximate='tanh') only (NumPy has no erf)")
    return E.GELU.apply(x)


def where(condition, a, b):
    cond = condition.data if isinstance(condition, Tensor) else condition
    return E.Where.apply(cond, _t(a), _t(b))


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
    dims[dim0], dims[dim1] = dims[dim1], dims[dim0]
    return S.Permute.apply(x, tuple(dims))


def getitem(x, index):
    return S.GetItem.apply(x, S.unwrap_index(index))


def concatenate(tensors, axis=0):
    return S.Concatenate.apply(*[_t(t) for t in tensors], axis=axis)


cat = concatenate


def stack(tensors, axis=0):
    return S.Stack.apply(*[_t(t) for t in tensors], axis=axis)


# -- neural-network ops ----------------------------------------------------------------------
def linear(x, weight, bias=None):
    """x @ weight.T + bias, weight of shape (out_features, in_features)."""
    return N.Linear.apply(x, weight, bias) if bias is not None else N.Linear.apply(x, weight)


def softmax(x, axis=-1):
    return N.Softmax.apply(x, axis=axis)


def log_softmax(x, axis=-1):
    return N.LogSoftmax.apply(x, axis=axis)


def cross_entropy(logits, target, reduction="mean"):
    """Mean (or sum, or per-row) cross-entropy of logits (N, C) against class indices (N,)."""
    return N.CrossEntropy.apply(logits, _t(target), reduction=reduction)


def mse_loss(input, target, reduction="mean"):
    return N.MSELoss.apply(input, _t(target), reduction=reduction)


def layer_norm(x, normalized_shape, weight=None, bias=None, eps=1e-5):
    ndim = 1 if isinstance(normalized_shape, int) else len(normalized_shape)
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    if tuple(x.shape[-ndim:]) != shape:
        raise ValueError(f"layer_norm: input of shape {x.shape} does not end in {shape}")
    return N.LayerNorm.apply(x, weight, bias, normalized_ndim=ndim, eps=eps)


def dropout(x, p=0.5, training=True):
    """Zero elements with probability ``p`` (seeded RNG). Identity when not training or p == 0."""
    if not 0 <= p < 1:
        raise ValueError(f"dropout probability must be in [0, 1), got {p}")
    if not training or p == 0:
        return x
    return N.Dropout.apply(x, p=p)


def embedding(indices, weight):
    """Rows ``weight[indices]``; ``indices`` is an integer Tensor or array."""
    return N.Embedding.apply(_t(indices), weight)


# -- Tensor operators and methods --------------------------------------------------------------
def _compare(op):
    def method(self, other):
        other = other.data if isinstance(other, Tensor) else other
        return Tensor._wrap(op(self.data, other))
    return method


def _install_tensor_methods():
    import operator

    T = Tensor
    T.__add__ = add
    T.__radd__ = lambda self, other: add(other, self)
    T.__sub__ = sub
    T.__rsub__ = lambda self, other: sub(other, self)
    T.__mul__ = mul
    T.__rmul__ = lambda self, other: mul(other, self)
    T.__truediv__ = div
    T.__rtruediv__ = lambda self, other: div(other, self)
    T.__neg__ = neg
    T.__pow__ = pow
    T.__rpow__ = lambda self, other: pow(other, self)
    T.__matmul__ = matmul
    T.__rmatmul__ = lambda self, other: matmul(_t(other), self)
    T.__getitem__ = getitem
    for name, op in (("__lt__", operator.lt), ("__le__", operator.le), ("__gt__", operator.gt),
                     ("__ge__", operator.ge), ("__eq__", operator.eq), ("__ne__", operator.ne)):
        setattr(T, name, _compare(op))
    T.exp, T.log, T.sqrt, T.abs, T.tanh, T.sigmoid, T.relu = exp, log, sqrt, abs, tanh, sigmoid, relu
    T.clamp = clamp
    T.sum, T.mean, T.max = sum, mean, max
    T.reshape = reshape
    T.view = reshape
    T.permute = permute
    T.transpose = transpose
    T.T = property(lambda self: permute(self, tuple(reversed(range(self.ndim)))))
    T.softmax = softmax
    T.log_softmax = log_softmax
    T.matmul = matmul
    T.flatten = lambda self, start_dim=0: reshape(self, tuple(self.shape[:start_dim]) + (-1,))
    T.argmax = lambda self, axis=None: Tensor._wrap(self.data.argmax(axis=axis))


_install_tensor_methods()
