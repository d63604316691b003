"""A Llama-style Adam step kept in a Flax linen ``TrainState``, planned deviceless for the H200
at a budget its optimizer state does not fit in HBM (issue 42's must-show).

    JAX_PLATFORMS=cpu python benchmarks/train_state_h200.py [--seq 512] [--batch 1] \
        [--share 0.5] [--over '{"n_layers": 4}'] [--out benchmarks/results/train-state-h200-deviceless.json]

The step is ``examples/llama.py``'s model (``state_offload_h200.CONFIG``: d_model 4096, 32
layers under ``lax.scan``, bf16, 7.2 B parameters) written as a TrainState user writes it:
``train_step(state, batch) -> (state.apply_gradients(grads=grads), loss)``, optax Adam in
``state.tx``, jitted donated, its arguments abstract (``jax.eval_shape``: nothing is
allocated). The budget is the full-remat compile with the whole state in HBM less ``share`` of
the moments' bytes, so the activations alone cannot fit it: the planner is first asked without
``opt_state`` (the refusal must name the placement), then with ``opt_state="auto"``. Prints
and writes the figures (every byte figure the deviceless XLA:GPU compile's): the refusal's
last lines, the selection line, what moved, the plan's verified device bytes against the
budget, the stock comparison (MaxText's optimizer_memory_host_offload rows included), the
compile of the step ``plan.apply`` returns, and the wall time.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))


def make_train_state_step(cfg, lr: float = 1e-3):
    """``(train_step, (state, batch))`` with ``state`` a Flax ``TrainState`` of
    ``jax.ShapeDtypeStruct``s."""
    import functools

    import jax
    import jax.numpy as jnp
    import optax
    from flax.training import train_state

    from examples import llama

    loss_of = llama.lm_loss(functools.partial(llama.forward, cfg))

    def train_step(state, batch):
        loss, grads = jax.value_and_grad(loss_of)(state.params, batch)
        return state.apply_gradients(grads=grads), loss

    def make_args():
        params = llama.init_params(cfg, jax.random.key(0))
        state = train_state.TrainState.create(apply_fn=None, params=params, tx=optax.adam(lr))
        tokens = jax.random.randint(jax.random.key(1), (cfg.batch, cfg.seq), 0, cfg.vocab)
        return state, {"tokens": tokens, "targets": jnp.roll(tokens, -1, axis=1)}

    return train_step, jax.eval_shape(make_args)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--share", type=float, default=0.5)
    ap.add_argument("--out", default="")
    ap.add_argument("--over", default="{}", help="JSON overrides of the model's config")
    a = ap.parse_args()

    import jax
    import state_offload_h200 as h

    import planner
    from examples import llama
    from planner._src.budget import io_bytes, requested_for
    from planner._src.trainstate import check_compiled, detect
    from planner._src.units import GB
    from planner._src.xla import compile as xla_compile
    from planner._src.xla import deviceless, targets

    target = targets.resolve("h200", num_devices=1)
    if target.kind != "deviceless":
        sys.exit(f"no deviceless XLA:GPU here: {target.description}")
    config = {**h.CONFIG, "batch": a.batch, "seq": a.seq, **json.loads(a.over)}
    cfg = llama.LlamaConfig(**config)
    step, args = make_train_state_step(cfg)
    out: dict = {"config": config, "jax": jax.__version__}
    t0 = time.perf_counter()
    session = planner.Planner(jax.jit(step, donate_argnums=(0,)), *args, hardware="h200")
    out["trace_s"] = round(time.perf_counter() - t0, 1)
    sel = detect(args)
    moments = sum(x.size * x.dtype.itemsize for _, x in sel.opt_leaves(args) if x.ndim)
    full = session.trace.anchor.device_bytes
    usable = full - a.share * moments
    hbm_gb = requested_for(usable, session.hardware, io_bytes(session.trace), session.margin)
    hbm_gb /= GB
    out.update(
        full_remat_device_bytes=full,
        moment_bytes=moments,
        hbm_gb=round(hbm_gb, 3),
        selection=sel.line(),
    )
    t0 = time.perf_counter()
    try:
        session.plan(hbm_gb)
        out["without_opt_state"] = "planned (unexpected: the activations alone fit)"
    except planner.InfeasibleBudgetError as e:
        out["without_opt_state"] = str(e).splitlines()[-1]
    out["refusal_s"] = round(time.perf_counter() - t0, 1)
    t0 = time.perf_counter()
    plan = session.plan(hbm_gb, opt_state="auto")
    out["plan_s"] = round(time.perf_counter() - t0, 1)
    st = plan.state
    out.update(
        status=str(plan.verification.status),
        usable_bytes=plan.budget.usable,
        compiled_device_bytes=plan.verification.compiled_device_bytes,
        host_bytes_planned=st.placement.host_bytes(),
        host_leaves=len(st.placement.on_host),
        mode=st.mode,
        state_lines=list(st.lines()),
        stock={
            b.name: {"device_bytes": b.compiled_device_bytes, "fits": b.fits}
            for b in plan.baselines
        },
    )
    applied = plan.apply(step)
    placed = applied.placed(deviceless.args_for(target, args))
    prog = xla_compile.compile_traced(target, applied.jitted(placed), placed)
    check = check_compiled(prog.compiled, st.placement)
    out["applied"] = {
        "device_bytes": check.device_bytes,
        "host_argument_bytes": check.host_argument_bytes,
        "host_matches": check.host_matches,
        "within_budget": check.device_bytes <= plan.budget.usable,
    }
    out["report"] = plan.report()
    print(json.dumps({k: v for k, v in out.items() if k != "report"}, indent=1))
    print(out["report"])
    if a.out:
        Path(a.out).write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
