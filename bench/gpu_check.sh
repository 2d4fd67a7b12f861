#!/usr/bin/env bash
# The GPU path in one prepared run of at most 5 minutes (issue 18): bench/gpu_check.py does the work.
#   bench/gpu_check.sh                     on a GPU machine (writes bench/results/gpu_check.json)
#   bench/gpu_check.sh --device cpu --quick   anywhere; CI runs this form
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
[ -x "$PY" ] || PY=python3
exec "$PY" bench/gpu_check.py "$@"
