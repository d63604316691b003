"""Issue 45's two models nobody here wrote (tests/zoo: mamba_linen, unet_nnx), planned at the
three budgets of tests/test_ssm_unet.py; one table row per budget, then the stock table.

    JAX_PLATFORMS=cpu PLANNER_CPU_PROFILE=made-up python benchmarks/zoo_ssm_unet.py [--out FILE]

Per budget: the answer (the planner's plan or a stock policy), the bytes it claims
(``plan.verification``) and what the user's own model compiles to with the answer's policy at
its remat call site (``make_with_policy(plan.policy)``), the predicted step, the numerics
check, PlanWarnings raised, and the seconds ``Planner.plan`` took. Per stock policy: the
memory model's peak, what it compiles to, and what the stock table said at each budget
(compiled figures are the verifying compiler's; the ones the planner did not compile are
compiled here, to show whether a "predicted" fit holds). Markdown on stdout (and in --out).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings

os.environ.setdefault("JAX_PLATFORMS", "cpu")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # noqa: E402

import planner  # noqa: E402
from planner._src.policies import STOCK  # noqa: E402
from planner._src.results.report.build import build_report  # noqa: E402
from planner._src.verify.numerics.check import CHECK_NAME  # noqa: E402
from tests.test_ssm_unet import FRACTIONS, budgets  # noqa: E402
from tests.zoo import MODELS  # noqa: E402
from tests.zoo import _util as u  # noqa: E402

MB = 1e6


def _mb(b) -> str:
    return "" if b is None else f"{b / MB:.3f}"


def model_tables(name: str) -> list[str]:
    entry = MODELS[name]
    t = time.perf_counter()
    step, args = entry.make()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", planner.PlanWarning)
        session = planner.Planner(step, *args, hardware="cpu")
    lo, hi = session.trace.anchor.device_bytes, session.trace.anchor_saved.device_bytes
    out = [
        f"### {name} ({entry.note})",
        "",
        f"Planner (trace, both anchors compiled) {time.perf_counter() - t:.1f} s; full remat "
        f"compiles to {_mb(lo)} MB, save-everything to {_mb(hi)} MB.",
        "",
        "| budget MB (usable) | answer | claimed MB | own model compiles MB | predicted step ms "
        "| numerics | PlanWarnings | plan s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    plans = []
    for requested in budgets(session, name):
        t = time.perf_counter()
        with warnings.catch_warnings(record=True) as got:
            warnings.simplefilter("always")
            plan = session.plan(requested / 1e9)
        secs = time.perf_counter() - t
        plans.append(plan)
        warned = [w for w in got if issubclass(w.category, planner.PlanWarning)]
        own, own_args = entry.make_with_policy(plan.policy)
        own_bytes = u.device_bytes(u.compile_step(own, own_args)[0])
        num = next(c for c in plan.verification.checks if c.name == CHECK_NAME)
        diff = num.detail.split("the largest difference ")[-1].split(" of")[0]
        out.append(
            f"| {requested / MB:.3f} ({(plan.budget_bytes - plan.headroom_bytes) / MB:.3f}) "
            f"| {plan.choice} | {_mb(plan.verification.compiled_device_bytes)} | "
            f"{_mb(own_bytes)} | {plan.prediction.step_s * 1e3:.3f} | "
            f"{'ok' if num.ok else 'FAILED'} (largest difference {diff}) | {len(warned)} "
            f"| {secs:.1f} |"
        )
    out += ["", "Why each stock answer: " if any(p.choice in STOCK for p in plans) else ""]
    for p in plans:
        if p.choice in STOCK:
            out.append(f"- {p.budget_bytes / MB:.3f} MB: {p.choice_why}")
    out += [
        "",
        "| stock policy | model peak MB | compiled MB | "
        + " | ".join(f"fits at {p.budget_bytes / MB:.3f}" for p in plans)
        + " |",
        "|---|---|---|" + "---|" * len(plans),
    ]
    for sname in u.STOCK_POLICIES:
        rows = [
            {line.name: line for line in build_report(p).stock_policies}.get(sname) for p in plans
        ]
        base = next(b for b in plans[-1].baselines if b.name == sname)
        compiled = next(
            (
                b.compiled_device_bytes
                for p in plans
                for b in p.baselines
                if b.name == sname and b.compiled_device_bytes is not None
            ),
            None,
        )
        if compiled is None:
            s2, a2 = entry.make_with_policy(u.stock_policy(sname))
            compiled_text = f"{_mb(u.device_bytes(u.compile_step(s2, a2)[0]))} (here)"
        else:
            compiled_text = _mb(compiled)
        out.append(
            f"| {sname} | {_mb(base.prediction.peak_bytes)} | {compiled_text} | "
            + " | ".join(r.fits_text if r else "" for r in rows)
            + " |"
        )
    return out + [""]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="also write the tables here")
    a = ap.parse_args()
    lines = [
        f"JAX {jax.__version__}, Python {sys.version.split()[0]}, "
        f"PLANNER_CPU_PROFILE={os.environ.get('PLANNER_CPU_PROFILE', '')}, "
        f"XLA_FLAGS={os.environ.get('XLA_FLAGS', '')!r}",
        "",
    ]
    for name in FRACTIONS:
        reason = MODELS[name].skip_reason()
        lines += [f"### {name}: skipped: {reason}", ""] if reason else model_tables(name)
    text = "\n".join(lines)
    print(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
