"""The timeline page, opened in a real headless Chromium (Debian's ``chromium`` package): it draws
one band per bucket, labels the peak with the ledger's bytes, names the array under the pointer
and lists what is live on a click. Without Chromium the browser tests skip, saying so."""
import html
import json
import re
import shutil
import subprocess

import pytest

from tinymem.experiments.timeline_command import workload_step
from tinymem.memory import BUCKETS, page

CHROMIUM = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None)
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="no Chromium on PATH: apt-get install chromium "
                                    "(.ci/run installs it)")

# Appended to a copy of the page: waits until it has drawn, hovers over the largest array at the
# peak, clicks there, and (after 300 ms, for any script a name might have planted to run) writes
# what it saw into <pre id="probe">.
PROBE = """<script>
function probe() {
  if (document.body.dataset.drawn !== "1") { setTimeout(probe, 20); return; }
  const t = window.tinymem, peak = t.data.peak, svg = document.getElementById("chart");
  const largest = t.layoutAt(peak.x).reduce((a, b) => (b.y1 - b.y0 > a.y1 - a.y0 ? b : a));
  const [x, y] = t.screenPoint(peak.x, (largest.y0 + largest.y1) / 2);
  svg.dispatchEvent(new MouseEvent("mousemove", {clientX: x, clientY: y, bubbles: true}));
  const tip = document.getElementById("tip").textContent;
  svg.dispatchEvent(new MouseEvent("click", {clientX: x, clientY: y, bubbles: true}));
  const out = {drawnMs: t.drawnMs, tip, largest: largest.y1 - largest.y0,
               bands: [...document.querySelectorAll("polygon.band")].map(p => p.dataset.bucket),
               peakBytes: document.getElementById("peak-label").dataset.bytes,
               peakText: document.getElementById("peak-label").textContent,
               liveTitle: document.querySelector("#live h2").textContent,
               firstRow: document.querySelector("#live tr:nth-child(2)").textContent,
               cells: [...document.querySelectorAll("#live tr:nth-child(2) td")].map(c => c.textContent),
               heading: document.querySelector("h1").textContent, legend: document.getElementById("legend").textContent,
               marks: [...document.querySelectorAll("text.marklabel")].map(m => m.textContent)};
  setTimeout(() => report(out), 300);
}
function report(out) {
  Object.assign(out, {title: document.title, images: document.querySelectorAll("img").length,
                      ran: window.planted || null});
  const pre = document.createElement("pre");
  pre.id = "probe";
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
}
probe();
</script>
"""


def _chromium(*args):
    # --no-sandbox: CI containers run as root, where Chromium's sandbox refuses to start.
    return subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                           *args], capture_output=True, text=True, timeout=120)


def _probe(path, tmp_path):
    """What Chromium showed of the page at ``path`` (see PROBE)."""
    probed = tmp_path / "probed.html"
    probed.write_text(path.read_text().replace("</body>", PROBE + "</body>"))
    dom = _chromium("--virtual-time-budget=10000", "--dump-dom", probed.as_uri()).stdout
    found = re.search(r'<pre id="probe">(.*?)</pre>', dom, re.S)
    assert found, "the page never finished drawing:\n" + dom[-2000:]
    return json.loads(html.unescape(found.group(1)))


@pytest.fixture(scope="module")
def transformer_step():
    return workload_step("transformer", "64,32,32,2,2", 8)


@needs_chromium
def test_chromium_draws_the_buckets_the_peak_and_names_the_largest_array(transformer_step, tmp_path):
    t = transformer_step
    path = tmp_path / "step.html"
    t.export_page(path, "one TransformerLM step")
    seen = _probe(path, tmp_path)
    present = [b for b in BUCKETS if any(e[5][BUCKETS.index(b)] for e in t.events if e[1] != "mark")]
    assert seen["bands"] == present  # one region per bucket that held bytes in the step
    assert int(seen["peakBytes"]) == t.peak() and f"{t.peak():,d} B" in seen["peakText"]
    entries = t.peak_entries()
    biggest = max(e.nbytes for e in entries)
    owners = {(r["module"], r["op"]) for r in t.top(len(entries)) if r["bytes"] == biggest}
    assert seen["largest"] == biggest
    assert f"{biggest:,d} B" in seen["tip"]
    assert any(f"module {m}  op {op}" in seen["tip"] for m, op in owners), (seen["tip"], owners)
    assert f"{len(entries)} arrays, {t.peak():,d} B" in seen["liveTitle"]
    assert seen["firstRow"].startswith(f"{biggest:,d} B")
    assert seen["drawnMs"] < 1500  # opened and drawn (measured: 0.2-0.5 s on a shared 2-core machine)
    shot = tmp_path / "step.png"
    _chromium("--window-size=1060,640", f"--screenshot={shot}", path.as_uri())
    assert shot.stat().st_size > 10_000  # a drawn page, not a blank one


def test_a_long_window_is_drawn_thinned_with_the_peak_exact(transformer_step, monkeypatch):
    t = transformer_step
    monkeypatch.setattr(page, "MAX_POINTS", 40)
    numbers = page.data(t, "thinned")
    events = [e for e in t.events if e[1] != "mark"]
    assert len(events) > 200 and len(numbers["drawn"]) <= 41
    at_peak = [p for p in numbers["drawn"] if p[0] == numbers["peak"]["x"]]
    assert at_peak and sum(at_peak[0][1:]) == t.peak() == numbers["peak"]["bytes"]
    # Every drawn column is the highest event of its bin: no bin is drawn lower than it was.
    assert max(sum(p[1:]) for p in numbers["drawn"]) == max(sum(e[5]) for e in events)
    # The arrays are never thinned: the ones live at the peak add up to it.
    x = numbers["peak"]["x"]
    assert sum(a[1] for a in numbers["arrays"] if a[2] <= x and (a[3] < 0 or a[3] > x)) == t.peak()


def _planting(where):
    """A name that, put into the page as markup, would run a script recording ``where``."""
    return f"<img src=x onerror=\"window.planted=(window.planted||[]).concat('{where}')\">"


@needs_chromium
def test_names_holding_markup_are_shown_as_text_and_run_nothing(transformer_step, tmp_path):
    numbers = page.data(transformer_step, "one step")
    # Every string the page shows: the title, modules, ops, array descriptions, phase marks.
    title = '<!--TITLE-->"</title><script>window.planted=["title"]</script>' + _planting("title")
    module = _planting("module")
    op = "<module>"  # the function name of every top-level line of a script
    detail = "float32 (4,) @ train.py:3 (<module>)</script><script>window.planted=['json']</script><!--TITLE-->"
    mark = "<b>forward</b>" + _planting("mark")
    numbers.update(title=title, modules=[module] * len(numbers["modules"]), ops=[op] * len(numbers["ops"]),
                   details=[detail] * len(numbers["details"]), marks=[[x, mark] for x, _ in numbers["marks"]])
    path = tmp_path / "step.html"
    page.write(numbers, path)
    seen = _probe(path, tmp_path)  # it drew: no name ended the page's script early
    assert seen["ran"] is None and seen["images"] == 0
    assert seen["title"] == "tinymem memory timeline: " + title
    assert seen["heading"] == "Device memory over " + title
    assert f"module {module}  op {op}" in seen["tip"]
    assert seen["cells"][2:] == [module, op, detail]
    assert set(seen["marks"]) == {mark} and seen["legend"].split() == list(BUCKETS)
