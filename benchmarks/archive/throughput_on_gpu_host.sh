#!/usr/bin/env bash
# Issue 20's must-show in one command on the H200 (JAX 0.11.2 there; ortools from .whl/):
#   bash benchmarks/archive/throughput_on_gpu_host.sh OUT_DIR [extra throughput_h200.py arguments]
# Plans llama and moe for throughput on the device, then runs the chosen (batch, plan) and
# the estimator procedure's best (batch, stock policy) each capped at the budget; the table
# is OUT_DIR/summary.md (throughput_h200.py's docstring says what each column is).
set -uo pipefail
out="$1"; shift
if [ -d .whl ] && ! python3 -c "import ortools" 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl
fi
export PYTHONPATH="/tmp/site:.${PYTHONPATH:+:$PYTHONPATH}"
mkdir -p "$out"
python3 benchmarks/throughput_h200.py all --out "$out" "$@" 2>&1 | tee "$out/log.txt"
