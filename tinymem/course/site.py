"""The course as a static site: Sphinx with myst-nb renders the lessons' executed notebooks
(:mod:`tinymem.course.execute`) without running them again, one page per lesson, an index with
the course table of ``lessons/README.md``, and a page per source file a lesson walks through.

Why Sphinx and myst-nb: both install with pip alone (no Node.js, which Jupyter Book 2's mystmd
needs), myst-nb renders stored outputs as they are (text, HTML, PNG) and leaves a notebook
unexecuted when told to, and the scientific-Python lecture notes are built the same way.

Source links: a lesson names the files it walks through (``tinymem/distributed/ring.py``). By
default each becomes a page of the site showing that file as it was when the site was built, so
the site reads offline and the code matches the outputs; with ``source_url`` (for example
``https://github.com/OWNER/tinymem/blob/main/``) the links point there instead.

Memory: one notebook at a time is read and rewritten here; Sphinx runs in its own process.
"""
import copy
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile

import nbformat

ROOT = pathlib.Path(__file__).resolve().parents[2]
# A path of the repository as a lesson names it: tinymem/techniques/checkpoint/segments.py
MENTIONED = re.compile(r"(?<![\w/.-])((?:tinymem|lessons|tests|figures|scripts)/[\w./-]*\w)")
IMAGE = re.compile(r"!\[([^\]]*)\]\(([^)\s]+)\)")  # ![alt](path) in a lesson's markdown
TABLE_NAME = re.compile(r"`(\d\d)_([\w*]+)\.py`")

CONF = '''# Written by tinymem.course.site for one build.
project = "tinymem course"
html_title = "tinymem: memory-efficient training, measured"
extensions = ["myst_nb"]
nb_execution_mode = "off"  # the notebooks were executed once, by tinymem.course.execute
nb_output_stderr = "show"
myst_heading_anchors = 3
myst_all_links_external = True  # the links are written as the hrefs they must be (pages, notebooks, sources)
exclude_patterns = ["_extra", "_files"]
html_extra_path = ["_extra"]
html_theme = "alabaster"
html_theme_options = {"show_relbars": True, "page_width": "1100px", "sidebar_width": "260px"}
html_sidebars = {"**": ["navigation.html", "relations.html", "searchbox.html"]}
'''
# Then: the checkout's tinymem, for the transform below (Sphinx runs in a process of its own).
CONF_SETUP = '''
import sys
sys.path.insert(0, {root!r})
from tinymem.course.site import markdown_html_as_text


def setup(app):
    app.connect("doctree-read", markdown_html_as_text)
'''


def markdown_html_as_text(app, doctree):
    """Sphinx's ``doctree-read`` hook: raw HTML that MyST passed through from a lesson's markdown
    (``<script>``, ``<details open>``) is shown as the text it is, never run or rendered. Only a
    cell's outputs stay HTML: the site's own predictions and folded answers, escaped when made
    (:mod:`tinymem.course.kernel`)."""
    from docutils import nodes

    for raw in list(doctree.findall(nodes.raw)):
        in_output = any("cell_output" in a.get("classes", []) for a in _ancestors(raw))
        if raw.get("format") == "html" and not in_output:
            text = raw.astext()
            inline = isinstance(raw.parent, nodes.TextElement)
            raw.replace_self(nodes.Text(text) if inline else nodes.literal_block(text, text, language="text"))


def _ancestors(node):
    while node.parent is not None:
        node = node.parent
        yield node


class SiteError(Exception):
    """The site could not be built, or a page came out without what its notebook holds."""


def lesson_sources(notebook, root=ROOT):
    """The repository files ``notebook``'s cells name, in order of first mention (folders and
    paths that do not exist are left out)."""
    found = []
    for cell in notebook["cells"]:
        for path in MENTIONED.findall(cell["source"]):
            if path not in found and (root / path).is_file():
                found.append(path)
    return found


def _source_link(path, source_url, depth):
    """The link to ``path`` from a page ``depth`` folders below the site's root: its page (a
    text file), or its copy (a figure, a record)."""
    if source_url:
        return source_url.rstrip("/") + "/" + path
    return "../" * depth + (f"source/{path}.html" if _is_text(path) else f"files/{path}")


def _is_text(path):
    """Shown as a highlighted page (code, prose); anything else (PNG, JSON records) is copied."""
    return pathlib.PurePath(path).suffix in (".py", ".md", ".toml", ".sh", ".txt", ".cfg")


def _link_mentions(text, sources, source_url, depth):
    """``text`` with each `path` of ``sources`` in backticks made a link to that file."""
    def link(match):
        path = match.group(1)
        return f"[`{path}`]({_source_link(path, source_url, depth)})" if path in sources else match.group(0)
    return re.sub(r"(?<!\[)`([^`\n]+)`", link, text)


def _embed_images(text, images, root):
    """``text`` with each image that a lesson's markdown takes from the checkout (a path relative
    to lessons/) taken from the site's copy instead; the copies to make are added to ``images``."""
    def local(match):
        alt, target = match.groups()
        path = (root / "lessons" / target).resolve()
        if "://" in target or not path.is_relative_to(root) or not path.is_file():
            return match.group(0)
        images.append(path.relative_to(root).as_posix())
        return f"![{alt}](/_files/{images[-1]})"
    return IMAGE.sub(local, text)


def lesson_page(notebook, name, source_url=None, root=ROOT, exercises=None):
    """A copy of the executed ``notebook`` (nbformat's) for the site: its mentions of source
    files linked, its images from the checkout embedded, and under its title a line with the
    download links (the notebook; ``exercises``, the lesson's exercises notebook, if it has one)
    and the files it walks through. Returns ``(page, sources, images)``: the
    repository paths the page links and the images it shows from the checkout."""
    page, images = copy.deepcopy(notebook), []
    sources = lesson_sources(page, root)
    for cell in page["cells"]:
        if cell["cell_type"] == "markdown":
            cell["source"] = _embed_images(_link_mentions(cell["source"], sources, source_url, 1), images, root)
    files = ", ".join(f"[`{p}`]({_source_link(p, source_url, 1)})" for p in sources) or "none named"
    mode = "quick mode (small sizes)" if page["metadata"].get("tinymem", {}).get("quick") else "full mode"
    note = (f"*Run once, top to bottom, in {mode}, to make this page: every output and figure below "
            f"is from that run.* [Download the notebook](../notebooks/{name}.ipynb) (its outputs "
            f"included) to open it in Jupyter, VS Code or Colab."
            + (f" Its exercises: [the exercises notebook](../notebooks/{exercises}), which loads your "
               f"`lessons/exercises/ex{name[:2]}*.py` and runs its checks." if exercises else "")
            + "\n\nSource files this lesson walks "
            f"through: {files}")
    first = next(i for i, c in enumerate(page["cells"]) if c["cell_type"] == "markdown")
    page["cells"].insert(first + 1, nbformat.v4.new_markdown_cell(note, id="tinymem-links"))
    return page, sources, images


def index_page(readme, names):
    """The index: ``lessons/README.md`` with each lesson of its table linked to its page
    (``06_workloads_*.py`` to each page it matches), then the table of contents."""
    def link(match):
        number, stem = match.groups()
        pattern = re.compile(re.escape(f"{number}_{stem}").replace(r"\*", r"\w+") + "$")
        targets = [n for n in names if pattern.match(n)]
        return " ".join(f"[`{n}.py`](lessons/{n}.html)" for n in targets) or match.group(0)
    text = TABLE_NAME.sub(link, readme)
    toc = "\n".join(f"lessons/{n}" for n in names)
    return f"{text}\n\n```{{toctree}}\n:caption: Lessons\n:maxdepth: 1\n\n{toc}\n```\n"


def _source_page(path):
    lexers = {".py": "python", ".md": "markdown", ".toml": "toml", ".sh": "bash"}
    lexer = lexers.get(pathlib.PurePath(path).suffix, "text")
    return (f"---\norphan: true\n---\n# `{path}`\n\nAs it was when this site was built.\n\n"
            f"```{{literalinclude}} /_files/{path}\n:language: {lexer}\n:linenos:\n```\n")


def _expected(notebook):
    """How many figures and folded answers the page of ``notebook`` must show."""
    outputs = [o for c in notebook["cells"] for o in c.get("outputs", [])]
    figures = sum(1 for o in outputs if "image/png" in o.get("data", {}))
    answers = sum(1 for o in outputs if "tinymem-measured" in "".join(o.get("data", {}).get("text/html", "")))
    return figures, answers


def _read(path):
    """The lesson notebook at ``path``, valid nbformat v4 with a markdown cell (its title), or
    :class:`SiteError` naming the file (``--notebooks`` may name any folder)."""
    try:
        notebook = nbformat.read(path, as_version=4)
        nbformat.validate(notebook)
    # Not JSON or an unknown version (ValueError), or JSON of another shape, which nbformat meets
    # with AttributeError or TypeError before its schema does.
    except (ValueError, TypeError, AttributeError, nbformat.ValidationError) as exc:
        raise SiteError(f"{path} is not a notebook nbformat reads ({type(exc).__name__}: "
                        f"{str(exc).strip().splitlines()[0][:200]}): give the notebooks `tinymem course build` "
                        "wrote") from None
    if not any(c["cell_type"] == "markdown" for c in notebook["cells"]):
        raise SiteError(f"{path} has no markdown cell, so no title: it is not a lesson's notebook")
    return notebook


def _copy(path, to):
    to.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(path, to)


def _sources_of_site(src, notebooks, names, readme, source_url, root):
    """Write the Sphinx project into ``src``: its conf.py, the index, one page per notebook,
    the notebooks to download (with the exercises notebooks, ``exercises_NN.ipynb``, found
    beside them), the source pages. Returns ``{name: (figures, folded answers)}``
    that each page must show."""
    (src / "conf.py").write_text(CONF + CONF_SETUP.format(root=str(ROOT)))
    expected, sources = {}, []
    exercises = {p.name for p in pathlib.Path(notebooks).glob("exercises_[0-9][0-9].ipynb")}
    for file in exercises:
        _copy(pathlib.Path(notebooks) / file, src / "_extra" / "notebooks" / file)
    for name in names:
        notebook = _read(pathlib.Path(notebooks) / f"{name}.ipynb")
        errors = [o for c in notebook["cells"] for o in c.get("outputs", []) if o["output_type"] == "error"]
        if errors:
            raise SiteError(f"{name}.ipynb holds an error ({errors[0]['ename']}: {errors[0]['evalue']}): "
                            "its lesson failed; fix it and build again")
        _copy(pathlib.Path(notebooks) / f"{name}.ipynb", src / "_extra" / "notebooks" / f"{name}.ipynb")
        mine = f"exercises_{name[:2]}.ipynb"
        page, mentioned, images = lesson_page(notebook, name, source_url, root, mine if mine in exercises else None)
        (src / "lessons").mkdir(exist_ok=True)
        nbformat.write(page, src / "lessons" / f"{name}.ipynb")
        figures, answers = _expected(notebook)
        expected[name] = figures + len(images), answers
        sources += [p for p in mentioned if p not in sources]
        for path in images:  # Sphinx copies them into _images/ as it does the figures
            _copy(root / path, src / "_files" / path)
    (src / "index.md").write_text(index_page(pathlib.Path(readme).read_text(), names))
    for path in sources if not source_url else []:
        if _is_text(path):
            _copy(root / path, src / "_files" / path)
            (src / "source" / path).parent.mkdir(parents=True, exist_ok=True)
            (src / "source" / f"{path}.md").write_text(_source_page(path))
        else:
            _copy(root / path, src / "_extra" / "files" / path)
    return expected


def render(notebooks, out, readme=ROOT / "lessons" / "README.md", source_url=None, root=ROOT):
    """Render every ``NN_*.ipynb`` of the folder ``notebooks`` into the site folder ``out``
    (``out/index.html``, ``out/lessons/NAME.html``, ``out/notebooks/NAME.ipynb``) and return
    the lesson pages' paths. Raises :class:`SiteError` when a notebook holds an error, when
    Sphinx fails or warns, or when a page lacks a figure or an answer its notebook holds; ``out``
    is then left as it was."""
    names = sorted(p.stem for p in pathlib.Path(notebooks).glob("[0-9][0-9]_*.ipynb"))
    if not names:
        raise SiteError(f"no executed lesson notebooks (NN_*.ipynb) in {notebooks}: "
                        "run `tinymem course build` to execute the lessons first")
    out = pathlib.Path(out)
    # Sphinx writes building/html; myst-nb its copies of the outputs beside that, building/jupyter_execute.
    building = out.with_name(f".{out.name}.building")
    staging = building / "html"
    with tempfile.TemporaryDirectory(prefix="tinymem-site-") as tmp:
        expected = _sources_of_site(pathlib.Path(tmp), notebooks, names, readme, source_url, root)
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(building, ignore_errors=True)
        # -W: a warning (an image not found, a cell Sphinx cannot render) fails the build, named.
        done = subprocess.run([sys.executable, "-m", "sphinx", "-b", "html", "-q", "-E", "-W", "--keep-going",
                               tmp, str(staging)], capture_output=True, text=True, cwd=tmp)
    try:
        if done.returncode != 0:
            raise SiteError(f"Sphinx failed (exit {done.returncode}):\n{done.stderr[-4000:]}")
        _check_pages(staging, expected)
        shutil.rmtree(staging / ".doctrees", ignore_errors=True)
        _swap(staging, out)
    finally:
        shutil.rmtree(building, ignore_errors=True)
    return [out / "lessons" / f"{name}.html" for name in names]


def _swap(staging, out):
    """Put the new site ``staging`` in the place of ``out`` by two renames: the previous site is
    moved aside whole, never deleted file by file while a reader has it open, and put back if the
    new one cannot take its place."""
    aside = out.with_name(f".{out.name}.previous")
    shutil.rmtree(aside, ignore_errors=True)
    if out.exists():
        os.replace(out, aside)
    try:
        os.replace(staging, out)
    except OSError:
        if aside.exists():
            os.replace(aside, out)
        raise
    shutil.rmtree(aside, ignore_errors=True)


def _check_pages(site, expected):
    """Each lesson page exists and shows as many figures and folded answers as its notebook."""
    for name, (figures, answers) in expected.items():
        page = site / "lessons" / f"{name}.html"
        if not page.is_file():
            raise SiteError(f"Sphinx wrote no page for {name}")
        text = page.read_text()
        shown = len(re.findall(r'<img [^>]*src="[^"]*_images/', text)), text.count('class="tinymem-measured"')
        if shown != (figures, answers):
            raise SiteError(f"the page of {name} shows {shown[0]} figures and {shown[1]} folded answers; "
                            f"its notebook holds {figures} and {answers}")
