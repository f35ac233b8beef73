"""The README's screenshot of the timeline page: figures/memory_timeline.html opened in headless
Chromium, the pointer on the largest array at the peak, saved as figures/memory_timeline_page.png.

    python scripts/timeline_screenshot.py      (after tinymem figures --only memory_timeline)
"""
import pathlib
import shutil
import subprocess
import sys
import tempfile

FIGURES = pathlib.Path(__file__).resolve().parents[1] / "figures"
HOVER = """<script>
(function hover() {
  if (document.body.dataset.drawn !== "1") { setTimeout(hover, 20); return; }
  const t = window.tinymem, x = t.data.peak.x, svg = document.getElementById("chart");
  const big = t.layoutAt(x).reduce((a, b) => (b.y1 - b.y0 > a.y1 - a.y0 ? b : a));
  const [cx, cy] = t.screenPoint(x, (big.y0 + big.y1) / 2);
  svg.dispatchEvent(new MouseEvent("mousemove", {clientX: cx, clientY: cy, bubbles: true}));
})();
</script>
"""


def main():
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        sys.exit("no chromium on PATH: apt-get install chromium")
    page = (FIGURES / "memory_timeline.html").read_text()
    with tempfile.TemporaryDirectory() as folder:
        hovered = pathlib.Path(folder) / "page.html"
        hovered.write_text(page.replace("</body>", HOVER + "</body>"))
        out = FIGURES / "memory_timeline_page.png"
        subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                        "--window-size=1040,660", "--virtual-time-budget=5000", f"--screenshot={out}",
                        hovered.as_uri()], check=True, capture_output=True, timeout=120)
    print("wrote", out)


if __name__ == "__main__":
    main()
