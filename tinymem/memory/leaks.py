"""Leaks: what is alive, what grows from step to step, and the references that keep it alive.

A leak in training is an array that should die at the end of its step and does not, because
something long-lived still refers to it. The classics:

    total += loss                  instead of ``total += loss.item()``: ``total`` is a Tensor
                                   whose graph reaches back through every step
    cache[step] = hidden           a dict of activations that is never emptied
    hooks.append(lambda: loss)     a closure that holds a loss, and with it its graph

:func:`find_leaks` runs a step a few times, keeps the ledger entries born in each step that are
still alive after the last one, groups them by bucket, op and module, and walks
``gc.get_referrers`` upward from one leaked array until it meets a name: a local variable of a
running function, a global of a module. That path is the reference chain it reports.

Cost: ``warmup + steps`` steps, a ``gc.collect()`` after each, and per leak one scan of the
heap per level of the chain (``gc.get_referrers`` looks at every tracked object): a second or
so in a big process. A debugging tool, not something to leave in a training loop.

Pitfall: objects frozen by ``gc.freeze()`` are invisible to ``gc.get_referrers``; with any
frozen, :func:`find_leaks` warns, and a holder among them is reported as not found.
"""
import gc
import sys
import types
import warnings
import weakref
from collections import namedtuple
from dataclasses import dataclass, field

from ..checks import is_int
from .ledger import LEDGER, PLACES
from .units import format_bytes

LiveArray = namedtuple("LiveArray", "bytes bucket place op module shape dtype")


def live_tensors(place=None):
    """Every array the ledger counts now, largest first: bytes, bucket, place, the op and module
    that made it (attribution), shape and dtype. ``place`` keeps one place (``"device"``)."""
    if place is not None and place not in PLACES:  # would list nothing, as if nothing were alive
        raise ValueError(f"live_tensors: unknown place {place!r}; choose one of {', '.join(PLACES)} or None")
    rows = []
    for entry in list(LEDGER.entries.values()):
        target = entry.ref()
        if target is None or (place is not None and entry.place != place):
            continue
        rows.append(LiveArray(entry.nbytes, entry.bucket, entry.place, entry.label, entry.module,
                              tuple(getattr(target, "shape", ())), str(getattr(target, "dtype", "-"))))
    return sorted(rows, key=lambda r: -r.bytes)


@dataclass
class Leak:
    """Arrays (or graph nodes) that grow every step, and the name that holds them.

    ``parts`` lists what grows: ``(bucket, op, module, bytes per step, count per step)``.
    ``chain`` is the path of references from the holder down to one of the arrays."""

    holder: str
    chain: list
    parts: list = field(default_factory=list)

    @property
    def bytes_per_step(self):
        return sum(part[3] for part in self.parts)

    def __str__(self):
        grows = ", ".join(f"{n:g} graph nodes ({op})" if bucket == "graph" else
                          f"{n:g} {bucket} from {op or 'no op'}" + (f" in module {module}" if module else "")
                          for bucket, op, module, _, n in self.parts)
        return (f"{self.holder}: {format_bytes(int(self.bytes_per_step))} per step ({grows})"
                + ("\n    " + " -> ".join(self.chain) if self.chain else ""))


NOT_FOUND = "something outside Python's view (a C extension, or a reference cycle) holds it"


def find_leaks(step_fn, steps=5, warmup=1):
    """Run ``step_fn()`` ``warmup + steps`` times and report what grows per step.

    The warm-up steps may create what lives on legitimately (optimizer state, caches that fill
    once). An array born in one of the measured steps, other than the last, and still alive at
    the end has leaked. Arrays are grouped by bucket, op and module; a group grows when its
    arrays survive from at least half of those steps, the first one included: a holder of the
    last few steps (a ``deque(maxlen=3)``, a cache of recent batches) has let the first step's
    arrays go by the end and does not grow (give ``steps`` above its length to tell the two
    apart). Each group is traced to the name that holds it, and the groups with one holder
    make one :class:`Leak` (largest first). Graph nodes that outlive their step count too
    (bucket ``"graph"``, 0 bytes): a graph kept after backward holds no arrays, yet it grows by
    a few nodes every step. A clean loop gives an empty list.
    """
    if not callable(step_fn):
        raise TypeError(f"find_leaks runs step_fn() once per step; it must be callable, got {step_fn!r}")
    if not is_int(steps) or steps < 3:
        raise ValueError(f"find_leaks needs an integer steps >= 3 to tell growth from the last step's arrays, got {steps!r}")
    if not is_int(warmup) or warmup < 0:
        raise ValueError(f"find_leaks: warmup must be an integer >= 0 (steps run before measuring), got {warmup!r}")
    if gc.get_freeze_count():
        warnings.warn(f"find_leaks: gc.freeze() has put {gc.get_freeze_count()} objects where "
                      "gc.get_referrers does not look, so a holder among them (a module's globals, "
                      "say) cannot be named; call gc.unfreeze() first", RuntimeWarning, stacklevel=2)
    for _ in range(warmup):
        step_fn()
    gc.collect()
    before, born = set(LEDGER.entries.values()), {}
    seen_nodes, node_born = weakref.WeakSet(_graph_nodes()), []
    for k in range(steps):
        step_fn()
        gc.collect()
        for entry in list(LEDGER.entries.values()):
            if entry not in before and entry not in born:
                born[entry] = k
        new = [n for n in _graph_nodes() if n not in seen_nodes]
        seen_nodes.update(new)
        node_born.append(weakref.WeakSet(new))
        del new
    alive = set(LEDGER.entries.values())
    groups = {}
    for entry, k in born.items():
        if entry in alive and k < steps - 1:
            groups.setdefault((entry.bucket, entry.label, entry.module), []).append((k, entry.nbytes, entry.ref))
    nodes = [(k, 0, weakref.ref(n)) for k, found in enumerate(node_born[:-1]) for n in found]
    if nodes:
        kinds = sorted({type(ref()).__name__ for _, _, ref in nodes if ref() is not None})
        groups[("graph", ", ".join(kinds), None)] = nodes
    measured = steps - 1
    grown = [(key, found) for key, found in sorted(groups.items(), key=lambda kv: kv[0][0] == "graph")
             if _grows({k for k, _, _ in found}, measured)]
    # The newest array of each group sits closest to its holder; one heap scan finds the holders
    # of all those the collector does not track (every array).
    targets = [max(found, key=lambda item: item[0])[2]() for _, found in grown]
    first = {}
    for holder, path in _hidden_holders([t for t in targets if t is not None and not gc.is_tracked(t)], set()):
        first.setdefault(id(path[-1]), []).append((holder, path))
    known, leaks = {}, {}
    for ((bucket, op, module), found), target in zip(grown, targets):
        part = (bucket, op, module, sum(n for _, n, _ in found) / measured, len(found) / measured)
        key, holder, chain = (None, NOT_FOUND, []) if target is None else _trace(
            target, known, first.get(id(target), []), step_fn)
        if bucket == "graph" and key in leaks:
            continue  # the arrays this graph holds already name it
        leaks.setdefault(key, Leak(holder, chain)).parts.append(part)
    del targets, first
    return sorted(leaks.values(), key=lambda leak: -leak.bytes_per_step)


def _grows(steps_born, measured):
    """Survivors born in at least half of the ``measured`` steps, the first one among them."""
    return len(steps_born) >= max(2, measured // 2) and 0 in steps_born


# -- the reference chain ----------------------------------------------------------------------
_KINDS = {}


def _kind_of(cls):
    """``"node"`` for a graph node class (a Function), ``"tensor"`` for a Tensor class, else
    ``None``; read from the class only (an instance's ``__getattr__`` may do anything)."""
    kind = _KINDS.get(cls, 0)
    if kind == 0:
        names = set().union(*(vars(c) for c in cls.__mro__))
        kind = "node" if {"save_for_backward", "saved_tensors"} <= names else (
            "tensor" if {"backward", "wrap"} <= names else None)
        _KINDS[cls] = kind
    return kind


def _kind(obj):
    return _kind_of(type(obj))


def _is_graph_node(obj):
    return _kind(obj) == "node"


def _is_tensor(obj):
    return _kind(obj) == "tensor"


def _graph_nodes():
    objects = gc.get_objects()
    node_types = {t for t in {type(o) for o in objects} if _kind_of(t) == "node"}
    return [o for o in objects if type(o) in node_types]


def _link(holder, held, attribute=False):
    """How ``holder`` refers to ``held``: ``[3]``, ``['key']``, ``.attr``."""
    if isinstance(holder, dict):
        for key, value in holder.items():
            if value is held:
                return f".{key}" if attribute else f"[{key!r}]"
    if isinstance(holder, (list, tuple)):
        for i, value in enumerate(holder):
            if value is held:
                return f"[{i}]"
    for name, value in getattr(holder, "__dict__", {}).items():
        if value is held:
            return f".{name}"
    return ""


def _position(items, item):
    """The index of ``item`` in ``items`` by identity (cells compare by content, and a Tensor's
    ``==`` is elementwise)."""
    return next(i for i, x in enumerate(items) if x is item)


def _describe(obj):
    if isinstance(obj, types.FunctionType):
        return f"function {obj.__name__}"
    if _is_graph_node(obj):
        return f"graph node {type(obj).__name__}"
    return type(obj).__name__


def _roots():
    """``{id(object): (name, where)}`` for the local variables of the running functions (but
    ours), and ``{id(module dict): module name}`` for every loaded module."""
    local = {}
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_globals.get("__name__") != __name__:
            for name, value in frame.f_locals.items():
                local.setdefault(id(value), (name, f"(a local of {frame.f_code.co_name}())"))
        frame = frame.f_back
    modules = {id(vars(m)): m.__name__ for m in list(sys.modules.values())
               if type(m) is types.ModuleType}  # sys.modules may hold other objects too
    return local, modules


# Kinds of objects that hold no arrays of a training step (or are frames, which we skip):
# leaving them out shortens the scan.
_NEVER_HOLDERS = {types.FrameType, type, types.CodeType, types.ModuleType, types.BuiltinFunctionType,
                  types.WrapperDescriptorType, types.MethodDescriptorType, types.GetSetDescriptorType,
                  types.MemberDescriptorType, types.ClassMethodDescriptorType, property}


def _hidden_holders(targets, ignore):
    """``[(holder, [container, ..., target])]``: the tracked objects that hold one of ``targets``,
    directly or through containers the collector no longer tracks.

    CPython stops tracking a tuple or dict whose items are all untracked (numbers, strings,
    NumPy arrays), so ``gc.get_referrers`` cannot see the tuple ``(array,)`` of a saved tensor.
    One pass over every tracked object's referents, opening untracked containers, finds it."""
    want = {id(t) for t in targets}
    found = []
    for obj in gc.get_objects():
        if type(obj) in _NEVER_HOLDERS or id(obj) in ignore:
            continue
        for ref in gc.get_referents(obj):
            if id(ref) in want:
                found.append((obj, [ref]))
            elif type(ref) in (tuple, dict) and not gc.is_tracked(ref):
                path = _inside(ref, want, 3)
                if path:
                    found.append((obj, path))
    return found


def _inside(container, want, depth):
    for item in (container.values() if isinstance(container, dict) else container):
        if id(item) in want:
            return [container, item]
        if depth > 1 and type(item) in (tuple, dict) and not gc.is_tracked(item):
            path = _inside(item, want, depth - 1)
            if path:
                return [container] + path
    return None


def _trace(obj, known=None, first=None, step_fn=None, max_depth=80, max_reached=20_000):
    """``(key, holder, chain)``: the name that keeps ``obj`` alive (a key and a sentence) and the
    references down to it.

    Breadth first up ``gc.get_referrers`` (one heap scan per level) until a local variable of a
    running function or a module global. ``known`` maps objects on earlier chains to theirs;
    ``first`` gives ``obj``'s holders when a scan has already found them. ``step_fn`` counts as
    a name too: what its closure holds is named by the closure's variable. The search gives up
    past ``max_depth`` levels or ``max_reached`` objects (a holder outside Python's view)."""
    known = {} if known is None else known
    local, modules = _roots()
    if step_fn is not None:
        local.setdefault(id(step_fn), (getattr(step_fn, "__qualname__", "step_fn"), "(the step function)"))
    parent, frontier, keep = {id(obj): None}, [obj], [obj]
    ignore = {id(parent), id(keep), id(known)}
    root = top = None
    prefix = []  # the chain above ``top`` when ``top`` sits on a chain found before
    for _ in range(max_depth):
        if len(parent) > max_reached:
            break
        keep.append(frontier)
        ignore.add(id(frontier))
        for node in frontier:
            if id(node) in local:
                root, top = local[id(node)], node
                break
            if id(node) in known:
                (root, above), top = known[id(node)], node
                prefix = above[:-1]
                break
        if top is not None or not frontier:
            break
        tracked = [n for n in frontier if gc.is_tracked(n)]
        pairs = []
        if tracked:
            refs = gc.get_referrers(*tracked)
            keep.append(refs)
            ignore.add(id(refs))
            for ref in refs:
                if type(ref) is tuple and len(ref) == len(tracked) and all(a is b for a, b in zip(ref, tracked)):
                    continue  # the argument tuple of the get_referrers call itself
                held = next((n for n in tracked if any(r is n for r in gc.get_referents(ref))), None)
                if held is not None:
                    pairs.append((ref, [held]))
        hidden = [n for n in frontier if not gc.is_tracked(n)]
        if first is not None and hidden == [obj]:
            pairs += first
        elif hidden:
            pairs += _hidden_holders(hidden, ignore)
        frontier = []
        for holder, path in pairs:
            if id(holder) in parent or id(holder) in ignore or type(holder) is types.FrameType:
                continue
            if id(holder) in modules:
                root, top = (_link(holder, path[0]).strip("[]'"), f"in {modules[id(holder)]}"), path[0]
                break
            for container, inner in zip(path, path[1:]):
                parent.setdefault(id(container), inner)
            parent[id(holder)] = path[0]
            keep += [holder] + path
            frontier.append(holder)
        if top is not None:
            break
    if top is None:
        return None, NOT_FOUND, []
    path = [top]
    while parent.get(id(path[-1])) is not None:
        path.append(parent[id(path[-1])])
    path = prefix + path
    fn = path[0]
    if isinstance(fn, types.FunctionType) and len(path) > 3 and path[1] is fn.__closure__:
        # held by a closure: the variable is the name, not the function
        variable = fn.__code__.co_freevars[_position(fn.__closure__, path[2])]
        root, path = (variable, f"(closed over by {fn.__qualname__})"), path[3:]
    for i, node in enumerate(path):
        known.setdefault(id(node), (root, path[: i + 1]))
    return root, *_summarize(root, path)


def _summarize(root, path):
    """The holder sentence and the chain of links, with a graph's nodes folded into one link."""
    name, where = root
    top = path[0]
    graph = [i for i, p in enumerate(path) if _is_graph_node(p)]
    chain, i, attribute = [f"`{name}`"], 0, False
    while i < len(path) - 1:
        holder, held = path[i], path[i + 1]
        i += 1
        if graph and i == graph[0]:  # from the first graph node to the last: one link
            kinds = ", ".join(dict.fromkeys(type(path[j]).__name__ for j in graph))
            chain.append(f"graph of {len(graph)} nodes ({kinds})")
            i, attribute = graph[-1], False
        elif held is getattr(holder, "__dict__", None):
            attribute = True  # an object and its attribute dict: the next link is ``.name``
        elif isinstance(holder, types.FunctionType) and held is holder.__closure__ and i + 1 < len(path):
            variable = holder.__code__.co_freevars[_position(holder.__closure__, path[i + 1])]
            chain.append(f"closure `{variable}`")
            i, attribute = i + 1, False  # function -> its closure tuple -> a cell: one named link
        else:
            chain.append(f"{_link(holder, held, attribute)} {_describe(held)}".strip())
            attribute = False
    if _is_tensor(top):
        what = "its graph" if graph else "its data"
    else:
        what = "the graph of a Tensor" if graph else (
            "a Tensor" if any(_is_tensor(p) for p in path) else "an array")
    return f"the {_describe(top)} `{name}` {where} holds {what}", chain
