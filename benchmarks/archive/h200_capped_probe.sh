#!/usr/bin/env bash
# Why did a verified plan's capped run abort at compile? Runs one saved worker job (JOB, from
# a replay's results.jsonl) in fresh processes: capped with no compilation cache, uncapped
# (filling a cache), capped again with that cache, and capped with autotuning off.
#   bash benchmarks/archive/h200_capped_probe.sh JOB OUT_DIR
set -uo pipefail
job="$1" out="$2"
if [ -d .whl ] && ! python3 -c "import ortools" 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl
fi
export PYTHONPATH="/tmp/site:.${PYTHONPATH:+:$PYTHONPATH}"
mkdir -p "$out"
frac=$(python3 -c "import json,sys; print(json.load(open('$job'))['mem_fraction'])")
python3 - "$job" "$out/job-autotune0.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
j["flags"] = (j.get("flags", "") + " --xla_gpu_autotune_level=0").strip()
json.dump(j, open(sys.argv[2], "w"))
PY
run() {  # run NAME JOBFILE [env...]
  local name="$1" file="$2"
  shift 2
  local t=$SECONDS
  env "$@" python3 benchmarks/gpu_bench.py worker "$file" >"$out/$name.out" 2>"$out/$name.err"
  echo "$name rc=$? $((SECONDS - t))s" | tee -a "$out/summary.txt"
  grep -m5 -E "Check failed|RESOURCE_EXHAUSTED|Out of memory|F0000|E0000|error|Error" "$out/$name.err" \
    | cut -c1-400 | tee -a "$out/summary.txt"
  tail -c 300 "$out/$name.out" | tee -a "$out/summary.txt"; echo | tee -a "$out/summary.txt"
}
run capped-nocache "$job" XLA_PYTHON_CLIENT_MEM_FRACTION="$frac"
run uncapped-fill "$job" JAX_COMPILATION_CACHE_DIR=/tmp/jc JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS=0
run capped-cached "$job" XLA_PYTHON_CLIENT_MEM_FRACTION="$frac" JAX_COMPILATION_CACHE_DIR=/tmp/jc JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS=0
run capped-autotune0 "$out/job-autotune0.json" XLA_PYTHON_CLIENT_MEM_FRACTION="$frac"
