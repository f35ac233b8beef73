"""What the command line says about itself: where a run writes by default, and the names
``figures`` and ``bench`` accept, listed at the end of their ``--help``."""
import argparse
import os


def default_out(folder, quick):
    """Where a run writes without ``--out``: ``folder``, or ``folder/quick`` for a quick run
    (git-ignored), so that small sizes never replace the committed full-mode records."""
    return os.path.join(folder, "quick") if quick else folder


class NamesParser(argparse.ArgumentParser):
    """A parser whose ``--help`` ends with the names it accepts (``names``, a function called
    only when the help is printed: finding the figure families imports every one of them)."""

    def __init__(self, *args, names=None, **kwargs):
        super().__init__(*args, **kwargs)
        self._names = names

    def format_help(self):
        if self._names is not None and self.epilog is None:
            self.epilog = self._names()
        return super().format_help()


def figure_names():
    from .experiments import families
    return "figure families (for --only), in run order: " + ", ".join(families())


def bench_names():
    from .benchmarks import benchmarks
    return "benchmarks (for NAMES): " + ", ".join(benchmarks())
