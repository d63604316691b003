#!/usr/bin/env bash
# The program fuzzer (benchmarks/fuzz_programs.py) on the GPU machine's CPU cores: K processes
# (JAX_PLATFORMS=cpu, XLA:CPU, exactly as on a laptop), each taking every K-th seed of the
# range, one JSONL of records at the end. Needs ortools as wheels in .whl/ where the image
# lacks it (the device tool's README).
#   bash benchmarks/fuzz_on_gpu_host.sh OUT_DIR START N [K] [DEADLINE_HH:MM]
set -uo pipefail
out="$1" start="$2" n="$3" k="${4:-16}" deadline="${5:-}"
if [ -d .whl ] && ! python3 -c "import ortools" 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl
fi
export PYTHONPATH="/tmp/site:.${PYTHONPATH:+:$PYTHONPATH}"
export JAX_PLATFORMS=cpu
mkdir -p "$out/parts"
python3 -c "import jax, jaxlib, ortools, networkx, sys; print('python', sys.version.split()[0], 'jax', jax.__version__, 'jaxlib', jaxlib.__version__, 'ortools', ortools.__version__, 'networkx', networkx.__version__)" >"$out/versions.txt" 2>&1
nproc >>"$out/versions.txt"
t0=$(date +%s)
for j in $(seq 0 $((k - 1))); do
  timeout "${FUZZ_LIMIT_S:-530}" python3 benchmarks/fuzz_programs.py --start "$start" --n "$n" --every "$k" --offset "$j" \
    ${deadline:+--deadline "$deadline"} --out "$out/parts/p$j.md" >"$out/parts/p$j.log" 2>&1 &
done
wait
echo "wall_s $(( $(date +%s) - t0 ))" >>"$out/versions.txt"
cat "$out"/parts/p*.jsonl >"$out/records.jsonl"
tail -n 3 "$out"/parts/p*.log >"$out/tails.txt"
