#!/usr/bin/env bash
# The GPU check: one prepared run of at most 8 minutes (480 s) on one GPU machine (16 cores).
# Parts, in turn, each under its own time limit (seconds; each also gets 5 s to die after it):
#   10   info         tinymem info (CUDA and PyTorch start)
#   45   cuda_tests   the cuda-marked tests (pytest -n 16; the first GPU run took 40 s on 8 workers)
#   140  suite_cuda   the whole suite with TINYMEM_DEVICE=cuda but the lessons (-n 16; under 160 s on 12)
#   90   lessons      tests/test_lessons.py and tests/test_standin_runs.py with TINYMEM_DEVICE=cuda:
#                     14 lessons as subprocesses in one module fixture, which could hold a
#                     suite worker past the suite's limit, so they are a part of their own
#   60   bench        the GPU targets, each row written to $OUT/bench/data/bench_cuda.json as it
#                     finishes (a row that raises is recorded as an error row)
#   90   figures      the quick figure sweep on cuda into $OUT/figures (CPU-only families
#                     skipped, a failing family reported and the sweep going on)
# 435 s of limits + 6 x 5 s of grace = 465 s at most, then the summary (a few seconds).
# A limit can be changed with LIMIT_<PART> (LIMIT_SUITE_CUDA=200, say).
#
# Every part logs to $OUT/<part>.log (pytest with -rfEs: FAILED, ERROR and SKIPPED lines, and -v:
# one line per test, so a part killed at its limit is still counted) and appends
# "part rc seconds limit" to $OUT/rc.txt; notes (xdist missing, say) go to $OUT/notes.txt. Then
# one summary table (python -m tinymem.benchmarks.gpu_check "$OUT") into $OUT/summary.txt:
# per pytest part its counts, failed tests and skip reasons, a killed part marked as such; each
# bench row with its target and whether it was met, or its error; the figure families skipped or
# failed and the figures drawn. Needs CuPy, PyTorch with CUDA and pytest on the machine
# (pytest-xdist and pytest-timeout are used when present).
#
#   OUT=/some/dir bash scripts/gpu_check.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-gpu_out}
mkdir -p "$OUT"
: > "$OUT/rc.txt"
: > "$OUT/notes.txt"
export PYTHONUNBUFFERED=1 MPLBACKEND=Agg
PY=${PYTHON:-python3}
# The machine's CuPy and torch; tinymem itself from this checkout.
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
PYTEST=(-p no:cacheprovider -v -rfEs)
if $PY -c "import xdist" 2>/dev/null; then
    PYTEST+=(-n 16)
else
    echo "note: pytest-xdist is missing: the pytest parts run in one process (slower; expect timeouts)" | tee -a "$OUT/notes.txt"
fi
if $PY -c "import pytest_timeout" 2>/dev/null; then
    PYTEST+=(--timeout 60)
else
    echo "note: pytest-timeout is missing: a hung test holds its part until the part's limit" | tee -a "$OUT/notes.txt"
fi

# part NAME SECONDS COMMAND...: run under timeout (LIMIT_<NAME> overrides SECONDS), log to
# $OUT/NAME.log, record "NAME rc seconds limit".
part() {
    local name=$1 limit=$2 start rc override
    shift 2
    override="LIMIT_${name^^}"
    # A limit that is no whole number of seconds made timeout refuse to start the part (rc 125,
    # and the summary said "not run"): said in the notes, and the default used instead.
    if [[ ${!override:-$limit} =~ ^[1-9][0-9]*$ ]]; then
        limit=${!override:-$limit}
    else
        echo "note: $override=${!override} is no whole number of seconds: $name runs under its default limit of $limit s" | tee -a "$OUT/notes.txt"
    fi
    start=$(date +%s)
    echo "== $name (at most $limit s): $*"
    timeout --kill-after=5 "$limit" "$@" > "$OUT/$name.log" 2>&1
    rc=$?
    echo "$name $rc $(( $(date +%s) - start )) $limit" >> "$OUT/rc.txt"
    [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ] && echo "   $name stopped at its limit of $limit s (rc $rc)"
    tail -n 3 "$OUT/$name.log"
}

LESSON_TESTS=(tests/test_lessons.py tests/test_standin_runs.py)
part info 10 $PY -m tinymem info
part cuda_tests 45 $PY -m pytest "${PYTEST[@]}" -m cuda tests
part suite_cuda 140 env TINYMEM_DEVICE=cuda $PY -m pytest "${PYTEST[@]}" "${LESSON_TESTS[@]/#/--ignore=}" tests
part lessons 90 env TINYMEM_DEVICE=cuda $PY -m pytest "${PYTEST[@]}" "${LESSON_TESTS[@]}"
part bench 60 $PY -m tinymem bench targets --device cuda --out "$OUT/bench"
part figures 90 $PY -m tinymem figures --quick --device cuda --out "$OUT/figures"

echo
echo "== tinymem GPU check: $(grep -m1 -i 'cupy' "$OUT/info.log")"
$PY -m tinymem.benchmarks.gpu_check "$OUT" "$OUT/bench" | tee "$OUT/summary.txt"
