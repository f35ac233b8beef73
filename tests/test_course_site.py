"""The course site, checked as a reader would check it: built in quick mode from the notebooks
the suite's lesson runs already wrote (tests/test_lessons.py runs each lesson once, as a
notebook), then every lesson page opened in headless Chromium: its figures load, no error shows,
every prediction's answer stays folded until clicked, and the navigation reaches every lesson.
The notebooks themselves must open in Jupyter, VS Code and Colab: valid nbformat v4, the python3
kernel, outputs and figures in them.

Without the course's packages or Chromium these tests skip, saying why; under ``CI=true`` they
fail instead (a CI run that skipped them would check nothing)."""
import base64
import html
import json
import pathlib
import re
import shutil
import subprocess
import sys
import time
import urllib.parse

import pytest

import test_lessons
from conftest import CI, requires_course
from test_lessons import LESSONS, lesson_runs  # noqa: F401  (the fixture: the runs test_lessons made)

BACKGROUND_FIXTURE = "lesson_runs"
BACKGROUND_ORDER = test_lessons.BACKGROUND_ORDER
BACKGROUND_RUNS_OF = test_lessons  # no runs of its own: it reads the lessons' runs

CHROMIUM = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None)

# Written beside the pages: loads each lesson page in a frame, one after the other, and reports
# what a reader would see there, before and after clicking every folded answer.
DRIVER = """<!doctype html><html><body><script>
const pages = %s;
async function look(url) {
  const frame = document.createElement("iframe");
  frame.style.width = "1200px"; frame.style.height = "900px";
  const loaded = new Promise(done => frame.onload = done);
  frame.src = url; document.body.appendChild(frame);
  await loaded;  // the load event waits for every image
  const doc = frame.contentDocument, win = frame.contentWindow;
  const shown = e => e.checkVisibility();  // false inside a closed <details>
  const folds = [...doc.querySelectorAll("details.tinymem-measured")];
  const seen = {
    images: [...doc.images].map(i => [i.getAttribute("src"), i.naturalWidth]),
    predictions: doc.querySelectorAll(".tinymem-predict").length,
    folds: folds.length,
    openBefore: folds.filter(d => d.open).length,
    answersShownBefore: folds.filter(d => shown(d.querySelector(".tinymem-answer"))).length,
    errors: doc.querySelectorAll(".output.traceback, .output.error, div.error").length,
    traceback: doc.body.innerText.includes("Traceback (most recent call last)"),
    links: [...doc.querySelectorAll("a[href]")].map(a => a.href.split("#")[0]),
    navigation: [...doc.querySelectorAll(".sphinxsidebar a[href]")].map(a => a.href.split("#")[0]),
  };
  folds.forEach(d => d.querySelector("summary").click());
  seen.openAfter = folds.filter(d => d.open).length;
  seen.answersShownAfter = folds.filter(d => shown(d.querySelector(".tinymem-answer"))).length;
  frame.remove();
  return seen;
}
(async () => {
  const out = {};
  for (const url of pages) out[url] = await look(url);
  const pre = document.createElement("pre");
  pre.id = "probe"; pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
})();
</script></body></html>
"""


def _need_chromium():
    if CHROMIUM is None:
        message = "no Chromium on PATH: apt-get install chromium (.ci/run installs it)"
        if CI:
            pytest.fail(f"{message}; CI=true: the course site must be opened, not skipped", pytrace=False)
        pytest.skip(message)


@pytest.fixture(scope="module")
def built(lesson_runs, tmp_path_factory):  # noqa: F811  (the fixture imported above)
    """``(site folder, notebooks folder, seconds the render took)``: the site rendered by
    ``tinymem course build --notebooks`` from the lesson runs' notebooks, running nothing again."""
    notebooks = set()
    for lesson in LESSONS:
        result, _ = lesson_runs[lesson]
        assert result.returncode == 0, f"{lesson.name} failed (see test_lesson_runs_in_quick_mode)"
        assert "--notebook" in result.args, "the lessons ran as scripts: the course's packages are missing"
        notebooks.add(pathlib.Path(result.args[result.args.index("--notebook") + 1]).parent)
    assert len(notebooks) == 1, notebooks
    out = tmp_path_factory.mktemp("course")
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "tinymem", "course", "build", "--notebooks", str(*notebooks),
                           "--out", str(out)], capture_output=True, text=True, timeout=600,
                          env=test_lessons.lesson_env())
    assert done.returncode == 0, done.stdout + done.stderr
    return out / "site", notebooks.pop(), time.perf_counter() - started


@requires_course
def test_every_lesson_is_a_notebook_jupyter_opens_with_its_outputs(built):
    import nbformat

    _, notebooks, _ = built
    for lesson in LESSONS:
        notebook = nbformat.read(notebooks / f"{lesson.stem}.ipynb", as_version=4)
        nbformat.validate(notebook)  # what Jupyter, VS Code and Colab check on opening
        assert notebook.nbformat == 4 and notebook.metadata.kernelspec.name == "python3"
        outputs = [o for c in notebook.cells if c.cell_type == "code" for o in c.outputs]
        assert all(c.execution_count for c in notebook.cells if c.cell_type == "code"), lesson.name
        assert not [o for o in outputs if o.output_type == "error"], lesson.name
        figures = [o for o in outputs if "image/png" in o.get("data", {})]
        assert all(base64.b64decode(o.data["image/png"])[:8] == b"\x89PNG\r\n\x1a\n" for o in figures)
        text = "".join(o.get("text", "") + o.get("data", {}).get("text/plain", "") for o in outputs)
        assert "PREDICT: " in text and "MEASURED: " in text, lesson.name
    written = sorted(p.stem for p in notebooks.glob("*.ipynb"))
    assert written == [p.stem for p in LESSONS]  # every lesson file, none left out


@requires_course
def test_every_lesson_page_shows_its_figures_and_folds_its_answers_in_chromium(built):
    import nbformat

    _need_chromium()
    site, notebooks, seconds = built
    pages = {lesson.stem: (site / "lessons" / f"{lesson.stem}.html").as_uri() for lesson in LESSONS}
    driver = site / "probe.html"
    driver.write_text(DRIVER % json.dumps([(site / "index.html").as_uri(), *pages.values()]))
    dom = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--allow-file-access-from-files",
                          "--virtual-time-budget=60000", "--dump-dom", driver.as_uri()],
                         capture_output=True, text=True, timeout=300).stdout
    found = re.search(r'<pre id="probe">(.*?)</pre>', dom, re.S)
    assert found, "the pages were never all opened:\n" + dom[-2000:]
    seen = json.loads(html.unescape(found.group(1)))
    index = seen[(site / "index.html").as_uri()]
    assert set(pages.values()) <= set(index["links"])  # the index links every lesson
    for name, url in pages.items():
        page = seen[url]
        notebook = nbformat.read(notebooks / f"{name}.ipynb", as_version=4)
        outputs = [o for c in notebook.cells if c.cell_type == "code" for o in c.outputs]
        figures = sum("image/png" in o.get("data", {}) for o in outputs)  # and the markdown's own images:
        figures += sum(c.source.count("![") for c in notebook.cells if c.cell_type == "markdown")
        shown = [o.data.get("text/html", "") for o in outputs if o.output_type == "display_data"]
        asked = sum('class="tinymem-predict"' in h for h in shown)
        answered = sum('class="tinymem-measured"' in h for h in shown)
        assert all(width > 0 for _, width in page["images"]), (name, page["images"])  # each one loaded
        assert len(page["images"]) == figures, (name, len(page["images"]), figures)
        assert page["errors"] == 0 and not page["traceback"], name
        assert answered > 0, f"{name}: its notebook shows no folded answer"
        assert (page["predictions"], page["folds"]) == (asked, answered), (name, page, asked, answered)
        assert page["openBefore"] == 0 and page["answersShownBefore"] == 0, name  # folded on arrival
        assert page["openAfter"] == answered and page["answersShownAfter"] == answered, name  # a click opens
        assert set(pages.values()) <= set(page["navigation"]), name  # every lesson one click away
        for link in page["links"]:  # the source files and the notebook it links are in the site
            if link.startswith("file:"):
                assert pathlib.Path(urllib.parse.unquote(urllib.parse.urlparse(link).path)).exists(), (name, link)
    print(f"site rendered in {seconds:.1f} s from {len(pages)} executed notebooks")
