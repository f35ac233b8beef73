"""A tape of the bytes one PyTorch training step allocates and frees, tensor by tensor.

The ``torch`` mode (:mod:`.torch_step`) writes the step PyTorch 2.13 runs as a list of
allocations and frees, each a named tensor with its formula and its bucket, in the order the
autograd engine makes and lets go of them (:mod:`.torch_ops` writes the ops). :meth:`Tape.run`
adds them up and returns the step's peak, the moment it falls in, the buckets there and the
tensors alive there: the peak is a maximum over a running total, evaluated once per op, so every
byte at the peak is a named tensor of the tape.

Buckets (those of ``tinymem.measure.torch_step``'s measurement): ``parameter`` (weights),
``buffer`` (the module's buffers: causal masks, rotary tables), ``optimizer`` (AdamW's state),
``input`` (token ids and targets), ``gradient`` (``.grad``), ``activation`` (tensors saved for
backward), ``in_flight`` (gradients between backward nodes) and ``temporary`` (op outputs
nobody saves yet, the logits the caller holds, the optimizer's temporaries).
"""
from collections import namedtuple

from .activations import Term

BUCKETS = ("parameter", "buffer", "optimizer", "input", "gradient", "activation", "in_flight", "temporary")

Peak = namedtuple("Peak", "bytes moment buckets live moments terms")
Peak.__doc__ = """What :meth:`Tape.run` finds: ``bytes`` the peak, ``moment`` the phase it falls in,
``buckets`` ``{bucket: bytes}`` at the peak, ``live`` ``[(bucket, Term)]`` the tensors alive there
(grouped by name: a per-layer tensor of L layers is one Term of L times its bytes), ``moments``
``{moment: {bucket: bytes}}`` each phase at its own largest total, ``terms`` ``{moment: [(bucket,
Term)]}`` the tensors alive there."""


class Tape:
    """Allocations and frees in order. ``new(tag, bucket, name, formula, nbytes)`` makes a tensor
    (``tag`` unique while it lives, ``name`` what a reader sees); ``free(*tags)`` lets them go;
    ``moment`` names the phase the next events fall in; ``rounding`` the allocator's unit (the CPU
    allocator's records are the bytes asked for: 1)."""

    def __init__(self, rounding=1):
        self.events, self.moment, self.rounding = [], "forward", rounding

    def new(self, tag, bucket, name, formula, nbytes):
        """``nbytes`` rounded up to the allocator's unit (CUDA's caching allocator: 512 B)."""
        nbytes = -(-int(nbytes) // self.rounding) * self.rounding
        self.events.append((self.moment, tag, (bucket, name, formula, nbytes)))
        return tag

    def enter(self, moment):
        """The next events fall in ``moment``, which starts with what is alive now (a phase that
        allocates nothing, a fused optimizer's step, still has its total)."""
        self.moment = moment
        self.events.append((moment, None, None))

    def free(self, *tags):
        for tag in tags:
            self.events.append((self.moment, tag, None))

    def run(self):
        """The :class:`Peak` of the tape: one pass for the running total and each moment's
        largest, one more for the tensors alive at each of those."""
        live, total, best = {}, 0, {}  # best: {moment: (total, index)}
        for i, (moment, tag, made) in enumerate(self.events):
            if tag is None:  # a moment entered
                if total > best.get(moment, (-1, 0))[0]:
                    best[moment] = (total, i)
                continue
            if made is None:
                if tag not in live:
                    raise ValueError(f"torch tape: tensor {tag!r} freed but not alive")
                total -= live.pop(tag)[3]
                continue
            if tag in live:
                raise ValueError(f"torch tape: tensor {tag!r} made twice")
            live[tag] = made
            total += made[3]
            if total > best.get(moment, (-1, 0))[0]:
                best[moment] = (total, i)
        wanted = {i: moment for moment, (_, i) in best.items()}
        terms, live = {}, {}
        for i, (moment, tag, made) in enumerate(self.events):
            if tag is None:
                pass
            elif made is None:
                live.pop(tag)
            else:
                live[tag] = made
            if i in wanted:
                terms[wanted[i]] = _grouped(live.values())
        moments = {m: _buckets(t) for m, t in terms.items()}
        top = max(best, key=lambda m: best[m][0])
        return Peak(best[top][0], top, moments[top], terms[top], moments, terms)


def _grouped(tensors):
    """``[(bucket, Term)]``: tensors of one bucket, name and formula added up (L layers' copies
    of a saved tensor are one Term)."""
    grouped = {}
    for bucket, name, formula, nbytes in tensors:
        count, total = grouped.get((bucket, name, formula), (0, 0))
        grouped[(bucket, name, formula)] = (count + 1, total + nbytes)
    return [(bucket, Term(name if count == 1 else f"{name} (x{count})", formula, nbytes))
            for (bucket, name, formula), (count, nbytes) in grouped.items()]


def _buckets(terms):
    out = dict.fromkeys(BUCKETS, 0)
    for bucket, term in terms:
        out[bucket] += term.bytes
    return out
