"""The model ``tinymem plan``'s closed-form modes plan: ``--arch NAME``, ``--config FILE`` or
explicit sizes, with the sizes given overriding the first two."""
from collections import namedtuple

from ...checks import positive_int
from ..model import architectures, config_files
from . import arguments

Model = namedtuple("Model", "arch header config")
Model.__doc__ = """``arch``: the :class:`~.architectures.Arch` planned; ``header``: the lines every
mode prints first (what ``--config`` read, defaulted and ignored; empty without it);
``config``: the :class:`~.config_files.Config` of ``--config`` (None without it)."""


def model_from(args):
    """The :class:`Model` the flags name. With ``--arch`` or ``--config``, each of
    :data:`.arguments.OVERRIDES` given replaces the model's own size and goes into its name
    (``gpt2 overridden by --layers 2``), which the header prints; the result passes the planner's
    own :func:`~.architectures.check`, whose refusals start with that name and so name the flag.
    ``--seq`` is the training context, as every mode's header says. A ValueError refuses the
    flags; nothing is printed here."""
    if args.seq is not None:  # the Arch's own check would blame "gpt2: seq", a field, not the flag given
        positive_int("--seq", args.seq)
    if not (args.arch or args.config):
        missing = [f"--{n}" for n in ("layers", "hidden", "heads", "seq", "vocab") if getattr(args, n) is None]
        if missing:
            raise ValueError(f"explicit sizes need {', '.join(missing)} too (or --arch NAME, or --config FILE)")
        return Model(architectures.custom(args.layers, args.hidden, args.heads, args.seq, args.vocab, args.ffn),
                     [], None)
    config = config_files.read(args.config) if args.config else None
    arch = config.arch if config else architectures.get_arch(args.arch)
    sizes = {n: getattr(args, n) for n in arguments.OVERRIDES if getattr(args, n) is not None}
    if sizes:
        flags = " ".join(f"{arguments.flag(n)} {v}" for n, v in sizes.items())
        arch = arch._replace(name=f"{arch.name} overridden by {flags}", **sizes)
    arch = architectures.check(arch._replace(seq=args.seq) if args.seq is not None else arch)
    if not config:
        return Model(arch, [], None)
    read = f"--config {args.config}: read as the {config.family} family"
    if config.defaults:
        read += "; absent, so their defaults: " + ", ".join(f"{k}={v}" for k, v in config.defaults.items())
    if config.ignored:
        read += "; ignored (they change no memory of a step): " + ", ".join(config.ignored)
    return Model(arch, [read], config)
