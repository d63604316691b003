"""Optimizer-state placement on the CPU test model, compiled deviceless for the H200.

    JAX_PLATFORMS=cpu python benchmarks/archive/state_offload_deviceless.py

tests/test_state.py's model (examples/llama.py, d_model 128, 4 layers under lax.scan, Adam)
planned with planner.state.plan_state at several budgets; each plan is compiled as the user applies
it (state_shardings, donation, streamed_update) by XLA:GPU for the H200 without the GPU
(planner/_src/xla/) and held to the budget. Prints the budget split, the compiled device
bytes and host argument bytes against the plan's.
"""

import dataclasses
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import jax  # noqa: E402

import planner  # noqa: E402
from examples import llama  # noqa: E402
from planner._src import trainstate as st  # noqa: E402

CFG = dataclasses.replace(llama.QUICKSTART, d_model=128, n_heads=4, d_ff=256, seq=32, batch=2)


def build(policy, placement):
    step, (p, o, b) = llama.make_adam_step(
        dataclasses.replace(CFG, remat_policy=policy),
        wrap=lambda u: st.streamed_update(u, placement, CFG.n_layers),
    )
    dev = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    osh = st.state_shardings(o, placement, dev)
    psh = jax.tree.map(lambda _: dev, p)
    bsh = jax.tree.map(lambda _: dev, b)
    jitted = jax.jit(
        step, in_shardings=(psh, osh, bsh), out_shardings=(psh, osh, dev), donate_argnums=(0, 1)
    )
    return jitted, (p, jax.device_put(o, osh), b)


def main() -> None:
    step, args = llama.make_adam_step(CFG)
    t = time.time()
    s = planner.Planner(step, *args, hardware="h200")
    print(f"jax {jax.__version__}; {s.compiler.description}; traced in {time.time() - t:.0f} s")
    for gb in (0.03, 0.022, 0.02, 0.018):
        try:
            p = planner.state.plan_state(s, gb, opt_state_argnum=1, params_argnum=0, build=build)
        except planner.PlannerError as e:
            print(f"\n{gb} GB: {type(e).__name__}: {str(e).splitlines()[0]}")
            continue
        print(f"\n{gb} GB: on the host {sorted(p.placement.on_host)}")
        print(p.summary())


if __name__ == "__main__":
    main()
