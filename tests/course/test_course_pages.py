"""The site rendered from executed notebooks (tinymem/course/site.py): one page per notebook,
the index's course table linked to the pages, source files linked, and a refused render writes
nothing. Notebooks are made here with nbformat: no kernel runs."""
import base64
import io
import pathlib
import re

import pytest

from conftest import requires_course

ROOT = pathlib.Path(__file__).resolve().parents[2]
README = """# A course

| # | lesson | time |
| --- | --- | --- |
| 0 | `00_first.py` | 5 min |
| 1 | `01_*.py` | 5 min |
"""


def _png():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(2, 1))
    ax.plot([0, 1], [1, 0])
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    plt.close(fig)
    return base64.b64encode(buffer.getvalue()).decode()


def _notebook(title, error=False):
    import nbformat
    from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

    from tinymem.course import kernel

    predict = new_output("display_data", {"text/plain": "\nPREDICT: how many?",
                                          "text/html": '<div class="tinymem-predict">how many?</div>'})
    answer = new_output("display_data", {"text/plain": "MEASURED: 3", "text/html":
                                         f'<details class="tinymem-measured" style="{kernel.ANSWER_STYLE}">'
                                         '<summary>MEASURED</summary><div class="tinymem-answer">3</div></details>'})
    outputs = [new_output("stream", name="stdout", text="hello\n"), predict, answer,
               new_output("display_data", {"image/png": _png(), "text/plain": "<Figure>"})]
    if error:
        outputs.append(new_output("error", ename="AssertionError", evalue="the lesson says 'x'", traceback=[]))
    setup = new_code_cell("import hidden_setup", execution_count=1, metadata={"tags": ["remove-cell"]})
    notebook = new_notebook(cells=[setup, new_markdown_cell(f"# {title}\n\nIt walks through `tinymem/plots.py` "
                                                     "and `tinymem/no_such_file.py`.\n\n"
                                                     "![depth](../figures/checkpoint_depth.png)"),
                                   new_code_cell("print('hello')", execution_count=2, outputs=outputs)],
                            metadata={"kernelspec": {"name": "python3", "display_name": "Python 3"},
                                      "language_info": {"name": "python"}, "tinymem": {"quick": True}})
    nbformat.validate(notebook)
    return notebook


def _write(folder, notebooks):
    import nbformat
    folder.mkdir(exist_ok=True)
    for name, notebook in notebooks.items():
        nbformat.write(notebook, folder / f"{name}.ipynb")
    (folder / "README.md").write_text(README)
    return folder


@requires_course
def test_each_notebook_becomes_a_page_linked_from_the_index_with_its_sources(tmp_path):
    from tinymem.course import site

    notebooks = _write(tmp_path / "nb", {"00_first": _notebook("Lesson 0"), "01_second": _notebook("Lesson 1")})
    from tinymem.course.build import write_exercise_notebooks
    written = write_exercise_notebooks(notebooks)
    assert "exercises_00.ipynb" in [p.name for p in written]  # lesson 0 has exercises (lessons/exercises/ex00.py)
    (notebooks / "exercises_01.ipynb").unlink(missing_ok=True)  # here the second lesson has none
    pages = site.render(notebooks, tmp_path / "site", readme=notebooks / "README.md")
    assert [p.name for p in pages] == ["00_first.html", "01_second.html"]
    index = (tmp_path / "site" / "index.html").read_text()
    assert 'href="lessons/00_first.html"' in index and 'href="lessons/01_second.html"' in index  # 01_*.py too
    page = pages[0].read_text()
    assert 'href="../source/tinymem/plots.py.html"' in page  # the mention, and the list under the title
    assert "no_such_file.py" in page and "no_such_file.py.html" not in page  # a path that is not a file
    assert (tmp_path / "site" / "source" / "tinymem" / "plots.py.html").is_file()
    assert 'href="../notebooks/00_first.ipynb"' in page
    assert 'href="../notebooks/exercises_00.ipynb"' in page and "exercises_" not in pages[1].read_text()
    assert (tmp_path / "site" / "notebooks" / "exercises_00.ipynb").is_file()
    assert (tmp_path / "site" / "notebooks" / "00_first.ipynb").is_file()
    assert page.count('class="tinymem-measured"') == 1 and "<details open" not in page
    assert len(re.findall(r'<img [^>]*src="../_images/', page)) == 2  # the output's and the markdown's
    assert "hidden_setup" not in page  # a cell tagged remove-cell (the notebook's setup) is left off


@requires_course
def test_a_notebook_that_holds_an_error_or_a_missing_image_is_refused_and_no_site_is_written(tmp_path):
    from tinymem.course import site

    notebooks = _write(tmp_path / "nb", {"00_first": _notebook("Lesson 0"), "01_second": _notebook("1", error=True)})
    with pytest.raises(site.SiteError, match=r"01_second.ipynb holds an error \(AssertionError: the lesson says"):
        site.render(notebooks, tmp_path / "site", readme=notebooks / "README.md")
    assert not (tmp_path / "site").exists() and not list(tmp_path.glob(".site*"))
    broken = _notebook("Lesson 1")
    broken.cells[1].source += "\n\n![a figure that is not there](missing_figure.png)"
    _write(notebooks, {"01_second": broken})
    with pytest.raises(site.SiteError, match=r"Sphinx failed(.|\n)*missing_figure.png"):
        site.render(notebooks, tmp_path / "site", readme=notebooks / "README.md")
    assert not (tmp_path / "site").exists() and not list(tmp_path.glob(".site*"))


@requires_course
def test_with_a_source_url_the_sources_link_there():
    from tinymem.course import site

    url = "https://example.org/tinymem/blob/main/"
    page, sources, images = site.lesson_page(_notebook("Lesson 0"), "00_first", url)
    assert sources == ["tinymem/plots.py"] and images == ["figures/checkpoint_depth.png"]
    assert "![depth](/_files/figures/checkpoint_depth.png)" in page.cells[1].source
    assert "[`tinymem/plots.py`](https://example.org/tinymem/blob/main/tinymem/plots.py)" in page.cells[1].source
    assert "(../notebooks/00_first.ipynb)" in page.cells[2].source


def test_build_refuses_an_unknown_lesson_number_and_writes_nothing(tmp_path, capsys):
    from tinymem import cli

    assert cli.main(["course", "build", "--only", "77", "--out", str(tmp_path / "site")]) == 2
    err = capsys.readouterr().err
    assert "--only 77: no lesson has that number" in err and "00, 01" in err
    assert not (tmp_path / "site").exists()
    assert cli.main(["course", "build", "--notebooks", str(tmp_path / "none"), "--out", str(tmp_path / "s")]) == 2
    assert "is not a folder of executed notebooks" in capsys.readouterr().err and not (tmp_path / "s").exists()


@requires_course
def test_a_folder_of_malformed_or_foreign_notebooks_is_refused_by_name(tmp_path):
    import nbformat

    from tinymem.course import site

    for name, text in [("00_not_json", "{not json"), ("00_not_a_notebook", '{"cells": 3}'),
                       ("00_a_list", "[]"), ("00_no_cells", '{"nbformat": 4}')]:
        folder = _write(tmp_path / name, {})
        (folder / f"{name}.ipynb").write_text(text)
        with pytest.raises(site.SiteError, match=rf"{name}.ipynb is not a notebook nbformat reads"):
            site.render(folder, tmp_path / "site", readme=folder / "README.md")
    foreign = _notebook("Lesson 0")
    foreign.cells = [c for c in foreign.cells if c.cell_type == "code"]
    nbformat.validate(foreign)
    folder = _write(tmp_path / "foreign", {"05_other": foreign})
    with pytest.raises(site.SiteError, match=r"05_other.ipynb has no markdown cell"):
        site.render(folder, tmp_path / "site", readme=folder / "README.md")
    assert not (tmp_path / "site").exists() and not list(tmp_path.glob(".site*"))


@requires_course
def test_html_in_a_lessons_markdown_is_shown_as_text_and_runs_nothing(tmp_path):
    from tinymem.course import site

    notebook = _notebook("Lesson 0")
    notebook.cells[1].source += ('\n\nA <script>alert("md")</script> tag, <img src=x onerror="alert(2)">.'
                                 "\n\n<details open><summary>raw</summary>inside</details>\n")
    notebooks = _write(tmp_path / "nb", {"00_first": notebook})
    page = site.render(notebooks, tmp_path / "site", readme=notebooks / "README.md")[0].read_text()
    assert "<script>alert" not in page and "onerror=" not in page.replace("onerror=&quot;", "")
    assert "&lt;script&gt;alert" in page and "&lt;details open&gt;" in page and "<details open" not in page
    assert page.count('<details class="tinymem-measured"') == 1  # the output's own HTML is kept


@requires_course
def test_a_site_that_cannot_take_the_previous_ones_place_leaves_it_whole(tmp_path, monkeypatch):
    from tinymem.course import site

    notebooks = _write(tmp_path / "nb", {"00_first": _notebook("Lesson 0")})
    site.render(notebooks, tmp_path / "site", readme=notebooks / "README.md")
    before = sorted(p.relative_to(tmp_path) for p in (tmp_path / "site").rglob("*"))
    replace = site.os.replace

    def fails_into_place(source, target):
        if ".building" in str(source):  # the new site, into place
            raise OSError(28, "No space left on device")
        return replace(source, target)

    monkeypatch.setattr(site.os, "replace", fails_into_place)
    with pytest.raises(OSError, match="No space left"):
        site.render(notebooks, tmp_path / "site", readme=notebooks / "README.md")
    assert sorted(p.relative_to(tmp_path) for p in (tmp_path / "site").rglob("*")) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["nb", "site"]  # no staging, aside or jupyter_execute/
