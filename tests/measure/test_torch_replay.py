"""The replay behind measure_torch_step, on hand-made blocks (no torch): the running total's peak,
the buckets there by rank and time, what counts as in flight, and the phases."""
from tinymem.measure.torch_replay import Block, label_in_flight, phase_at, replay


def test_the_peak_is_the_first_highest_total_and_its_buckets_add_up_to_it():
    weight = Block(0, 100, 0, labels=[(0, "parameter")])
    a = Block(1, 40, 10, died=30)
    b = Block(2, 40, 20, died=50, labels=[(25, "activation")])
    c = Block(3, 40, 30)  # born as a dies: births count first at one instant, so 220 at t=30
    later = Block(4, 80, 60)  # 220 again at t=60: a tie keeps the earlier moment
    peak = replay([weight], [a, b, c, later], start=0)
    assert (peak.nbytes, peak.time, peak.block) == (220, 30, c)
    assert peak.buckets["parameter"] == 100 and peak.buckets["activation"] == 40
    assert peak.buckets["temporary"] == 40 * 2 and sum(peak.buckets.values()) == 220


def test_a_step_that_only_frees_peaks_at_its_start():
    held = Block(0, 64, 0, died=5, labels=[(0, "gradient")])
    peak = replay([held], [Block(1, 8, 10, died=11)], start=0)
    assert (peak.nbytes, peak.block, peak.buckets["gradient"]) == (64, None, 64)


def test_a_bucket_is_the_highest_ranked_label_given_by_then():
    x = Block(0, 8, 0, labels=[(0, "input"), (5, "activation")])  # the batch saved by the first layer
    out = Block(1, 8, 0, labels=[(5, "activation")])
    assert [x.bucket_at(t) for t in (1, 6)] == ["input", "input"]
    assert [out.bucket_at(t) for t in (1, 6)] == ["temporary", "activation"]


def test_in_flight_is_what_a_backward_node_makes_and_hands_on():
    grad = Block(0, 8, 100, died=300, node="MmBackward0", node_end=110, labels=[(120, "gradient")])
    handed = Block(1, 8, 100, died=150, node="MmBackward0", node_end=110)
    scratch = Block(2, 8, 101, died=105, node="MmBackward0", node_end=110)
    kept = Block(3, 8, 100, died=None, node="MmBackward0", node_end=110)  # outlives backward: not a gradient
    label_in_flight([grad, handed, scratch, kept], optimizer_start=200)
    assert [grad.bucket_at(t) for t in (105, 125)] == ["in_flight", "gradient"]
    assert handed.bucket_at(120) == "in_flight"
    assert scratch.bucket_at(102) == "temporary" and kept.bucket_at(250) == "temporary"


def test_phases_follow_the_first_backward_node_and_the_optimizer_step():
    assert [phase_at(t, 10, 20) for t in (5, 10, 15, 20, 30)] == [
        "forward", "backward", "backward", "optimizer", "optimizer"]
    assert phase_at(50, None, None) == "forward" and phase_at(50, 10, None) == "backward"


def test_the_timeline_page_has_a_colour_for_every_bucket_of_a_pytorch_step():
    import re

    from tinymem.memory.page import TEMPLATE
    from tinymem.measure.torch_replay import BUCKETS

    with open(TEMPLATE, encoding="utf-8") as f:
        colours = re.search(r"const COLORS = \{(.*?)\};", f.read(), re.S).group(1)
    assert set(BUCKETS) <= set(re.findall(r"(\w+): \"#[0-9a-f]{6}\"", colours))
