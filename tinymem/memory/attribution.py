"""Attribution: the module and the op that made each ledger entry, and who holds the peak.

While a model runs, each thread keeps two names: the dotted path of the module whose forward is
running (``blocks.3.attn``, spelled as ``named_modules`` spells it; the root is ``""``) and the
op whose forward is running (``Linear``, ``Softmax``). ``Module.__call__`` sets the first,
``Function.apply`` the second, and the ledger stamps every new entry with both, as PyTorch's
memory snapshots stamp each block with the stack that allocated it. In backward, the engine
stamps what a node's backward makes with the node's module and ``Linear.backward``.

Arrays made outside any module have no path: parameters (made in ``__init__``), optimizer
state, and a loss computed outside the model. Reports name those by their bucket, or by their
parameter's module when given the model.

Cost: one thread-local read per registered array, and under a microsecond per module call and
per op; inside a window that keeps a timeline, a walk up the stack per new array for the user's
line (:func:`user_site`, a few microseconds). ``set_enabled(False)`` (or ``with enabled(False):``)
turns it off; the lesson on watching memory measures the difference.
"""
import contextlib
import os
import runpy
import sys
import threading

ENABLED = True
ROOT = "(model)"
_PATH = "_module_path"
_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_RUNPY = runpy.__file__  # python -m and tinymem timeline's script runner: not the user's code


class Scope:
    """What one thread runs now. A plain object, not the ``threading.local`` itself: every op
    reads and writes it, and an attribute of a ``threading.local`` costs about ten times a
    plain one (the thread's dictionary is found first), so code reads ``SCOPE.current`` once
    and then works on this."""

    __slots__ = ("path", "op", "root", "renamed")

    def __init__(self):
        self.path = None  # dotted path of the module running now; None outside every module
        self.op = None  # name of the Function whose forward runs now
        self.root = None  # the outermost module running now, whose tree names the paths
        self.renamed = False  # the tree was renamed once during this root call already


class _PerThread(threading.local):
    """``SCOPE``: each thread's own :class:`Scope` is ``SCOPE.current``. ``SCOPE.path``,
    ``SCOPE.op`` and ``SCOPE.root`` read it too (for tests and reports, not for hot paths)."""

    def __init__(self):
        self.current = Scope()

    path = property(lambda self: self.current.path)
    op = property(lambda self: self.current.op)
    root = property(lambda self: self.current.root)


SCOPE = _PerThread()


def set_enabled(flag):
    """Turn attribution on or off for every thread (it is on by default)."""
    global ENABLED
    ENABLED = bool(flag)


@contextlib.contextmanager
def enabled(flag=True):
    """``with enabled(False): ...`` runs without attribution and restores the previous setting."""
    before = ENABLED
    set_enabled(flag)
    try:
        yield
    finally:
        set_enabled(before)


def _name_tree(root, prefix):
    for name, module in root.named_modules(prefix):
        module.__dict__[_PATH] = name


def enter_module(module):
    """Make ``module`` the current one; returns what :func:`leave_module` restores.

    A module learns its path once, when the first root containing it runs: the root walks its
    ``named_modules`` and writes each path on the module. A module that is not a registered
    child (a wrapper made on the fly) is named by its class under the current path.
    """
    scope = SCOPE.current
    outer = scope.path
    path = module.__dict__.get(_PATH)
    if outer is None:
        scope.root, scope.renamed = module, False
        if path is None:
            _name_tree(module, "")
            path = ""
    elif path is None:
        if not scope.renamed:  # a child swapped in since the tree was named: name it again, once
            scope.renamed = True
            root = scope.root
            _name_tree(root, root.__dict__.get(_PATH) or "")
            path = module.__dict__.get(_PATH)
        if path is None:
            path = f"{outer}.{type(module).__name__}" if outer else type(module).__name__
    scope.path = path
    return outer


def leave_module(outer):
    scope = SCOPE.current
    scope.path = outer
    if outer is None:
        scope.root = None  # hold no model alive once its forward is over


def enter_op(name):
    """Make ``name`` the current op (when attribution is on); returns the op to restore."""
    scope = SCOPE.current
    outer = scope.op
    if ENABLED:
        scope.op = name
    return outer


def leave_op(outer):
    SCOPE.current.op = outer


_BACKWARD_NAMES = {}


def enter_backward(node):
    """Stamp what comes next as made by ``node``'s backward (``Linear.backward`` in the module
    that ran its forward); ``None`` only saves the scope. Returns what :func:`leave_backward`
    restores."""
    scope = SCOPE.current
    outer = (scope.path, scope.op)
    if node is not None and ENABLED:
        kind = type(node)
        name = _BACKWARD_NAMES.get(kind)
        if name is None:
            name = _BACKWARD_NAMES[kind] = f"{kind.__name__}.backward"
        scope.path, scope.op = node.module_path, name
    return outer


def leave_backward(outer):
    scope = SCOPE.current
    scope.path, scope.op = outer


def user_site():
    """``(filename, line, function)`` of the innermost frame outside tinymem: the user's line
    that made the array being registered (``None`` when every frame is tinymem's, or Python's
    ``runpy``). A walk up the stack, a few tens of frames at most: about a microsecond."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE):
        frame = frame.f_back
    if frame is not None and frame.f_code.co_filename == _RUNPY:
        return None
    if frame is None:
        return None
    return frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name


def describe(entry, site=True):
    """``(shape, dtype, site)`` of the buffer ``entry`` counts, read while it is alive: shape
    and dtype as strings (``None`` for bytes that are not an array, or a buffer already dead)
    and, with ``site`` and attribution on, :func:`user_site` (else ``None``)."""
    target = entry.ref()
    shape, dtype = getattr(target, "shape", None), getattr(target, "dtype", None)
    return (None if shape is None else str(tuple(shape)), None if dtype is None else str(dtype),
            user_site() if site and ENABLED else None)


# -- reports over ledger entries ------------------------------------------------------------
# Reports take ``(entry, bucket)`` pairs: an entry's bucket may have changed since the moment
# reported (an activation returns to workspace once backward used it).
def _module_name(entry, bucket, params):
    if entry.module is not None:
        return entry.module or ROOT
    if params:
        target = entry.ref()
        if target is not None and id(target) in params:
            return params[id(target)] or ROOT
    return f"(no module: {bucket})"


def parameter_paths(model):
    """``{id(buffer): module path}`` for every parameter and gradient buffer of ``model``: how
    reports name the arrays made outside any forward (weights in ``__init__``, grads in backward)."""
    if not hasattr(model, "named_parameters"):
        raise TypeError(f"model must be a Module whose parameters name the weights, got {type(model).__name__}")
    paths = {}
    for name, p in model.named_parameters():
        module = name.rpartition(".")[0]
        for array in (p.data, None if p.grad is None else p.grad.data):
            if array is not None:
                while getattr(array, "base", None) is not None and hasattr(array.base, "nbytes"):
                    array = array.base
                paths[id(array)] = module
    return paths


def top_rows(pairs, n=10, params=None):
    """The ``n`` largest entries as dicts: module, op, bucket, bytes (largest first)."""
    rows = sorted(pairs, key=lambda pair: -pair[0].nbytes)[:n]
    return [{"module": _module_name(e, b, params), "op": e.label or "-", "bucket": b, "bytes": e.nbytes}
            for e, b in rows]


def sum_by_module(pairs, params=None, depth=None):
    """``{module path: bytes}``, largest first; ``depth`` keeps the first ``depth`` parts of each
    path (``blocks.3.attn`` -> ``blocks.3`` at depth 2). Every entry lands in exactly one key,
    so the values sum to the entries' bytes."""
    sums = {}
    for e, b in pairs:
        name = _module_name(e, b, params)
        if depth is not None and not name.startswith("("):
            name = ".".join(name.split(".")[:depth])
        sums[name] = sums.get(name, 0) + e.nbytes
    return dict(sorted(sums.items(), key=lambda kv: -kv[1]))


def format_rows(rows):
    """A text table of :func:`top_rows` (module, op, bucket, bytes)."""
    width = max([len("module")] + [len(r["module"]) for r in rows])
    lines = [f"{'module':<{width}}  {'op':<18} {'bucket':<10} {'bytes':>14}"]
    lines += [f"{r['module']:<{width}}  {r['op']:<18} {r['bucket']:<10} {r['bytes']:>14,d}" for r in rows]
    return "\n".join(lines)
