#!/usr/bin/env bash
# The zoo table (benchmarks/zoo.py) on a GPU machine, every model in its own process at once:
# once planned for the H200 on the GPU itself (XLA:GPU on the device: exact figures), once on
# the host's XLA:CPU (hardware cpu, as tests/test_zoo.py). Needs ortools (and penzai,
# ordered-set) as wheels in .whl/ where the image lacks them.
#   bash benchmarks/zoo_on_gpu_host.sh OUT_DIR [SECONDS]
set -uo pipefail
out="$1" limit="${2:-500}"
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl
fi
export PYTHONPATH="/tmp/site:.${PYTHONPATH:+:$PYTHONPATH}"
export XLA_PYTHON_CLIENT_PREALLOCATE=false  # many processes share the GPU
mkdir -p "$out/gpu" "$out/cpu"
python3 -c "import jax, flax, equinox, optax, penzai; print('jax', jax.__version__, 'flax', flax.__version__, 'equinox', equinox.__version__, 'optax', optax.__version__, 'penzai', penzai.__version__)" >"$out/versions.txt" 2>&1
models=$(python3 -c "from tests.zoo import MODELS; print(' '.join(MODELS))")
for m in $models; do
  JAX_PLATFORMS=cuda timeout "$limit" python3 benchmarks/zoo.py --hardware h200 --models "$m" \
    >"$out/gpu/$m.md" 2>"$out/gpu/$m.err" &
  JAX_PLATFORMS=cpu timeout "$limit" python3 benchmarks/zoo.py --hardware cpu --models "$m" \
    >"$out/cpu/$m.md" 2>"$out/cpu/$m.err" &
done
wait
for d in gpu cpu; do
  for m in $models; do
    grep -h "^| $m |" "$out/$d/$m.md" | sort -u || echo "| $m | no result: $(tail -c 200 "$out/$d/$m.err" | tr '\n' ' ') |"
  done >"$out/$d-table.md"
done
wc -l "$out"/*-table.md
