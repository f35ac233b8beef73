"""Lesson 1 exercises: gradient checkpointing. Replace each body."""
import tinymem as tm  # noqa: F401  (you will need it)


def segment_peak_states(n, k):
    """Activation peak, counted in states (one batch x width array), of one training step of
    checkpoint_sequential over n blocks Linear(w, w) -> ReLU with k segments."""
    raise NotImplementedError("exercise 01.1")


def revolve_forwards(n_steps, slots):
    """The fewest layer forwards that reverse n_steps steps with `slots` slots, as
    revolve(n_steps, slots).forwards counts them — in closed form, without calling revolve."""
    raise NotImplementedError("exercise 01.2")


def checkpoint_one(function, x):
    """Run function(x) keeping only x (and the RNG state) for backward; backward recomputes.

    Write a tm.Function subclass. Only x needs a gradient (function has no parameters). The
    recomputation must draw the same random numbers as the forward, be marked as a
    recomputation (tinymem.autograd.recomputing), and leave the RNG as it found it."""
    raise NotImplementedError("exercise 01.3")
