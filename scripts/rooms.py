"""How often a reader following one value through a planner call returns to a room already left.

Two readings of one call (rooms are tinymem's modules; the path is the sequence of rooms entered,
consecutive repeats merged; a return is entering a room already on the path; a function read
once is not read again):

    value path  the reader follows one value (the GPU count of ``fits.plan_arch``, the stack of
                ``exactness.compare``): into each function that receives it (an argument is the
                value, one of its fields, or carries it: an object holding it, or holding such an
                object, one level deep: a tuple's items, a dict's values, an object's attributes;
                so a stack built on the GPU count, or a resolved value built on the stack, carries
                it) and back out to the function that passed it on
    whole call  the reader reads every tinymem function the call runs, into it and back out

    PYTHONPATH=. python scripts/rooms.py [-v]     (-v prints each value path)
"""
import sys

LIMIT = 512  # items of a container looked into (a search's list of candidates is a few hundred)


class Marked(int):
    """An int that is itself and no other: the GPU count 64 is a cached int, and so is a 64 of
    the model's heads; a subclass instance has its own identity and still computes as an int."""


class MarkedStr(str):
    """A string that is itself and no other ("bf16" in the source is one interned object)."""


def marked(stack):
    """``stack`` with each of its ints and strings its own object, so that the reader can follow
    a field read from it (``stack.precision`` into ``width``) and tell it from a literal."""
    return stack._make(Marked(v) if type(v) is int else MarkedStr(v) if type(v) is str else v for v in stack)


def module_of(frame):
    name = frame.f_globals.get("__name__", "")
    return name if name.startswith("tinymem") else None


def _items(obj):
    if isinstance(obj, (tuple, list, set, frozenset)):
        return list(obj)[:LIMIT]
    if isinstance(obj, dict):
        return list(obj.values())[:LIMIT]
    attributes = getattr(obj, "__dict__", None)
    return list(attributes.values())[:LIMIT] if isinstance(attributes, dict) else []


class Carriers:
    """The value, and every object seen holding a carrier one level deep (kept alive, so that an
    id is never reused by another object)."""

    def __init__(self, value):
        parts = [v for v in _items(value) if isinstance(v, (Marked, MarkedStr))]  # the value's own fields
        self.kept = [value] + parts
        self.ids = {id(v) for v in self.kept}

    def carries(self, obj):
        if id(obj) in self.ids:
            return True
        if isinstance(obj, (int, float, str, bytes, bool, type(None))):
            return False
        items = _items(obj)
        if any(id(item) in self.ids for item in items):
            self.add(obj, items)
            return True
        return False

    def add(self, obj, items):
        """``obj`` carries the value, and so do its string and marked fields (``stack.precision``
        of a stack built on the GPU count: the reader follows the stack now)."""
        for v in [obj] + [v for v in items if isinstance(v, (str, Marked))]:
            if id(v) not in self.ids:
                self.ids.add(id(v))
                self.kept.append(v)


def arguments(frame):
    code = frame.f_code
    count = code.co_argcount + code.co_kwonlyargcount
    names = list(code.co_varnames[:count])
    if code.co_flags & 0x04:  # *args
        names.append(code.co_varnames[count])
        count += 1
    if code.co_flags & 0x08:  # **kwargs
        names.append(code.co_varnames[count])
    return [frame.f_locals.get(n) for n in names]  # *args and **kwargs: looked into as containers


def path_of(call, value=None):
    """The rooms a reader enters following ``value`` through ``call()`` (every function the
    call runs when ``value`` is None)."""
    carriers = None if value is None else Carriers(value)
    read, on_path, path = set(), set(), []

    def step(module):
        if module and (not path or path[-1] != module):
            path.append(module)

    def holder(frame):
        """The nearest caller of ``frame`` the reader is in (on the value's path, or tinymem)."""
        caller = frame.f_back
        while caller is not None and not (module_of(caller) and (carriers is None or caller in on_path)):
            caller = caller.f_back
        return caller

    def tracer(frame, event, arg):
        if event != "call" or module_of(frame) is None:
            return None
        if carriers is not None:
            if not any(carriers.carries(v) for v in arguments(frame)):
                return None
            on_path.add(frame)
        if frame.f_code in read:
            return None
        read.add(frame.f_code)
        step(module_of(frame))
        caller = holder(frame)

        def back(f, e, a):
            if e == "return":
                on_path.discard(f)
                if caller is not None:
                    step(module_of(caller))
            return back
        frame.f_trace_lines = False
        return back

    sys.settrace(tracer)
    try:
        call()
    finally:
        sys.settrace(None)
    return path


def returns(path):
    """``(rooms, returns)``: distinct rooms entered, and entries into a room already on the path."""
    return len(set(path)), sum(1 for i, m in enumerate(path) if m in path[:i])


def folder(module):
    """A planner module's folder under tinymem/planner (the module itself elsewhere)."""
    parts = module.split(".")
    return ".".join(parts[:3]) if len(parts) > 3 and parts[1] == "planner" else module


def merged(path):
    return [m for i, m in enumerate(path) if i == 0 or path[i - 1] != m]


def measures(call, value):
    """``{reading: {"module": (rooms, returns), "folder": (rooms, returns)}}`` and the value path."""
    out, value_path = {}, None
    for reading, followed in (("value path", value), ("whole call", None)):
        path = path_of(call, followed)
        value_path = value_path or path
        out[reading] = {"module": returns(path), "folder": returns(merged([folder(m) for m in path]))}
    return out, value_path


def cases():
    """``[(label, call, value)]``: the issue's two parameters."""
    from tinymem.planner import analytic, exactness, fits
    gpus = Marked(64)
    stack = marked(analytic.Stack("bf16", recompute="full"))
    return [("fits.plan_arch('llama2-70b', 64 GPUs, 80e9), its GPU count",
             lambda: fits.plan_arch("llama2-70b", gpus, 80e9), gpus),
            ("exactness.compare((64, 16, 32, 2, 2), 2, Stack('bf16', recompute='full')), its stack",
             lambda: exactness.compare((64, 16, 32, 2, 2), 2, stack), stack)]


if __name__ == "__main__":
    for label, call, value in cases():
        result, path = measures(call, value)
        print(label)
        for reading, counts in result.items():
            print(f"  {reading}: by module {counts['module'][0]} rooms, {counts['module'][1]} returns; "
                  f"by folder {counts['folder'][0]} rooms, {counts['folder'][1]} returns")
        if "-v" in sys.argv:
            print("    " + " > ".join(m.replace("tinymem.", "") for m in path))
