"""A reader following one value through the planner comes back to a room at most 15 times.

``scripts/rooms.py`` follows the GPU count of ``fits.plan_arch`` and the stack of
``exactness.compare`` into each function that receives them (or a field of them, or an object
built on them) and counts the returns to a module already left. Before the door and the
folders (main at 353218f): 28 and 27 returns.
"""
import importlib.util
import pathlib

import pytest

SCRIPT = pathlib.Path(__file__).resolve().parents[2] / "scripts" / "rooms.py"


def rooms():
    spec = importlib.util.spec_from_file_location("rooms", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("case", [0, 1], ids=["plan_arch's GPU count", "compare's stack"])
def test_a_value_returns_to_a_room_at_most_15_times(case):
    tracer = rooms()
    label, call, value = tracer.cases()[case]
    path = tracer.path_of(call, value)
    entered, returns = tracer.returns(path)
    assert returns <= 15, f"{label}: {returns} returns over {entered} rooms: " + " > ".join(path)
    assert entered >= 5  # the value was followed, not lost at the first call


def test_the_tracer_follows_fields_and_carriers():
    tracer = rooms()
    count = tracer.Marked(7)
    carriers = tracer.Carriers(count)
    assert carriers.carries(count) and not carriers.carries(7)  # a cached 7 is not the value
    holder = (1, count)
    assert carriers.carries(holder) and carriers.carries([holder])  # one level deep, then held on
    assert tracer.returns(["a", "b", "a", "c", "b"]) == (3, 2)
