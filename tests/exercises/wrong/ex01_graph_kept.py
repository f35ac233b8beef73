"""01.3, the forward run with its graph recorded: every intermediate is kept after all."""
import tinymem as tm


def checkpoint_one(function, x):
    with tm.enable_grad():
        return function(x)
