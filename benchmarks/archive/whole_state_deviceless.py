"""Optimizer state brought in whole (plan.apply's "whole" mode), compiled deviceless for the
H200: how much of the moved state the compiled step's device bytes lose.

    JAX_PLATFORMS=cpu python benchmarks/archive/whole_state_deviceless.py

tests/test_state.py's model (examples/llama.py, d_model 128, Adam, donated) with none, the
``nu`` moments, or every moment in pinned host memory, applied as ``plan.apply`` applies a
placement whose optimizer it cannot reach (emit/apply_state.py); prints memory_analysis()'s
device, temp, host argument and host output bytes. Results:
benchmarks/results/whole-state-deviceless-2026-12-06.md.
"""

import dataclasses
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import jax  # noqa: E402

from examples import llama  # noqa: E402
from planner._src.emit.apply import binding  # noqa: E402
from planner._src.emit.apply_state import apply_state  # noqa: E402
from planner._src.trainstate import StateApply, check_compiled, detect, placement_of  # noqa: E402
from planner._src.trainstate.records import leaves_of  # noqa: E402
from planner._src.xla import compile as xla_compile  # noqa: E402
from planner._src.xla import (
    deviceless,  # noqa: E402
    targets,  # noqa: E402
)

CFG = dataclasses.replace(llama.QUICKSTART, d_model=128, n_heads=4, d_ff=256, seq=32, batch=2)


def main() -> None:
    target = targets.resolve("h200", num_devices=1)
    if target.kind != "deviceless":
        sys.exit(f"no deviceless XLA:GPU here: {target.description}")
    step, args = llama.make_adam_step(CFG)
    sel = detect(args)
    pairs = sel.opt_leaves(args)
    leaves = leaves_of(pairs, layers=1)
    full_remat = binding({}, jax.checkpoint_policies.nothing_saveable)
    placed_args = deviceless.args_for(target, args)
    cases = {
        "none": frozenset(),
        "nu": frozenset(p for p, x in pairs if x.ndim >= 2 and ".nu" in p),
        "all": frozenset(p for p, x in pairs if x.ndim >= 1),
    }
    for name, on_host in cases.items():
        if on_host:
            applied = apply_state(
                step,
                full_remat,
                StateApply(
                    opt_path=sel.opt_path,
                    params_path=sel.params_path,
                    container=None,
                    on_host=on_host,
                    layers=1,
                    mode="whole",
                ),
            )
            placed = applied.placed(placed_args)
            jitted = applied.jitted(placed)
        else:
            placed, jitted = placed_args, jax.jit(step, donate_argnums=(0, 1))
        prog = xla_compile.compile_traced(target, jitted, placed)
        c = check_compiled(prog.compiled, placement_of(leaves, on_host))
        print(
            f"{name:5s} device {c.device_bytes:,} temp {c.temp_bytes:,} host arguments "
            f"{c.host_argument_bytes:,} host outputs {c.host_output_bytes:,} "
            f"(planned {c.planned_host_bytes:,})"
        )


if __name__ == "__main__":
    main()
