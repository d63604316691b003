"""The planner's own time against JAX's compile of the same step (issue 46), on this machine.

    JAX_PLATFORMS=cpu python benchmarks/planning_time.py [--out FILE] [--parts a,b] [--depths ...]

Each part runs in a fresh process and measures, first, the plain
``jax.jit(step).lower(*args).compile()`` of the step in that process; every figure after it is
a ratio to that compile. Parts:

* ``quickstart``: the README's model (examples/llama.py QUICKSTART, abstract arguments,
  ``hardware="h200"`` verified on this machine's XLA, ``compiler="local"``): one budget on a
  fresh Planner; a second budget on the same Planner; ``planner.solve`` twice on the same
  step and budget (the second from the session cache), its answer compared with the cold one.
* ``flax``: two small Flax models of the zoo (linen ``nn.scan(nn.remat)``, NNX scan) with
  concrete arguments, numerics check on, three budgets each on one Planner.
* ``loop``: an N-layer Python-loop MLP (width 64, each layer in ``jax.checkpoint``) at each
  depth: trace + graph (the Planner) and one budget.
* ``frontier``: ``examples/frontier.py``'s Llama 3 70B on a 4 x 2 mesh of fake CPU devices,
  abstract sharded arguments, ``planner.solve(..., hardware="h200")`` with its default
  verify compiles, on XLA:CPU and on the deviceless XLA:GPU compiler (CUDA plugin); seconds
  against the issue's 30 s (no ratio: no plain compile is made).
* ``frontier671``: DeepSeek-V3 671B (capacity dispatch, 64 x 8 mesh) deviceless for the H200,
  with ``verify_compile=False`` (as ``benchmarks/frontier.py`` plans it) and with the
  default verify compiles: seconds against 120 s (2026-12-07, loaded: 80 s and 160 s).

``import planner`` (its modules: OR-Tools, networkx, the stages) is timed on its own row of
each part, before the plain compile, and counted in no ratio: like ``import jax`` on the plain
compile's side, it is paid once per process, not per plan.

The numerics check's share is the sum of the plan's numerics stages over its planning time.
The machine's load average is recorded with each figure (the machine may be shared).
Writes a Markdown table to ``--out`` and the raw records beside it (``.json``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import warnings

os.environ.setdefault("JAX_PLATFORMS", "cpu")
# The made-up cpu profile (not this machine's calibration): the same plans on every machine.
os.environ.setdefault("PLANNER_CPU_PROFILE", "made-up")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def _load() -> str:
    return "{:.2f}/{:.2f}/{:.2f}".format(*os.getloadavg())


def _plain_compile(step, args) -> float:
    import jax

    t = time.perf_counter()
    jax.jit(step).lower(*args).compile()
    return time.perf_counter() - t


def _stages(plan) -> dict:
    out: dict[str, float] = {}
    for what, s in plan.timings:
        out[what] = out.get(what, 0.0) + s
    return out


def _numerics_s(plan) -> float:
    return sum(s for what, s in plan.timings if what.startswith("numerics"))


def _answer(plan) -> tuple:
    v = plan.verification
    return (plan.choice, tuple(plan.assignment.decisions), v.compiled_device_bytes, str(v.status))


def _reused(session) -> int:
    """Compiles the Planner took from its memo (one program lowered again the same way)."""
    memo = getattr(session.subject, "compiles", None)
    return getattr(memo, "hits", 0)


def _import_planner(part: str) -> tuple:
    """``planner`` with its modules loaded (OR-Tools, networkx, the stages), and a record of
    the seconds that took: once per process, like ``import jax`` on the plain compile's side,
    so it is shown and not counted in any ratio."""
    t = time.perf_counter()
    import planner

    planner.Planner  # noqa: B018  (the package loads its modules on first use)
    s = time.perf_counter() - t
    what = f"{part}: import planner (once per process; not in any ratio)"
    return planner, {"what": what, "s": s, "ratio": None, "load": _load()}


def _record(what, seconds, compile_s, **extra) -> dict:
    return {"what": what, "s": seconds, "ratio": seconds / compile_s, "load": _load(), **extra}


def part_quickstart() -> list[dict]:
    from examples.llama import QUICKSTART, make_train_step

    planner, imported = _import_planner("quickstart")
    step, args = make_train_step(QUICKSTART)
    c = _plain_compile(step, args)
    kw = {"hardware": "h200", "compiler": "local"}
    out = [imported, _record("quickstart: jax.jit(step).lower().compile()", c, c)]
    t = time.perf_counter()
    session = planner.Planner(step, *args, **kw)
    p1 = session.plan(0.42)
    out.append(
        _record(
            "quickstart: Planner + one budget (0.42 GB), cold",
            time.perf_counter() - t,
            c,
            stages=_stages(p1),
        )
    )
    t = time.perf_counter()
    p2 = session.plan(0.40)
    out.append(
        _record(
            "quickstart: a second budget (0.40 GB), same Planner",
            time.perf_counter() - t,
            c,
            stages=_stages(p2),
        )
    )
    t = time.perf_counter()
    s1 = planner.solve(step, *args, hbm_gb=0.42, **kw)
    out.append(
        _record(
            "quickstart: planner.solve, first call (0.42 GB)",
            time.perf_counter() - t,
            c,
            stages=_stages(s1),
            same_answer_as_cold=_answer(s1) == _answer(p1),
        )
    )
    t = time.perf_counter()
    s2 = planner.solve(step, *args, hbm_gb=0.42, **kw)
    out.append(
        _record(
            "quickstart: planner.solve again, same step and budget",
            time.perf_counter() - t,
            c,
            stages=_stages(s2),
            same_answer_as_cold=_answer(s2) == _answer(p1),
        )
    )
    return out


def part_flax() -> list[dict]:
    from tests.test_zoo import zoo_budgets
    from tests.zoo import MODELS

    planner, imported = _import_planner("flax")
    out = [imported]
    for name in ("flax_linen", "flax_nnx"):
        entry = MODELS[name]
        why = entry.skip_reason()
        if why:
            out.append({"what": f"{name}: skipped ({why})", "s": 0, "ratio": 0, "load": _load()})
            continue
        step, args = entry.make()
        c = _plain_compile(step, args)
        out.append(_record(f"{name}: jax.jit(step).lower().compile()", c, c))
        t = time.perf_counter()
        session = planner.Planner(step, *args, hardware="cpu")
        trace_s = time.perf_counter() - t
        out.append(_record(f"{name}: Planner (trace + graph)", trace_s, c))
        for k, requested in enumerate(zoo_budgets(session)):
            t = time.perf_counter()
            try:
                plan = session.plan(requested / 1e9)
            except planner.PlannerError as e:
                out.append(
                    _record(
                        f"{name}: budget {k + 1}: {type(e).__name__}", time.perf_counter() - t, c
                    )
                )
                continue
            s = time.perf_counter() - t + (trace_s if k == 0 else 0.0)
            num = _numerics_s(plan)
            out.append(
                _record(
                    f"{name}: budget {k + 1} ({requested / 1e6:.2f} MB)"
                    + (", with the Planner" if k == 0 else ""),
                    s,
                    c,
                    stages=_stages(plan),
                    numerics_s=num,
                    numerics_share=num / s,
                    checked=bool(plan.numerics and plan.numerics.checked),
                    compiles_reused=_reused(session),
                )
            )
    return out


def loop_model(depth: int, width: int = 64, batch: int = 32):
    import jax
    import jax.numpy as jnp

    def layer(w, x):
        return jnp.tanh(x @ w) + x

    def loss(ws, x):
        for w in ws:
            x = jax.checkpoint(layer)(w, x)
        return jnp.mean(x**2)

    def step(ws, x):
        loss_v, g = jax.value_and_grad(loss)(ws, x)
        return [w - 1e-3 * gw for w, gw in zip(ws, g)], loss_v

    keys = jax.random.split(jax.random.key(0), depth + 1)
    ws = [jax.random.normal(k, (width, width)) / width**0.5 for k in keys[:-1]]
    x = jax.random.normal(keys[-1], (batch, width))
    return step, (ws, x)


def part_loop(depths) -> list[dict]:
    planner, imported = _import_planner("loop")
    out = [imported]
    for n in depths:
        step, args = loop_model(n)
        c = _plain_compile(step, args)
        out.append(_record(f"loop {n}: jax.jit(step).lower().compile()", c, c))
        t = time.perf_counter()
        session = planner.Planner(step, *args, hardware="cpu", check_numerics=False)
        made = time.perf_counter() - t
        tg = sum(s for what, s in session.timings)
        # The compiler probes run on a process's first Planner only (once per compiler and
        # JAX): a constant of the process, not of the depth
        probes = sum(s for what, s in session.sites.timings if what.startswith("compiler probe"))
        out.append(
            _record(f"loop {n}: trace + graph (with the anchor compiles)", tg, c, probes_s=probes)
        )
        lo = session.trace.anchor.device_bytes
        hi = session.trace.anchor_saved.device_bytes
        t = time.perf_counter()
        plan = session.plan(session_budget_gb(session, (lo + hi) / 2))
        s = time.perf_counter() - t + made
        out.append(
            _record(
                f"loop {n}: Planner + one budget",
                s,
                c,
                stages=_stages(plan),
                compiles_reused=_reused(session),
            )
        )
    return out


# (part, model, compiler, verify_compile, the target in seconds)
FRONTIER = (
    ("frontier", "llama3-70b", "local", True, 30),
    ("frontier", "llama3-70b", "target", True, 30),
    ("frontier671", "deepseek-v3-671b-capacity", "target", False, 120),
    ("frontier671", "deepseek-v3-671b-capacity", "target", True, 120),
)


def part_frontier(part: str) -> list[dict]:
    """``benchmarks/frontier.py``'s plans, each in its own process (its fake devices are set
    before JAX starts): ``planner.solve`` of an abstract sharded step for ``hardware="h200"``
    at 90% of its HBM. Their targets are seconds, not ratios: no plain compile is made."""
    from benchmarks import frontier

    out = []
    for which, model, compiler, verify, target in FRONTIER:
        if which != part:
            continue
        fig = frontier.plan_in_process(model, "h200", compiler=compiler, verify=verify)
        what = (
            f"{model} ({'deviceless XLA:GPU' if compiler == 'target' else 'XLA:CPU'}, "
            f"verify_compile={verify}): planner.solve, target <= {target} s"
        )
        if "plan_s" not in fig:
            failed = f"{fig.get('status')}: {fig.get('error', '')[-300:]}"
            out.append(
                {"what": f"{what}: failed ({failed})", "s": 0.0, "ratio": None, "load": _load()}
            )
            continue
        out.append(
            {
                "what": what,
                "s": fig["plan_s"],
                "ratio": None,
                "load": _load(),
                "stages": fig.get("timings") or {},
                "status": fig.get("status"),
                "mesh": fig.get("mesh"),
            }
        )
    return out


def session_budget_gb(session, usable: float) -> float:
    from planner._src.budget import io_bytes, requested_for

    return requested_for(usable, session.hardware, io_bytes(session.trace), session.margin) / 1e9


def run_part(name: str, depths) -> list[dict]:
    warnings.simplefilter("ignore")
    if name == "quickstart":
        return part_quickstart()
    if name == "flax":
        return part_flax()
    if name == "loop":
        return part_loop(depths)
    if name in ("frontier", "frontier671"):
        return part_frontier(name)
    raise SystemExit(f"unknown part {name!r}: quickstart, flax, loop, frontier, frontier671")


def table(records: list[dict]) -> str:
    lines = [
        "| what | seconds | x JAX's compile | load (1/5/15 min) | notes |",
        "|---|---|---|---|---|",
    ]
    for r in records:
        notes = []
        if "same_answer_as_cold" in r:
            notes.append("same answer as cold" if r["same_answer_as_cold"] else "ANSWER DIFFERS")
        if "numerics_share" in r:
            notes.append(
                f"numerics {r['numerics_s']:.2f} s ({r['numerics_share']:.0%})"
                + ("" if r.get("checked") else ", not checked")
            )
        if r.get("probes_s"):
            notes.append(f"compiler probes (first Planner only) {r['probes_s']:.2f} s")
        if r.get("compiles_reused"):
            notes.append(f"{r['compiles_reused']} compiles reused so far")
        if "stages" in r:
            top = sorted(r["stages"].items(), key=lambda kv: -kv[1])[:4]
            notes.append("; ".join(f"{k} {v:.2f}" for k, v in top))
        if r.get("status"):
            notes.insert(0, f"status {r['status']}")
        ratio = "-" if r.get("ratio") is None else f"{r['ratio']:.2f}"
        lines.append(
            f"| {r['what']} | {r['s']:.2f} | {ratio} | {r['load']} | {' / '.join(notes)} |"
        )
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=None, help="Markdown file (raw records: same name, .json)")
    ap.add_argument("--parts", default="quickstart,flax,loop,frontier,frontier671")
    ap.add_argument("--depths", default="25,50,100,200")
    ap.add_argument("--one", default=None, help=argparse.SUPPRESS)  # a part, in this process
    a = ap.parse_args()
    depths = [int(d) for d in a.depths.split(",")]
    if a.one:
        print(json.dumps(run_part(a.one, depths)))
        return 0
    import jax

    records = []
    for part in a.parts.split(","):
        got = subprocess.run(
            [sys.executable, __file__, "--one", part, "--depths", a.depths],
            capture_output=True,
            text=True,
            check=False,
        )
        if got.returncode != 0:
            print(got.stderr[-3000:], file=sys.stderr)
            records.append({"what": f"{part}: failed", "s": 0, "ratio": None, "load": _load()})
            continue
        part_records = json.loads(got.stdout.strip().splitlines()[-1])
        print(table(part_records), flush=True)
        records.extend(part_records)
    head = (
        f"jax {jax.__version__}, {os.cpu_count()} cores, Python {sys.version.split()[0]}, "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"
    )
    text = head + "\n\n" + table(records) + "\n"
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)
        with open(os.path.splitext(a.out)[0] + ".json", "w") as f:
            json.dump(records, f, indent=1)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
