#!/usr/bin/env bash
# The GPU check: one prepared run of at most 8 minutes on one GPU machine (16 cores). In turn,
# each under its own timeout (seconds, 450 in all and 5 s of grace each; the first GPU run took 40 s for the cuda tests
# on 8 workers and under 160 s for the suite on 12):
#   15   tinymem info (CUDA and PyTorch start)
#   60   the cuda-marked tests, pytest -n 16
#   160  the whole suite with TINYMEM_DEVICE=cuda, pytest -n 16
#   70   the GPU targets bench: figures/data/bench_cuda.json and figures/bench_cuda.png
#   145  the quick figure sweep on cuda, into $OUT/figures
# then one summary table (python -m tinymem.benchmarks.gpu_check): passed / failed / errors /
# skipped per pytest run with every skip reason counted, each bench row with its target and
# whether it was met, the figures drawn. Logs go to $OUT (default ./gpu_out). Needs CuPy,
# PyTorch with CUDA, pytest and pytest-xdist on the machine.
#
#   OUT=/some/dir bash scripts/gpu_check.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-gpu_out}
mkdir -p "$OUT"
: > "$OUT/rc.txt"
export PYTHONUNBUFFERED=1 MPLBACKEND=Agg
PY=${PYTHON:-python3}
# The machine's CuPy and torch; tinymem itself from this checkout.
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
PYTEST=(-p no:cacheprovider -q -rs -n 16)
$PY -c "import pytest_timeout" 2>/dev/null && PYTEST+=(--timeout 60)

# part NAME SECONDS COMMAND...: run under timeout, log to $OUT/NAME.log, record "NAME rc seconds".
part() {
    local name=$1 limit=$2 start rc
    shift 2
    start=$(date +%s)
    echo "== $name (at most $limit s): $*"
    timeout --kill-after=5 "$limit" "$@" > "$OUT/$name.log" 2>&1
    rc=$?
    echo "$name $rc $(( $(date +%s) - start ))" >> "$OUT/rc.txt"
    tail -n 3 "$OUT/$name.log"
}

part info 15 $PY -m tinymem info
part cuda_tests 60 $PY -m pytest "${PYTEST[@]}" -m cuda tests
part suite_cuda 160 env TINYMEM_DEVICE=cuda $PY -m pytest "${PYTEST[@]}" tests
part bench 70 $PY -m tinymem bench targets --device cuda --out figures
part figures 145 $PY -m tinymem figures --quick --device cuda --out "$OUT/figures"

echo
echo "== tinymem GPU check: $(grep -m1 -i 'cupy' "$OUT/info.log")"
$PY -m tinymem.benchmarks.gpu_check "$OUT" figures | tee "$OUT/summary.txt"
