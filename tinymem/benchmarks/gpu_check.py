"""The one summary table of ``scripts/gpu_check.sh``: what each part of the GPU check gave.

``python -m tinymem.benchmarks.gpu_check OUT`` reads what the script left in ``OUT`` (each
part's log and exit status, ``rc.txt``: lines ``part rc seconds``) and the bench's records
(``figures/data/bench_cuda.json``) and prints, for each pytest run, its passed / failed / error /
skipped counts and every skip reason with its count, for the bench each row with its target and
whether it was met, and for the figure sweep its exit status and the figures it drew.
"""
import collections
import os
import re
import sys

from ..measure.records import read_records

_COUNT = re.compile(r"(\d+) (passed|failed|errors?|skipped|xfailed|xpassed|deselected)\b")
# pytest -rs: "SKIPPED [3] tests/memory/test_x.py:12: needs CuPy and a GPU"
_SKIP = re.compile(r"^SKIPPED \[(\d+)\] [^:]+(?::\d+)?: (.*)$")


def pytest_counts(log_text):
    """``{"passed": n, "failed": n, "errors": n, "skipped": n, ...}`` from pytest's last summary
    line in ``log_text`` (all zero when it never printed one: a run killed by its timeout)."""
    counts = dict.fromkeys(("passed", "failed", "errors", "skipped", "xfailed", "xpassed"), 0)
    lines = [line for line in log_text.splitlines() if _COUNT.search(line) and " in " in line]
    if lines:
        for n, what in _COUNT.findall(lines[-1]):
            counts["errors" if what.startswith("error") else what] = int(n)
    return counts


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
    """``{part: (rc, seconds)}`` from ``rc.txt``."""
    found = {}
    for line in _read(os.path.join(out, "rc.txt")).splitlines():
        part, rc, seconds = line.split()
        found[part] = (int(rc), float(seconds))
    return found


def summary_lines(out, figures="figures"):
    """The summary table's lines for a check that wrote into ``out``."""
    statuses = _statuses(out)
    lines = [f"{'part':<14} {'rc':>4} {'s':>6} {'passed':>7} {'failed':>7} {'errors':>7} {'skipped':>8}"]
    reasons = {}
    for part in ("cuda_tests", "suite_cuda"):
        rc, seconds = statuses.get(part, (None, 0.0))
        log = _read(os.path.join(out, f"{part}.log"))
        c = pytest_counts(log)
        timed_out = " (timed out)" if rc in (124, 137) else ""
        lines.append(f"{part:<14} {rc if rc is not None else '-':>4} {seconds:>6.0f} {c['passed']:>7} "
                     f"{c['failed']:>7} {c['errors']:>7} {c['skipped']:>8}{timed_out}")
        reasons[part] = skip_reasons(log)
    for part in ("bench", "figures"):
        rc, seconds = statuses.get(part, (None, 0.0))
        lines.append(f"{part:<14} {rc if rc is not None else '-':>4} {seconds:>6.0f}")
    for part, found in reasons.items():
        if found:
            lines.append(f"skip reasons, {part} ({sum(found.values())} skipped):")
            lines += [f"  {n:>5}  {reason}" for reason, n in found.items()]
    pngs = sorted(name for name in os.listdir(os.path.join(out, "figures")) if name.endswith(".png")) \
        if os.path.isdir(os.path.join(out, "figures")) else []
    lines.append(f"figures drawn: {len(pngs)}" + (f" ({', '.join(pngs)})" if pngs else ""))
    lines += bench_lines(figures)
    return lines


def bench_lines(figures="figures"):
    """One line per GPU bench row: tinymem's median, PyTorch's, the target and whether met."""
    if not os.path.exists(os.path.join(figures, "data", "bench_cuda.json")):
        return ["bench: no figures/data/bench_cuda.json (the bench did not finish)"]
    records = read_records(figures, "bench_cuda")
    when = records.get("meta", {}).get("date", "?")
    lines = [f"{'bench row':<12} {'tinymem':>9} {'torch':>9} {'target':>11} {'met':>4}   (bench_cuda.json of {when})"]
    for row in records["rows"]:
        theirs = row["contenders"].get("torch")
        target = f"{row['band'][0]}-{row['band'][1]}" if "band" in row else f"<= {row['target']:.2f}"
        lines.append(f"{row['key']:<12} {row['contenders']['tinymem']['median']:>9.3f} "
                     f"{theirs['median'] if theirs else float('nan'):>9.3f} {target:>11} {'yes' if row['met'] else 'no':>4}")
    return lines


def main(out, figures="figures"):
    print("\n".join(summary_lines(out, figures)))
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
