"""The one summary table of ``scripts/gpu_check.sh``: what each part of the GPU check gave.

``python -m tinymem.benchmarks.gpu_check OUT [BENCH]`` reads what the script left in ``OUT``:
each part's log (``OUT/<part>.log``), its exit status (``rc.txt``: lines ``part rc seconds
[limit]``), the script's notes (``notes.txt``) and the bench's records
(``BENCH/data/bench_cuda.json``, written after every row; ``BENCH`` defaults to ``OUT/bench``).
It prints, for each pytest part, its passed / failed / error / skipped counts, the failed tests
and every skip reason with its count; for the bench each row with its target and whether it was
met (or its error); for the figure sweep the families that failed or were skipped and the
figures drawn. A part killed by its time limit has no pytest summary line: its counts are then
read from the log's per-test lines (``-v``) and the part is marked as timed out. Nothing here
raises on a missing or half-written file: a check that went wrong still gets its summary.
"""
import collections
import json
import os
import re
import sys

PYTEST_PARTS = ("cuda_tests", "suite_cuda", "lessons")
OTHER_PARTS = ("info", "bench", "figures")
_KEYS = ("passed", "failed", "errors", "skipped", "xfailed", "xpassed")
_COUNT = re.compile(r"(\d+) (passed|failed|errors?|skipped|xfailed|xpassed|deselected)\b")
# pytest -rs: "SKIPPED [3] tests/memory/test_x.py:12: needs CuPy and a GPU"
_SKIP = re.compile(r"^SKIPPED \[(\d+)\] [^:]+(?::\d+)?: (.*)$")
# pytest -v, one line per test: "tests/a.py::t PASSED [ 3%]" or, with xdist, "[gw1] [ 3%] PASSED tests/a.py::t"
_VERBOSE = re.compile(r"(?:^|\s)(PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)(?:\s|$)")
_VERBOSE_KEY = {"PASSED": "passed", "FAILED": "failed", "ERROR": "errors", "SKIPPED": "skipped",
                "XFAIL": "xfailed", "XPASS": "xpassed"}
# pytest -rfE: "FAILED tests/a.py::t - AssertionError: ..." / "ERROR tests/a.py::t - ..." and a
# collection error "ERROR tests/a.py - ImportError: ..."; a parameter may hold spaces ("t[a b]")
_FAILED = re.compile(r"^(FAILED|ERROR) (\S+?\.py(?:::.+?)?)(?: - (.*))?$")
_KILLED = {124: "timed out", 137: "killed"}


def pytest_counts(log_text):
    """``{"passed": n, "failed": n, "errors": n, "skipped": n, ...}`` from pytest's last summary
    line in ``log_text``; with none (a run killed by its time limit), counted from the per-test
    lines of ``-v`` (all zero when there are none either)."""
    counts = dict.fromkeys(_KEYS, 0)
    lines = [line for line in log_text.splitlines() if _COUNT.search(line) and " in " in line]
    if lines:
        for n, what in _COUNT.findall(lines[-1]):
            if what != "deselected":
                counts["errors" if what.startswith("error") else what] += int(n)
        return counts
    for line in log_text.splitlines():
        match = _VERBOSE.search(line)
        if match and "::" in line and not line.startswith(("FAILED ", "ERROR ", "SKIPPED [")):
            counts[_VERBOSE_KEY[match.group(1)]] += 1
    return counts


def failed_tests(log_text):
    """``[(test id, message)]`` of the failed and erroring tests, from ``-rfE`` lines (or from
    ``-v`` lines when the run was killed before its short summary), each test once."""
    found = {}
    for line in log_text.splitlines():
        match = _FAILED.match(line.strip())
        if match:
            found.setdefault(match.group(2), match.group(3) or "")
    if not found:
        for line in log_text.splitlines():
            match = _VERBOSE.search(line)
            if match and match.group(1) in ("FAILED", "ERROR") and "::" in line:
                # "[gw1] [ 3%] FAILED tests/a.py::t[a b]" (xdist) or "tests/a.py::t[a b] FAILED [ 3%]"
                after, before = line[match.end():].strip(), line[:match.start()].strip()
                found.setdefault(after if "::" in after else before, "")
    return list(found.items())


def skip_reasons(log_text):
    """``{reason: count}`` from pytest's ``-rs`` lines, most frequent first."""
    reasons = collections.Counter()
    for line in log_text.splitlines():
        match = _SKIP.match(line.strip())
        if match:
            reasons[match.group(2).strip()] += int(match.group(1))
    return dict(reasons.most_common())


def _read(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def _statuses(out):
    """``{part: (rc, seconds, limit or None)}`` from ``rc.txt`` (malformed lines are skipped)."""
    found = {}
    for line in _read(os.path.join(out, "rc.txt")).splitlines():
        fields = line.split()
        try:
            found[fields[0]] = (int(fields[1]), float(fields[2]), float(fields[3]) if len(fields) > 3 else None)
        except (IndexError, ValueError):
            continue
    return found


def _state(rc):
    if rc is None:
        return "not run"
    return _KILLED.get(rc, "ok" if rc == 0 else "failed")


def summary_lines(out, bench=None):
    """The summary table's lines for a check that wrote into ``out`` (the bench's records in
    ``bench``, by default ``out/bench``)."""
    bench = bench or os.path.join(out, "bench")
    statuses = _statuses(out)
    lines = [line for line in _read(os.path.join(out, "notes.txt")).splitlines() if line.strip()]
    lines.append(f"{'part':<12} {'rc':>4} {'s':>6} {'passed':>7} {'failed':>7} {'errors':>7} {'skipped':>8}  state")
    reasons, failures = {}, {}
    for part in PYTEST_PARTS:
        rc, seconds, _ = statuses.get(part, (None, 0.0, None))
        log = _read(os.path.join(out, f"{part}.log"))
        c = pytest_counts(log)
        state = _state(rc) + (" (counts from the log's test lines)" if rc in _KILLED else "")
        lines.append(f"{part:<12} {rc if rc is not None else '-':>4} {seconds:>6.0f} {c['passed']:>7} "
                     f"{c['failed']:>7} {c['errors']:>7} {c['skipped']:>8}  {state}")
        reasons[part], failures[part] = skip_reasons(log), failed_tests(log)
    for part in OTHER_PARTS:
        rc, seconds, _ = statuses.get(part, (None, 0.0, None))
        lines.append(f"{part:<12} {rc if rc is not None else '-':>4} {seconds:>6.0f} {'':>33}  {_state(rc)}")
    for part, found in failures.items():
        if found:
            lines.append(f"failed, {part} ({len(found)}):")
            lines += [f"  {test}" + (f" - {message}" if message else "") for test, message in found]
    for part, found in reasons.items():
        if found:
            lines.append(f"skip reasons, {part} ({sum(found.values())} skipped):")
            lines += [f"  {n:>5}  {reason}" for reason, n in found.items()]
    lines += figure_lines(out)
    lines += bench_lines(bench)
    return lines


def figure_lines(out):
    """The figure sweep: families skipped (CPU-only) or failed, from its log, and the PNGs drawn."""
    log = _read(os.path.join(out, "figures.log"))
    skipped = re.findall(r"figure family (\S+) skipped on", log)
    failed = re.findall(r"figure family (\S+) failed:", log)
    folder = os.path.join(out, "figures")
    pngs = sorted(name for name in os.listdir(folder) if name.endswith(".png")) if os.path.isdir(folder) else []
    lines = [f"figures drawn: {len(pngs)}" + (f" ({', '.join(pngs)})" if pngs else "")]
    if skipped:
        lines.append(f"figure families skipped (CPU only): {', '.join(skipped)}")
    if failed:
        lines.append(f"figure families failed: {', '.join(failed)} (tracebacks in figures.log)")
    return lines


def bench_lines(bench):
    """One line per GPU bench row: tinymem's median, PyTorch's, the target and whether met, or
    the row's error."""
    path = os.path.join(bench, "data", "bench_cuda.json")
    if not os.path.exists(path):
        return [f"bench: no {path} (the bench finished no row)"]
    try:
        records = json.loads(_read(path))
        rows = records["rows"]
        if not isinstance(rows, list):
            raise TypeError(f"its rows are a {type(rows).__name__}, not a list")
    except (ValueError, KeyError, TypeError) as exc:
        return [f"bench: {path} is unreadable ({exc})"]
    meta = records.get("meta")
    when = meta.get("date", "?") if isinstance(meta, dict) else "?"
    lines = [f"{'bench row':<12} {'tinymem':>9} {'torch':>9} {'target':>11} {'met':>4}   (bench_cuda.json of {when})"]
    for index, row in enumerate(rows):
        try:
            lines.append(_bench_line(row))
        except (KeyError, TypeError, ValueError, IndexError) as exc:  # one malformed row, said as such
            lines.append(f"row {index}: unreadable ({type(exc).__name__}: {exc}): {json.dumps(row)[:120]}")
    return lines


def _bench_line(row):
    if "error" in row:
        return f"{row['key']:<12} error: {row['error']}"
    theirs = row["contenders"].get("torch")
    target = f"{row['band'][0]}-{row['band'][1]}" if "band" in row else f"<= {row['target']:.2f}"
    return (f"{row['key']:<12} {row['contenders']['tinymem']['median']:>9.3f} "
            f"{theirs['median'] if theirs else float('nan'):>9.3f} {target:>11} {'yes' if row['met'] else 'no':>4}")


def main(out, bench=None):
    print("\n".join(summary_lines(out, bench)))
    return 0


if __name__ == "__main__":
    if not 2 <= len(sys.argv) <= 3:
        print("usage: python -m tinymem.benchmarks.gpu_check OUT [BENCH] (the folders gpu_check.sh wrote)",
              file=sys.stderr)
        sys.exit(2)
    sys.exit(main(*sys.argv[1:]))
