import os, sys, time, hashlib, re
os.environ.setdefault("JAX_PLATFORMS","cpu")
import jax
sys.path.insert(0, ".")
from examples import llama
from planner._src.xla import targets as T, deviceless, compile as xc
t = T.resolve("h200"); print(jax.__version__, t.kind)
step, args = llama.quickstart()
def norm(txt):
    txt = re.sub(r', backend_config=\{"operation_queue_id":"0","force_earliest_schedule":false,"reification_cost":\[\],"device_type":"DEVICE_TYPE_INVALID","native_emitter_backend_config":\{"type":"NATIVE_EMITTER_TYPE_INVALID","unroll_factor":0\}\}', '', txt)
    txt = re.sub(r'fingerprint_before_lhs="[0-9a-f]*"', '', txt)
    return "\n".join(l for l in txt.splitlines() if "file_name_id" not in l)
for opts in [{}, {"xla_gpu_experimental_enable_fusion_autotuner": False}]:
    tt = time.perf_counter(); c = xc.compile_traced(t, step, deviceless.args_for(t, args), opts); dt = time.perf_counter()-tt
    txt = c.compiled.as_text()
    m = c.compiled.memory_analysis()
    print(opts, round(dt,2), m.temp_size_in_bytes, m.argument_size_in_bytes, hashlib.md5(norm(txt).encode()).hexdigest()[:8], flush=True)
