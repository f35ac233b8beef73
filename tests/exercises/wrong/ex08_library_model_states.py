"""08.1, the planner's model_states called."""
from tinymem.planner.measured.recipe import Combination
from tinymem.planner.terms.states import model_states


def model_state_bytes(shapes, precision, optimizer, offload="none"):
    return model_states(shapes, Combination("none", precision, optimizer, offload, 1))
