#!/usr/bin/env bash
# The prepared device check: throughput of one run and of packs of 8/32/128, a packed
# paper slice (E1, K = 5 and 10, 3 seeds) with its tau table, and the paper preset's
# expected wall time on this device. Under 8 minutes on one GPU; on a machine without
# CUDA it runs with the smoke preset's sizes (CI does). See benchmarks/gpu_check.py.
#   bash benchmarks/gpu_check.sh [--small] [--device cuda] [--out DIR] [--slice-budget-s S]
# Output files (rates.json, the slice's runs) go to --out, else $OUT, else a temp dir.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
[ -x "$PY" ] || PY=python3
args=("$@")
if [ -n "${OUT:-}" ] && [[ " $* " != *" --out "* ]]; then args+=(--out "$OUT"); fi
exec "$PY" benchmarks/gpu_check.py "${args[@]}"
