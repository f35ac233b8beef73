"""The figures' shared helpers: the footer carries the failed claims in red, and the layout check
finds what a reader trips over (small or clipped text, overprinted labels, a legend on data)."""
import warnings

import matplotlib.colors
import pytest

from tinymem import plots


def _texts(fig):
    return {t.get_text(): t for t in fig.texts}


def test_footer_has_note_failed_claims_in_red_and_the_machine_line():
    records = {"meta": {"machine": "box", "device": "cpu", "tinymem": "9.9", "date": "2030-01-01", "quick": True},
               "claims": [{"text": "fast enough", "value": 0.5, "holds": False},
                          {"text": "small enough", "value": 0.1, "holds": True},
                          {"text": "full only", "value": 3.0, "holds": None}]}
    fig, ax = plots.new_figure()
    height = fig.get_size_inches()[1]
    plots.stamp(fig, records, note="What to see: a line.")
    texts = _texts(fig)
    red = [t for t in texts if t.startswith("CLAIM DOES NOT HOLD")]
    assert red == ["CLAIM DOES NOT HOLD: fast enough (measured 0.5)"]
    assert matplotlib.colors.same_color(texts[red[0]].get_color(), "#d62728")
    assert "What to see: a line." in texts
    machine = [t for t in texts if t.startswith("box")][0]
    assert "simulated device (CPU)" in machine and "tinymem 9.9" in machine and "2030-01-01" in machine
    assert "QUICK MODE" in machine
    assert fig.get_size_inches()[1] > height  # the footer adds room instead of squeezing the axes
    assert plots.device_label({"meta": {"device": "cuda"}}) == "GPU"


def test_a_legend_outside_the_axes_covers_no_clipped_data():
    # A line running past the x limit is clipped at the axes' edge: a legend beside the axes
    # covers nothing drawn (the watching figure's panels were reported in a quick run).
    fig, ax = plots.new_figure(width=6.0)
    ax.plot([0, 5, 20], [0, 1, 1], label="runs past the limit")  # flat at the top, under the legend
    ax.set_xlim(0, 5)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0))
    assert not any("covers data" in p for p in plots.layout_problems(fig))
    ax.legend(loc="center")  # over the axes and the rising line: still found
    assert any("covers data" in p for p in plots.layout_problems(fig))


def test_layout_check_finds_a_legend_on_the_data_small_text_and_overprinting():
    fig, ax = plots.new_figure()
    ax.plot([0, 1], [0, 1], label="the diagonal")
    ax.legend(loc="center")
    ax.text(0.2, 0.8, "tiny", fontsize=5)
    ax.text(0.6, 0.1, "one label")
    ax.text(0.6, 0.1, "another label")
    problems = " | ".join(plots.layout_problems(fig))
    assert "covers data" in problems and "'tiny' is 5 pt" in problems
    assert "overlaps" in problems and "one label" in problems


def test_clean_figure_has_no_problems_and_save_warns_otherwise(tmp_path):
    fig, ax = plots.new_figure()
    ax.plot([0, 1], [0, 1], label="the diagonal")
    ax.set(xlabel="x (s)", ylabel="y (MiB)", title="clean")
    ax.legend(loc="upper left")
    assert plots.layout_problems(fig) == []
    plots.save(fig, {}, str(tmp_path), "clean.png")
    assert (tmp_path / "clean.png").stat().st_size > 1000 and not list(tmp_path.glob("*.tmp*"))
    fig, ax = plots.new_figure()
    ax.plot([0, 1], [0, 1], label="the diagonal")
    ax.legend(loc="center")
    with pytest.warns(plots.LayoutWarning, match="bad.png: the legend"):
        plots.save(fig, {}, str(tmp_path), "bad.png")


def test_slanted_tick_labels_side_by_side_do_not_count_as_overlapping():
    fig, ax = plots.new_figure(width=4)
    ax.bar(range(6), [1] * 6)
    ax.set_xticks(range(6), [f"+ optimizer state on host {i}" for i in range(6)], rotation=30, ha="right")
    fig.tight_layout()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert plots.layout_problems(fig) == []
    # their upright boxes do overlap: only the slant keeps them apart
    boxes = [t.get_window_extent() for t in ax.get_xticklabels()]
    assert boxes[0].overlaps(boxes[1])


def test_label_points_moves_a_label_off_the_data_and_off_other_labels(tmp_path):
    """Two points at one place and a line through the first offset's spot: the labels end up
    apart and off the line, placed after the layout (save), so the check finds nothing."""
    records = {"meta": {"machine": "box", "device": "cpu", "date": "2030-01-01"}}
    fig, ax = plots.new_figure()
    ax.plot([0, 1], [0, 1], "o")
    ax.plot([0.12, 0.3], [0.47, 0.47], "-")  # passes just below and right of (0.1, 0.5)
    ax.plot([0.1], [0.5], "s")
    plots.label_points(ax, [("first", (0.1, 0.5), "k"), ("second", (0.1, 0.5), "k")])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", plots.LayoutWarning)
        plots.save(fig, records, tmp_path, "labels.png")
    assert [str(w.message) for w in caught if issubclass(w.category, plots.LayoutWarning)] == []
    placed = {t.get_text(): t.xyann for t in ax.texts}
    assert set(placed) == {"first", "second"} and placed["first"] != placed["second"]
    assert placed["first"] != plots.LABEL_OFFSETS[0]  # the line took the first spot


def test_label_points_with_no_free_place_keeps_the_first_and_the_check_says_so(tmp_path):
    records = {"meta": {"machine": "box", "device": "cpu", "date": "2030-01-01"}}
    fig, ax = plots.new_figure(width=1.6, height=1.2)
    ax.plot(range(50), [i % 7 for i in range(50)], "o-")  # data everywhere
    plots.label_points(ax, [("a long label that fits nowhere", (25, 3), "k")])
    with pytest.warns(plots.LayoutWarning):
        plots.save(fig, records, tmp_path, "crowded.png")
    assert ax.texts[0].xyann == plots.LABEL_OFFSETS[0]
