"""The class's grades as a CSV and as a short HTML page, each written atomically.

Every cell of the page is HTML-escaped: a student's assertion message or folder name is text,
even when it reads ``<script>``.
"""
import csv
import html
import io

from ..measure.files import write_atomically


def write_csv(path, columns, rows):
    """One line per row, ``columns`` in order (a missing cell is empty)."""
    text = io.StringIO()
    writer = csv.DictWriter(text, columns, restval="", extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    write_atomically(path, lambda f: f.write(text.getvalue().encode("utf-8")), suffix=".csv")


def summary(columns, rows):
    """``{exercise: passed count}`` for the exercise columns (all but the first and the last)."""
    return {c: sum(str(r.get(c, "")) == "passed" for r in rows) for c in columns[1:-1]}


def write_html(path, columns, rows):
    """A page: how many students passed each exercise, then the table (verdicts coloured)."""
    e = html.escape
    passed = summary(columns, rows)
    head = "".join(f"<th>{e(c)}</th>" for c in columns)
    totals = "".join(f"<td>{passed[c]} / {len(rows)}</td>" for c in columns[1:-1])
    body = []
    for row in rows:
        cells = []
        for c in columns:
            value = str(row.get(c, ""))
            kind = value.split(":")[0] if c not in ("student", "notes") else ""
            cells.append(f'<td class="{e(kind)}">{e(value)}</td>')
        body.append("<tr>" + "".join(cells) + "</tr>")
    page = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>tinymem course grades</title>
<style>
body {{ font-family: sans-serif; margin: 2em; }} table {{ border-collapse: collapse; }}
td, th {{ border: 1px solid #ccc; padding: 0.3em 0.6em; vertical-align: top; font-size: 0.9em; }}
.passed {{ background: #e3f5e1; }} .failed {{ background: #fde8e4; }}
.error {{ background: #fff1d6; }} .timeout {{ background: #e8e4f7; }}
</style></head><body>
<h1>Grades: {len(rows)} students</h1>
<p>Passed per exercise (every check of the exercise's file passed):</p>
<table><tr><th></th>{"".join(f"<th>{e(c)}</th>" for c in columns[1:-1])}</tr><tr><td>passed</td>{totals}</tr></table>
<h2>Per student</h2>
<table><tr>{head}</tr>
{chr(10).join(body)}
</table></body></html>
"""
    write_atomically(path, lambda f: f.write(page.encode("utf-8")), suffix=".html")
