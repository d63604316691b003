"""Optimizer state brought in whole (plan.apply's "whole" mode), compiled deviceless for the
H200 with and without XLA:GPU's latency-hiding scheduler: device bytes of the three idioms
whose optimizer the planner cannot reach, and where the host-to-HBM copies land in the
compiled entry schedule.

    JAX_PLATFORMS=cpu python benchmarks/archive/whole_mode_schedule.py

Idioms (tests/test_train_state.py's): the (params, opt_state) tuple on examples/llama.py
(d_model 128, Adam), tests/zoo/flax_nnx.py (nnx.Optimizer) and tests/zoo/equinox_model.py
(AdamW), full remat, donated. Per idiom: the plain donated step ("none") and every moment
in pinned host memory applied as plan.apply applies it ("all"), each compiled with the
latency-hiding scheduler on ("LHS", XLA's default) and off ("noLHS"). For "all", the entry
computation's instruction positions of the copy-dones that bring a host leaf to HBM, the
first use of each HBM copy, and the first compute op. Results:
benchmarks/results/whole-mode-2026-12-06.md.
"""

import dataclasses
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

import jax  # noqa: E402
from zoo import equinox_model, flax_nnx  # noqa: E402

from examples import llama  # noqa: E402
from planner._src.emit.apply import apply as apply_policies  # noqa: E402
from planner._src.emit.apply import binding  # noqa: E402
from planner._src.emit.apply_state import apply_state  # noqa: E402
from planner._src.trainstate import StateApply, detect  # noqa: E402
from planner._src.xla import compile as xla_compile  # noqa: E402
from planner._src.xla import deviceless, targets  # noqa: E402

SMALL = dict(n_layers=4, d_model=64, d_ff=128, seq=32, batch=2)
CFG = dataclasses.replace(llama.QUICKSTART, d_model=128, n_heads=4, d_ff=256, seq=32, batch=2)
SCHEDULERS = {
    "LHS": {"xla_gpu_enable_latency_hiding_scheduler": True},
    "noLHS": {"xla_gpu_enable_latency_hiding_scheduler": False},
}


def tuple_step():
    step, (params, opt, batch) = llama.make_adam_step(CFG)

    def train_step(state, batch):
        params, opt = state
        params, opt, loss = step(params, opt, batch)
        return (params, opt), loss

    return train_step, ((params, opt), batch)


IDIOMS = {
    "tuple": tuple_step,
    "nnx": lambda: flax_nnx.make(**SMALL),
    "equinox": lambda: equinox_model.make(**SMALL),
}


def schedule(hlo: str) -> str:
    """Where the host-to-HBM copies land in the entry computation's schedule."""
    lines = hlo.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("ENTRY"))
    body = []
    for line in lines[start + 1 :]:
        if line.startswith("}"):
            break
        body.append(line.strip())
    name = re.compile(r"(?:ROOT )?%?([\w.\-]+) =")
    first_use: dict[str, int] = {}
    for i, line in enumerate(body):
        for m in re.finditer(r"%([\w.\-]+)", line.split("=", 1)[-1]):
            first_use.setdefault(m.group(1), i)
    ins = [
        (i, name.match(line).group(1))
        for i, line in enumerate(body)
        if " copy-done(" in line and "S(5)" not in line.split("copy-done")[0]
    ]
    compute = [i for i, line in enumerate(body) if " fusion(" in line or "custom-call(" in line]
    done = [i for i, _ in ins]
    used = sorted(first_use.get(n, -1) for _, n in ins)
    return (
        f"entry {len(body)} instructions, first compute op at {compute[0]}; "
        f"{len(ins)} copies to HBM done at {done[0]}..{done[-1]} (median {done[len(done) // 2]}), "
        f"first use of each at {used[0]}..{used[-1]} (median {used[len(used) // 2]})"
    )


def main() -> None:
    target = targets.resolve("h200", num_devices=1)
    if target.kind != "deviceless":
        sys.exit(f"no deviceless XLA:GPU here: {target.description}")
    full_remat = binding({}, jax.checkpoint_policies.nothing_saveable)
    for idiom, make in IDIOMS.items():
        step, args = make()
        sel = detect(args)
        on_host = frozenset(p for p, x in sel.opt_leaves(args) if x.ndim >= 1)
        target_args = deviceless.args_for(target, args)
        sa = StateApply(
            opt_path=sel.opt_path,
            params_path=sel.params_path,
            container=None,
            on_host=on_host,
            layers=1,
            mode="whole",
        )
        applied = apply_state(step, full_remat, sa)
        placed = applied.placed(target_args)
        cases = {
            "none": (
                jax.jit(apply_policies(step, full_remat), donate_argnums=sa.argnums()),
                target_args,
            ),
            "all": (applied.jitted(placed), placed),
        }
        for case, (fn, fargs) in cases.items():
            for sched, options in SCHEDULERS.items():
                prog = xla_compile.compile_traced(target, fn, fargs, options)
                m = prog.compiled.memory_analysis()
                device = (
                    m.argument_size_in_bytes
                    + m.output_size_in_bytes
                    - m.alias_size_in_bytes
                    + m.temp_size_in_bytes
                )
                print(
                    f"{idiom:8s} {case:4s} {sched:5s} device {device:,} temp "
                    f"{m.temp_size_in_bytes:,} host arguments {m.host_argument_size_in_bytes:,}",
                    flush=True,
                )
                if case == "all":
                    print("    " + schedule(prog.compiled.as_text()), flush=True)


if __name__ == "__main__":
    main()
