#!/usr/bin/env bash
# Issue 14 on the H200: plan a model ON the GPU (its own XLA:GPU compiles every figure) at 4
# budgets from just above full remat to save-everything, then run every plan capped at its
# budget and the stock policies side by side, each in a fresh process.
#   bash benchmarks/h200_zoo.sh NAME CONFIG OUT_DIR [SECONDS]
# CONFIG: key=value overrides of gpu_bench.py's BENCH (examples/llama.py LlamaConfig fields).
# Needs ortools on the GPU machine: carry wheels in .whl/ (the device tool's README).
set -euo pipefail
name="$1" config="$2" out="$3" total="${4:-560}"
start=$SECONDS
if [ -d .whl ] && ! python3 -c "import ortools" 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl
fi
export PYTHONPATH="/tmp/site:.${PYTHONPATH:+:$PYTHONPATH}"
mkdir -p "$out"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader >"$out/gpu.txt" || true
python3 -c "import jax, ortools; print('jax', jax.__version__, jax.devices(), 'ortools', ortools.__version__)" | tee "$out/versions.txt"
python3 benchmarks/gpu_bench.py plan --save "$out/plans-$name.json" --hardware h200 \
  --config "$config" 2>&1 | tail -20 | tee "$out/plan-$name.log"
left=$((total - (SECONDS - start)))
python3 benchmarks/gpu_bench.py replay --plans "$out/plans-$name.json" --out "$out/$name" \
  --budget-s "$left" --steps 10 2>&1 | tail -40 | tee "$out/replay-$name.log"
