#!/usr/bin/env bash
# Issue 14, requirement 6 on the H200: the first budget of the 8-layer Python-loop Llama
# (d_model 4096, batch 4 x 4096, cuDNN attention), planned with its trace, in fresh
# processes on one machine: the planner's default (the anchors, probes and stock compiles
# beside each other: PlanOptions.parallel_compiles), one compile at a time (0), and the
# default with XLA's autotune results kept on disk (cache: PlanOptions.autotune_cache_dir,
# /tmp/planner-autotune, emptied first: its first run fills it, a later one reads it).
#   bash benchmarks/planning_time_on_gpu_host.sh OUT [SECONDS] [MODES]
#   (MODES default: "default 0 default 0")
# Needs ortools on the GPU machine: carry wheels in .whl/ (the device tool's README).
set -u
out="${1:?OUT}"
limit="${2:-540}"
modes="${3:-default 0 default 0}"
rm -rf /tmp/planner-autotune
mkdir -p "$out"
if [ -d .whl ] && ! python3 -c "import ortools" 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl >/dev/null 2>&1
  export PYTHONPATH="/tmp/site:.${PYTHONPATH:+:$PYTHONPATH}"
else
  export PYTHONPATH=".${PYTHONPATH:+:$PYTHONPATH}"  # keep a caller's /tmp/site (gpu_suite.py)
fi
python3 -c "import jax, ortools, os; print('jax', jax.__version__, jax.devices(), 'ortools', ortools.__version__, 'cpus', os.cpu_count())" | tee "$out/versions.txt"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader >> "$out/versions.txt"
start=$(date +%s)
cfg="layer_loop=loop,batch=4,attention_impl=cudnn,prevent_cse=true"
n=0
for mode in $modes; do
  n=$((n + 1))
  left=$((limit - ($(date +%s) - start)))
  if [ "$left" -lt 110 ]; then echo "stop: ${left}s left" | tee -a "$out/runs.txt"; break; fi
  extra=()
  case "$mode" in
    default) ;;
    cache) extra=(--autotune-cache /tmp/planner-autotune) ;;
    *) extra=(--parallel-compiles "$mode") ;;
  esac
  t0=$(date +%s.%N)
  timeout "$left" python3 benchmarks/gpu_bench.py plan --save "$out/run$n-$mode.json" \
    --hardware h200 --budgets 18.54 --config "$cfg" "${extra[@]}" > "$out/run$n-$mode.log" 2>&1
  rc=$?
  t1=$(date +%s.%N)
  echo "run $n mode $mode rc $rc process_s $(awk "BEGIN{printf \"%.1f\", $t1 - $t0}")" | tee -a "$out/runs.txt"
done
