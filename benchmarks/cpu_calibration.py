"""Predicted against measured step times on this CPU, under the made-up ``cpu`` profile and
under this machine's calibration (``hardware="cpu"``, cost_models/_cpu_profile.py).

    python benchmarks/cpu_calibration.py [--out FILE.md] [--models mamba,gpt2_loop,flax_linen]
        [--refresh] [--steps 10]

Per model: the stock policies that run here (no offload on XLA:CPU), each applied to the
whole step (``jax.checkpoint(layer, policy=...)``), jitted with XLA's default flags and timed
(the fastest and the median of ``--steps`` steps after a compiling and a warm-up step); their predicted step times
from the planner's baselines under each profile (one ``planner.Planner`` per profile, planned
at a budget every policy fits); the ratio measured / predicted; and the ranking of the
policies by each. The calibration is measured afresh with ``--refresh`` (its cost is in the
table), else read from the cache as ``hardware="cpu"`` does.

The models: a Mamba-style selective-state-space language model written here as a user would
(blocks of in-projection, causal depthwise convolution, input-dependent dt/B/C, a selective
scan over time under ``lax.scan``, SiLU gate, out-projection; each block under
``jax.checkpoint``), and zoo models of tests/zoo at larger sizes than the tests use.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import sys
import time
import warnings

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import optax  # noqa: E402
from jax import lax  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import cost_models as cm  # noqa: E402
import planner  # noqa: E402
from planner._src.policies import STOCK  # noqa: E402

MAMBA = dict(vocab=256, d_model=128, expand=2, d_state=16, d_conv=4, layers=4, seq=256, batch=4)
ZOO_SIZES = {
    "gpt2_loop": dict(d_model=256, n_heads=4, n_layers=4, seq=256, batch=8),
    "flax_linen": dict(d_model=256, n_heads=4, d_ff=1024, n_layers=4, seq=256, batch=4),
}


def _mamba_params(key, c):
    d, e, n, k = c["d_model"], c["d_model"] * c["expand"], c["d_state"], c["d_conv"]
    dt_rank = max(1, d // 16)
    keys = iter(jax.random.split(key, 8 * c["layers"] + 2))

    def dense(i, o):
        return jax.random.normal(next(keys), (i, o)) * i**-0.5

    layers = [
        {
            "norm": jnp.ones((d,)),
            "in_proj": dense(d, 2 * e),
            "conv": jax.random.normal(next(keys), (k, e)) * 0.5,
            "x_proj": dense(e, dt_rank + 2 * n),
            "dt_proj": dense(dt_rank, e),
            "dt_bias": jnp.full((e,), -2.0),
            "a_log": jnp.log(jnp.tile(jnp.arange(1, n + 1, dtype=jnp.float32), (e, 1))),
            "d_skip": jnp.ones((e,)),
            "out_proj": dense(e, d),
        }
        for _ in range(c["layers"])
    ]
    return {"embed": dense(c["vocab"], d), "layers": layers, "norm": jnp.ones((d,))}


def _rms(x, g):
    return x * lax.rsqrt(jnp.mean(x * x, -1, keepdims=True) + 1e-6) * g


def _mamba_block(p, x):
    b, t, _ = x.shape
    n = p["a_log"].shape[1]
    dt_rank = p["dt_proj"].shape[0]
    xz = _rms(x, p["norm"]) @ p["in_proj"]
    u, z = jnp.split(xz, 2, axis=-1)
    k = p["conv"].shape[0]
    padded = jnp.pad(u, ((0, 0), (k - 1, 0), (0, 0)))
    u = jax.nn.silu(sum(padded[:, i : i + t] * p["conv"][i] for i in range(k)))
    dbc = u @ p["x_proj"]
    dt = jax.nn.softplus(dbc[..., :dt_rank] @ p["dt_proj"] + p["dt_bias"])  # (b, t, e)
    bm, cm_ = dbc[..., dt_rank : dt_rank + n], dbc[..., dt_rank + n :]  # (b, t, n)
    a = -jnp.exp(p["a_log"])  # (e, n)

    def step(h, inputs):  # the selective scan, one time step
        dt_t, b_t, c_t, u_t = inputs
        h = jnp.exp(dt_t[..., None] * a) * h + (dt_t * u_t)[..., None] * b_t[:, None, :]
        return h, jnp.einsum("ben,bn->be", h, c_t)

    h0 = jnp.zeros((b, u.shape[-1], n))
    xs = tuple(jnp.swapaxes(v, 0, 1) for v in (dt, bm, cm_, u))
    _, y = lax.scan(step, h0, xs)
    y = jnp.swapaxes(y, 0, 1) + u * p["d_skip"]
    return x + (y * jax.nn.silu(z)) @ p["out_proj"]


def make_mamba(policy=None, **overrides):
    """``(train_step, (params, opt_state, tokens))`` of the Mamba-style model."""
    c = {**MAMBA, **overrides}
    params = _mamba_params(jax.random.key(0), c)
    opt = optax.adamw(3e-4)
    opt_state = opt.init(params)
    block = jax.checkpoint(_mamba_block, policy=policy)

    def loss_fn(params, tokens):
        x = params["embed"][tokens[:, :-1]]
        for p in params["layers"]:
            x = block(p, x)
        logits = _rms(x, params["norm"]) @ params["embed"].T
        return optax.softmax_cross_entropy_with_integer_labels(logits, tokens[:, 1:]).mean()

    def train_step(params, opt_state, tokens):
        loss, grads = jax.value_and_grad(loss_fn)(params, tokens)
        updates, opt_state = opt.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    tokens = jax.random.randint(jax.random.key(1), (c["batch"], c["seq"] + 1), 0, c["vocab"])
    return train_step, (params, opt_state, tokens)


def _maker(name):
    if name == "mamba":
        return make_mamba, {}
    from tests.zoo import MODELS

    return MODELS[name].make_with_policy, ZOO_SIZES.get(name, {})


def measured_ms(make, sizes, policy, steps: int) -> tuple[float, float]:
    """(fastest, median) wall ms of one jitted step under ``policy`` (after a compiling and a
    warm-up step), the state fed back so that every step is a real one. The fastest is the
    one compared: the machine is shared, and other work only slows a step down (the
    calibration takes its fastest repeats too)."""
    step, args = make(policy, **sizes)
    jitted = jax.jit(step)

    def one(args):  # the step returns (*state, loss) for arguments (*state, batch)
        *state, loss = jitted(*args)
        jax.block_until_ready(loss)
        return (*state, args[-1])

    for _ in range(2):
        args = one(args)
    times = []
    for _ in range(steps):
        t = time.perf_counter()
        args = one(args)
        times.append(time.perf_counter() - t)
    return min(times) * 1e3, statistics.median(times) * 1e3


def predicted_ms(make, sizes, hw) -> tuple[dict[str, float], str]:
    """Each stock policy's predicted step (ms) from the planner's baselines on ``hw``, and
    the planner's answer, at a budget every policy fits (the save-everything anchor's
    compiled bytes, plus a tenth)."""
    step, args = make(None, **sizes)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        session = planner.Planner(step, *args, hardware=hw)
        plan = session.plan(session.trace.anchor_saved.device_bytes * 1.1 / 1e9)
    got = {b.name: b.prediction.step_s * 1e3 for b in plan.baselines if b.name in STOCK}
    return got, f"{plan.choice} ({plan.prediction.step_s * 1e3:.2f} ms predicted)"


def exp_against_fma(repeats: int = 5) -> str:
    """XLA:CPU's time per element of an ``exp`` against an FMA's, each in a chain of 64 over
    4 MiB of fp32 (the cost model counts an exp as one vector FLOP, an FMA as two)."""
    from cost_models._calibrate import _in_place_seconds

    device = jax.devices("cpu")[0]
    nbytes, depth = 4 * 2**20, 64

    def exps(x):
        for _ in range(depth):
            x = jnp.exp(-x)  # stays in (0.3, 1]
        return x

    def fmas(x):
        for _ in range(depth):
            x = x * 0.999 + 0.001
        return x

    exp_s = _in_place_seconds(device, nbytes, exps, repeats, warmup_s=0.02, fastest=True)
    fma_s = _in_place_seconds(device, nbytes, fmas, repeats, warmup_s=0.02, fastest=True)
    per = nbytes // 4 * depth
    return (
        f"XLA:CPU here: an exp costs {exp_s / per * 1e9:.2f} ns per element, an FMA "
        f"{fma_s / per * 1e9:.2f} ns ({exp_s / fma_s:.1f}x; chains of {depth} over 4 MiB fp32, "
        f"fastest of {repeats}); the cost model counts an exp as 1 vector FLOP and an FMA as 2."
    )


def _ranks(values: dict[str, float]) -> list[str]:
    return sorted(values, key=values.get)


def run_model(name, profiles, steps):
    make, sizes = _maker(name)
    preds, answers = {}, {}
    for label, hw in profiles.items():
        preds[label], answers[label] = predicted_ms(make, sizes, hw)
    names = [
        s
        for s, pol in STOCK.items()
        if not pol.offloads and not pol.needs_names and all(s in p for p in preds.values())
    ]
    both = {s: measured_ms(make, sizes, STOCK[s].policy(), steps) for s in names}
    return sizes or MAMBA, names, both, preds, answers


def _table(name, sizes, names, both, preds, answers) -> list[str]:
    labels = list(preds)
    measured = {s: fastest for s, (fastest, _) in both.items()}
    out = [
        f"### {name}",
        "",
        "Sizes: " + ", ".join(f"{k}={v}" for k, v in sizes.items()) + ".",
        "",
        "| stock policy | measured ms: fastest (median) | "
        + " | ".join(f"{lb}: predicted ms | {lb}: measured / predicted" for lb in labels)
        + " |",
        "|---|---:|" + "---:|---:|" * len(labels),
    ]
    for s in names:
        cells = " | ".join(
            f"{preds[lb][s]:.3f} | {measured[s] / preds[lb][s]:.2f}x" for lb in labels
        )
        out.append(f"| {s} | {measured[s]:.2f} ({both[s][1]:.2f}) | {cells} |")
    out += ["", f"Fastest first, measured: {', '.join(_ranks(measured))}."]
    for lb in labels:
        ranked = _ranks({s: preds[lb][s] for s in names})
        same = "same order" if ranked == _ranks(measured) else "a different order"
        out.append(
            f"Fastest first, {lb}: {', '.join(ranked)} ({same}); the planner's answer at a "
            f"budget every policy fits: {answers[lb]}."
        )
    return out + [""]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="write the markdown here (default: print it)")
    ap.add_argument("--models", default="mamba,gpt2_loop,flax_linen")
    ap.add_argument("--refresh", action="store_true", help="measure the calibration again")
    ap.add_argument("--steps", type=int, default=10)
    a = ap.parse_args()
    os.environ.pop("PLANNER_CPU_PROFILE", None)  # "cpu": this machine's calibration
    t = time.perf_counter()
    calibrated = cm.this_cpu_profile(refresh=a.refresh)
    cal_s = time.perf_counter() - t
    profiles = {"made-up": cm.load_profile("cpu-made-up"), "calibrated": calibrated}
    lines = [
        f"# Predicted vs measured step times on this CPU ({datetime.date.today()})",
        "",
        "Command: `" + " ".join(["python benchmarks/cpu_calibration.py", *sys.argv[1:]]) + "`",
        "",
        f"Machine: {cm.calibration_note(calibrated)}; {platform.python_version()}; "
        f"XLA_FLAGS={os.environ.get('XLA_FLAGS', '')!r}; load average "
        f"{os.getloadavg()[0]:.2f} at the start. The calibration "
        + (f"was measured afresh in {cal_s:.1f} s." if a.refresh else f"was read in {cal_s:.2f} s.")
        + "",
        "",
        "Calibrated figures: "
        + ", ".join(f"matmul {k} {v / 1e9:.0f} GFLOP/s" for k, v in calibrated.matmul_flops_per_s)
        + f", memory {calibrated.hbm_bytes_per_s / 1e9:.1f} GB/s (read + write), vector "
        f"{calibrated.vector_flops_per_s / 1e9:.1f} GFLOP/s, kernel launch "
        f"{calibrated.kernel_launch_s * 1e6:.2f} us. Made-up: matmul 500 GFLOP/s, memory 50 GB/s, "
        "vector 250 GFLOP/s, launch 5 us.",
        "",
    ]
    lines += [exp_against_fma(), ""]
    for name in a.models.split(","):
        t = time.perf_counter()
        lines += _table(name, *run_model(name, profiles, a.steps))
        took = time.perf_counter() - t
        lines += [f"({took:.0f} s; load average {os.getloadavg()[0]:.2f} at the end.)", ""]
        print(f"{name}: {took:.0f} s", file=sys.stderr)
    text = "\n".join(lines)
    if a.out:
        with open(a.out, "w", encoding="utf-8") as f:
            f.write(text)
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
