"""The deviceless bound (planner/_src/xla/deviceless_bound.py, budget.Margin) against every
recorded pair of the H200's own compile and the deviceless compile of the same program.

    python benchmarks/deviceless_bound.py [--out FILE.md]

Reads the records of ``benchmarks/deviceless_gap.py`` (no compile, no GPU):
``h200-2026-12-04-deviceless-plan/deviceless-cublas-{plans,stock}.jsonl`` (the deviceless
compile as the planner makes it now, matmuls as cuBLAS calls, jaxlib 0.11.2) against
``h200-2026-12-04-deviceless-plan/device-plans.jsonl`` and
``h200-2026-12-03-deviceless/gap*/results.jsonl`` (the H200's own compile, same jaxlib). Per
program: the cuDNN workspace bound from the model's attention shapes by the same function
the planner applies to the compiled HLO (``cudnn_attention_workspace``; the records keep the
device's workspaces, not the HLO), the residual (device - deviceless - workspace bound) as
a share of the temporaries, and whether ``deviceless + bound`` covers the device.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from planner._src.xla import deviceless_bound as db  # noqa: E402
from planner._src.xla import targets  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
PLAN_DIR = RESULTS / "h200-2026-12-04-deviceless-plan"
GAP_DIRS = sorted((RESULTS / "h200-2026-12-03-deviceless").glob("gap*"))
MEASURED_ENGINE_BYTES = 256  # every device record's forward workspace, and the backward's rest


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def backward_bound(config: dict) -> int:
    """The planner's bound for the model's cuDNN backward call (its output tuple built from
    the config: dQ [b, h_q, s, d], dK and dV [b, h_kv, s, d], the workspace u8[0])."""
    b, s, h = config["batch"], config["seq"], config["n_heads"]
    kv, d = config.get("n_kv_heads") or h, config["d_model"] // h
    shapes = [
        ("bf16", (b, h, s, d)),
        ("bf16", (b, kv, s, d)),
        ("bf16", (b, kv, s, d)),
        ("u8", (0,)),
    ]
    fmha = {
        "cudnn_fmha_backend_config": {"intermediate_tensor_shape": {"dimensions": [b, h, s, s]}}
    }
    return db.cudnn_attention_workspace("__cudnn$fmhaSoftmaxBackward", shapes, fmha)[0]


def pairs() -> list[tuple[str, str, dict, dict]]:
    device: dict[tuple[str, str], dict] = {}
    for r in _rows(PLAN_DIR / "device-plans.jsonl"):
        device[(r["name"], "plan")] = r
    for folder in GAP_DIRS:
        for r in _rows(folder / "results.jsonl"):
            if r["where"] == "device" and isinstance(r["policy"], str):
                device[(r["name"], r["policy"])] = r  # the last call of a program wins
    out = []
    for kind in ("plans", "stock"):
        for r in _rows(PLAN_DIR / f"deviceless-cublas-{kind}.jsonl"):
            key = (r["name"], "plan" if kind == "plans" else r["policy"])
            if key in device:
                out.append((*key, r, device[key]))
    return sorted(out, key=lambda p: (p[0], p[1], p[2].get("policy_label", "")))


def table() -> tuple[str, float, int]:
    lines = [
        "| program | policy | deviceless (cuBLAS GEMMs) | H200 | device - deviceless | cuDNN "
        "bound | device's cuDNN workspace | residual | residual / temporaries | "
        f"deviceless + bound ({targets.DEVICELESS_TEMP_FRACTION:.1%} of temporaries) | covers |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    worst, uncovered = 0.0, 0
    for name, policy, less, dev in pairs():
        assert (less["argument_bytes"], less["output_bytes"], less["alias_bytes"]) == (
            dev["argument_bytes"],
            dev["output_bytes"],
            dev["alias_bytes"],
        ), f"{name} {policy}: arguments and outputs differ"
        w = backward_bound(less["config"]) if less["cudnn_calls"] else 0
        if dev["cudnn_calls"]:  # the formula against the device's own workspace
            exact = w - db.ENGINE_BYTES + MEASURED_ENGINE_BYTES
            assert max(dev["cudnn_workspaces"]) == exact, (name, policy, dev["cudnn_workspaces"])
        gap = dev["device_bytes"] - less["device_bytes"]
        residual = gap - w
        share = residual / less["temp_bytes"]
        worst = max(worst, share)
        bound = w + int(targets.DEVICELESS_TEMP_FRACTION * less["temp_bytes"])
        ok = dev["device_bytes"] <= less["device_bytes"] + bound
        uncovered += not ok
        label = dev.get("policy_label") or policy
        lines.append(
            f"| {name} | {label} | {less['device_bytes']:,} | {dev['device_bytes']:,} | "
            f"{gap:+,} | {w:,} | {max(dev['cudnn_workspaces'], default=0):,} | {residual:+,} | "
            f"{share:+.2%} | {less['device_bytes'] + bound:,} | {'yes' if ok else '**no**'} |"
        )
    return "\n".join(lines), worst, uncovered


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args()
    text, worst, uncovered = table()
    n = len(text.splitlines()) - 2
    summary = (
        f"{n} programs; the largest residual is {worst:.2%} of the temporaries "
        f"(DEVICELESS_TEMP_FRACTION = {targets.DEVICELESS_TEMP_FRACTION:.1%}); "
        f"programs the bound does not cover: {uncovered}"
    )
    print(text)
    print(summary)
    if a.out:
        a.out.write_text(text + "\n\n" + summary + "\n")


if __name__ == "__main__":
    main()
