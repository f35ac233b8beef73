"""Lesson 1 exercises: gradient checkpointing. Replace each body."""
import tinymem as tm  # noqa: F401  (you will need it)


def segment_peak_states(n, k):
    """Activation peak, counted in states (one batch x width array), of one training step of
    checkpoint_sequential over n blocks Linear(w, w) -> ReLU with k segments."""
    raise NotImplementedError("exercise 01.1")


def revolve_forwards(n_steps, slots):
    """The fewest extra layer forwards that reverse n_steps steps with `slots` slots."""
    raise NotImplementedError("exercise 01.2")


def checkpoint_one(function, x):
    """Run function(x) keeping only x (and the RNG state) for backward; backward recomputes.

    Write a tm.Function subclass. Only x needs a gradient (function has no parameters)."""
    raise NotImplementedError("exercise 01.3")
