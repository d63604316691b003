"""The copy streams XLA:GPU deals the async starts over, predicted vs dumped, and the exposed
host-copy time of the H200 programs with the old and the new deal (schedule.py, 2026-12-05).

    # 1. the dumps: one deviceless XLA:GPU compile per program and variant, JAX 0.11.2 (the
    #    H200's), each with xla_dump_to; keeps the thunk sequence and metadata (~1 min)
    JAX_PLATFORMS=cpu PYTHONPATH=. /work/venvs/v0112/bin/python benchmarks/archive/schedule_streams.py \\
        --compile --dumps benchmarks/results/schedule-streams-2026-12-05
    # 2. the table (text in: the stored HLO, the dumps, the H200 records; seconds)
    PYTHONPATH=. /work/venvs/old/bin/python benchmarks/archive/schedule_streams.py \\
        --dumps benchmarks/results/schedule-streams-2026-12-05 \\
        --out benchmarks/results/schedule-streams-2026-12-05/table.md

Programs: the 4 exposure plans and the 9 points of the 2026-12-03 sweep, compiled as
benchmarks/archive/schedule_exposure_compile.py does (their scheduled HLO is stored under ``--hlo``;
``--compile`` checks that a fresh compile gives the same text). "old": the deal before
2026-12-05 (post-order with the control predecessors after the operands, the round-robin
restarted at 0 in every computation); "new": ``schedule.stream_assignment`` (XLA's
post-order, one counter for the module, computations breadth-first from ENTRY). Which starts
share a stream (the classes) is what the replay depends on; the old deal's indices are not
XLA's by construction, so the check is on the classes, per loop body.
"""

from __future__ import annotations

import argparse
import gzip
import re
import shutil
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

PLANS = ("lc16k_input", "lc16k_attn", "lc32k_attn", "lc16k_dots")
SWEEP = tuple(range(9))
TRITON = {"off": {}, "on": {"xla_gpu_enable_triton_gemm": True}}
# The store rate measured inside the compiled steps on the H200 (schedule_exposure.py).
IN_STEP_D2H = 49.3e9


def programs() -> list[str]:
    return [*PLANS, *(f"sweep{i}" for i in SWEEP)]


# ------------------------------------------------------------------------ the dumps


def compile_dumps(hlo_dir: Path, plans_dir: Path, dumps: Path) -> list[str]:
    from benchmarks.archive.schedule_exposure_compile import compile_sweep_point
    from benchmarks.archive.schedule_windows import compile_plan

    dumps.mkdir(parents=True, exist_ok=True)
    notes = []
    for name in programs():
        for v, extra in TRITON.items():
            key = f"{name}-triton-{v}"
            if (dumps / f"{key}.thunk_sequence.txt").exists():
                continue
            t0 = time.perf_counter()
            with tempfile.TemporaryDirectory() as tmp:
                opts = {**extra, "xla_dump_to": tmp}
                if name.startswith("sweep"):
                    text = compile_sweep_point(int(name[5:]), opts)
                else:
                    text = compile_plan(plans_dir / f"{name}.json", opts)
                for kind in ("thunk_sequence", "thunk_metadata"):
                    (src,) = [p for p in Path(tmp).glob(f"*.{kind}.txt") if "train_step" in p.name]
                    shutil.copy(src, dumps / f"{key}.{kind}.txt")
            stored = gzip.open(hlo_dir / f"{key}.txt.gz", "rt").read()
            # (the text names this checkout's source paths in its metadata: compared without)
            same = "same HLO as stored" if _program(stored) == _program(text) else "HLO DIFFERS"
            notes.append(f"{key}: {time.perf_counter() - t0:.0f} s, {same}")
            print(notes[-1], flush=True)
    return notes


def _program(text: str) -> str:
    """The instructions of an HLO text without their metadata and the stack-frame tables."""
    lines = [re.sub(r", metadata=\{[^}]*\}", "", ln) for ln in text.splitlines()]
    return "\n".join(ln for ln in lines if ln.startswith(("%", " ", "ENTRY", "ROOT", "}")))


# ------------------------------------------------------------------------ the old deal


def _old_post_order(body) -> list[str]:
    """schedule.post_order before 2026-12-05: from the root, operands then control
    predecessors, then what the root does not reach in text order."""
    by = {i.name: i for i in body}
    seen: set[str] = set()
    out: list[str] = []
    for first in [i.name for i in body if i.root] + [i.name for i in body]:
        stack = [(first, False)]
        while stack:
            name, expanded = stack.pop()
            if expanded:
                out.append(name)
                continue
            if name in seen or name not in by:
                continue
            seen.add(name)
            stack.append((name, True))
            ins = by[name]
            preds = re.search(r"control-predecessors=\{([^}]*)\}", ins.attrs)
            after = [p.strip().lstrip("%") for p in preds.group(1).split(",")] if preds else []
            stack.extend((o, False) for o in reversed(list(ins.operands) + after))
    return out


def old_assignment(module, streams: int = 4) -> dict[str, int]:
    """schedule.stream_of before 2026-12-05, over every computation: round-robin over the
    computation's copy-start / fusion-start / async-start in the old post-order, from 0."""
    out = {}
    for body in module.computations().values():
        starts = {i.name for i in body if i.opcode in ("copy-start", "fusion-start", "async-start")}
        dealt = [n for n in _old_post_order(body) if n in starts]
        out.update({n: k % streams for k, n in enumerate(dealt)})
    return out


def classes(assignment: dict[str, int], names) -> frozenset:
    """Which of ``names`` share a stream: a set of sets."""
    by = defaultdict(set)
    for n in names:
        by[assignment.get(n, -1)].add(n)
    return frozenset(frozenset(v) for v in by.values())


# ------------------------------------------------------------------------ the table


def _within(pred: float, meas: float) -> bool:
    return abs(pred - meas) <= 0.2 * meas if meas > 0 else pred == 0


def measured_ms(plans_measured: Path) -> dict[str, dict[str, float]]:
    """program -> {"d2h": ms per step, "h2d": ...} measured on the H200."""
    from benchmarks.archive.schedule_windows import measured
    from benchmarks.offload_windows import measured as sweep_measured

    out = {}
    for name, rec in measured(plans_measured).items():
        out[name] = {d: rec[f"{d}_exposed_s_ms"] for d in ("d2h", "h2d")}
    for i, (d2h, h2d) in sweep_measured().items():
        out[f"sweep{i}"] = {"d2h": 8e3 * d2h, "h2d": 8e3 * h2d}
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--hlo", default="benchmarks/results/schedule-exposure-2026-12-05/hlo")
    ap.add_argument("--plans", default="benchmarks/results/offload-exposure-plans-2026-12-04")
    ap.add_argument(
        "--measured", default="benchmarks/results/h200-2026-12-04-exposure-b/results.jsonl"
    )
    ap.add_argument("--dumps", default="benchmarks/results/schedule-streams-2026-12-05")
    ap.add_argument("--compile", action="store_true", help="make the dumps (JAX 0.11.2 + CUDA)")
    ap.add_argument("--out", default="")
    a = ap.parse_args(argv)
    if a.compile:
        compile_dumps(Path(a.hlo), Path(a.plans), Path(a.dumps))
        return 0

    from benchmarks.overlap_sweep import POINTS
    from planner._src.verify import schedule
    from planner._src.verify.schedule import dump as streams
    from planner._src.xla import hlo

    t0 = time.perf_counter()
    meas = measured_ms(Path(a.measured))
    body_rows, bodies = [], {"old": 0, "new": 0, "new, exact": 0, "all": 0}
    rows = []
    # (column, deal, link order): the link in issue order is the replay before 2026-12-06
    cols = (
        ("old", "old", "ready"),
        ("new", "new", "ready"),
        ("dump", "dump", "ready"),
        ("new, issue order", "new", "issue"),
        ("new, ties smallest", "new", "smallest"),
    )
    for v in ("on", "off"):
        for name in programs():
            key = f"{name}-triton-{v}"
            text = gzip.open(Path(a.hlo) / f"{key}.txt.gz", "rt").read()
            module = hlo.parse(text)
            dump = streams.read_module(a.dumps, key).assignment(4)
            got = {
                "old": old_assignment(module),
                "new": schedule.stream_assignment(module, 4, host_streams="compute"),
                "dump": dump,
            }
            for comp, body in module.computations().items():
                names = [i.name for i in body if i.name in dump]
                if not names:
                    continue
                ok = {d: classes(got[d], names) == classes(dump, names) for d in ("old", "new")}
                exact = all(got["new"].get(n) == dump[n] for n in names)
                bodies["all"] += 1
                bodies["old"] += ok["old"]
                bodies["new"] += ok["new"]
                bodies["new, exact"] += exact
                body_rows.append(
                    f"| {key} | {comp} | {len(names)} | {'yes' if ok['old'] else 'no'} | "
                    f"{'yes' if ok['new'] else 'no'} | {'yes' if exact else 'no'} |"
                )
            if v != "on" or name not in meas:
                continue
            for rates_label, rates in (("profile", {}), ("in-step d2h", {"d2h": IN_STEP_D2H})):
                fig = {}
                for col, d, link in cols:
                    w = schedule.read_windows(
                        module,
                        "h200",
                        pricing="kernels",
                        link_rates=rates,
                        assignment=got[d],
                        link_order=link,
                    )
                    fig[col] = {x: 1e3 * w.exposed_s(x) for x in ("d2h", "h2d")}
                for x in ("d2h", "h2d"):
                    label = (
                        name
                        if not name.startswith("sweep")
                        else (f"sweep {name[5:]}: {', '.join(POINTS[int(name[5:])])}")
                    )
                    rows.append((rates_label, label, x, meas[name][x], fig))

    def cell(p, m):
        return f"{p:,.1f}{' ✓' if _within(p, m) else ''}"

    tables, summary = [], []
    for rates_label in ("profile", "in-step d2h"):
        sel = [r for r in rows if r[0] == rates_label]
        lines = [
            "| program | dir | measured | old deal | new deal | dump's deal "
            "| new deal, link in issue order | new deal, ties smallest first |",
            "|---|---|---|---|---|---|---|---|",
        ]
        names = [c[0] for c in cols]
        hits = {(d, x): 0 for d in names for x in ("d2h", "h2d")}
        for _, label, x, m, fig in sel:
            lines.append(
                f"| {label} | {x} | {m:,.1f} | "
                + " | ".join(cell(fig[d][x], m) for d in names)
                + " |"
            )
            for d in names:
                hits[(d, x)] += _within(fig[d][x], m)
        n = len(sel) // 2
        tables.append((rates_label, "\n".join(lines)))
        for x in ("d2h", "h2d"):
            summary.append(
                f"| {rates_label} | {x} | "
                + " | ".join(f"{hits[(d, x)]} of {n}" for d in names)
                + " |"
            )
    text = (
        f"""## Stream classes per loop body: predicted vs the dump (JAX 0.11.2, deviceless H200)

Loop bodies (computations with async starts) where the predicted deal puts the same starts
together as XLA's dump; "exact": the new deal's stream indices equal the dump's.

| deal | bodies matching the dump |
|---|---|
| old (restart per computation, control predecessors after operands) | {bodies["old"]} of {bodies["all"]} |
| new (schedule.stream_assignment) | {bodies["new"]} of {bodies["all"]} |
| new, exact indices | {bodies["new, exact"]} of {bodies["all"]} |

| compile | computation | starts | old | new | new, exact |
|---|---|---|---|---|---|
{chr(10).join(body_rows)}

## Exposed host-copy time per step (ms), Triton GEMMs on, predicted vs measured on the H200

✓: within 20% of measured. Within 20%, per direction (13 programs):

Link order (schedule.LINK_ORDERS): "ready" (the default since 2026-12-06) in the first three
columns; "issue" (the replay before) and "smallest" (ties smallest first) on the new deal.

| link rates | dir | old deal | new deal | dump's deal | new deal, link in issue order | new deal, ties smallest first |
|---|---|---|---|---|---|---|
{chr(10).join(summary)}

"""
        + "\n\n".join(f"### Link rates: {lab}\n\n{t}" for lab, t in tables)
        + (
            f"\n\n(generated by benchmarks/archive/schedule_streams.py in {time.perf_counter() - t0:.0f} s)\n"
        )
    )
    if a.out:
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
