#!/usr/bin/env bash
# benchmarks/archive/autotune_cost.py on the GPU, one process per XLA autotuner setting (issue 14,
# requirement 6). bash benchmarks/archive/autotune_cost_on_gpu_host.sh OUT
set -u
out="${1:?OUT}"
mkdir -p "$out"
export PYTHONPATH=.
if [ -d .whl ] && ! python3 -c "import ortools" 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl >/dev/null 2>&1
  export PYTHONPATH=/tmp/site:.
fi
n=0
for opts in "" "xla_gpu_autotune_level=1" "xla_gpu_autotune_level=0" \
  "xla_gpu_enable_triton_gemm=false" \
  "xla_gpu_per_fusion_autotune_cache_dir=/tmp/atc" "xla_gpu_per_fusion_autotune_cache_dir=/tmp/atc"; do
  n=$((n + 1))
  s=$(date +%s)
  timeout 200 python3 benchmarks/archive/autotune_cost.py --out "$out/c$n.json" --options "$opts" \
    > "$out/c$n.log" 2>&1
  echo "c$n [$opts] rc $? process $(( $(date +%s) - s )) s" | tee -a "$out/runs.txt"
  tail -2 "$out/c$n.log"
done
