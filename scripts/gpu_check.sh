#!/usr/bin/env bash
# The GPU check, for the day a GPU is lent: the test suite on the CUDA backend, a short GPU
# figure sweep and the engine benchmark. Results go under $OUT (default ./gpu_out); a summary
# table is printed at the end. Needs CuPy on the machine (pip install .[gpu]).
#
#   OUT=/some/dir bash scripts/gpu_check.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-gpu_out}
mkdir -p "$OUT"
export TINYMEM_DEVICE=cuda PYTHONUNBUFFERED=1 MPLBACKEND=Agg
PY=${PYTHON:-python3}
# Use the machine's CuPy (and torch, if any); tinymem itself runs from this checkout.
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
$PY -c "import pytest" 2>/dev/null || $PY -m pip install -q pytest

status() { if [ "$1" -eq 0 ]; then echo ok; else echo "FAILED (rc=$1)"; fi; }

$PY -m tinymem info 2>&1 | tee "$OUT/info.txt"
timeout 300 $PY -m pytest -q -p no:cacheprovider tests 2>&1 | tee "$OUT/tests.log"; tests_rc=${PIPESTATUS[0]}
# The GPU paths of watching memory: NVML (or nvidia-smi) per process, CuPy's per-process limit.
timeout 120 $PY -m pytest -q -p no:cacheprovider -m cuda tests/memory/test_sampler.py tests/memory/test_shared.py 2>&1 | tee "$OUT/watching.log"; watch_rc=${PIPESTATUS[0]}
timeout 200 $PY -m tinymem figures --quick --device cuda --out "$OUT/figures" 2>&1 | tee "$OUT/figures.log"; fig_rc=${PIPESTATUS[0]}
timeout 100 $PY -m tinymem bench engine --quick 2>&1 | tee "$OUT/bench.log"; bench_rc=${PIPESTATUS[0]}

echo
echo "== tinymem GPU check summary ($(grep -m1 -i 'cupy' "$OUT/info.txt"))"
printf '%-10s %s\n' "tests" "$(status $tests_rc): $(tail -n 1 "$OUT/tests.log")"
printf '%-10s %s\n' "figures" "$(status $fig_rc): $(ls "$OUT/figures"/*.png 2>/dev/null | wc -l) PNGs in $OUT/figures"
printf '%-10s %s\n' "bench" "$(status $bench_rc)"
printf '%-10s %s\n' "watching" "$(status $watch_rc): $(tail -n 1 "$OUT/watching.log")"
grep -E "MLP step|tiny op" "$OUT/bench.log" || true
