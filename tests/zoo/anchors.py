"""Compile every runnable zoo model under JAX's stock policies and print the memory figures.

    python -m tests.zoo.anchors [--models a,b] [--markdown] [--json out.json]

Per model and policy (``nothing_saveable``, ``dots_saveable``,
``dots_with_no_batch_dims_saveable``, ``everything_saveable``, applied through the model's
``make_with_policy``): trace + lower + compile time and ``memory_analysis()``'s
``argument + output - alias + temp`` bytes. Each compiled step is also run once on the example
arguments: the loss and the new state (parameters and optimizer state, so the gradients
through them) must be finite, and the loss must agree across the policies (remat changes
what is stored, not what is computed). Models that cannot run in this interpreter are listed
with their skip reason.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import numpy as np  # noqa: E402

from tests.zoo import MODELS  # noqa: E402
from tests.zoo import _util as u  # noqa: E402

SHORT = {
    "nothing_saveable": "nothing",
    "dots_saveable": "dots",
    "dots_with_no_batch_dims_saveable": "dots_no_batch",
    "everything_saveable": "everything",
}


def measure(entry):
    row = dict(model=entry.name, policies={}, finite=True, loss=None, loss_spread=0.0)
    losses = []
    for name in u.STOCK_POLICIES:
        step, args = entry.make_with_policy(u.stock_policy(name))
        compiled, seconds = u.compile_step(step, args)
        result = compiled(*args)
        jax.block_until_ready(result)
        loss = float(u.loss_of(result))
        finite = bool(np.isfinite(loss) and u.all_finite(u.state_of(result)))
        row["finite"] &= finite
        losses.append(loss)
        row["policies"][name] = dict(
            bytes=u.device_bytes(compiled), compile_s=seconds, loss=loss, finite=finite
        )
    row["loss"] = losses[0]
    row["loss_spread"] = float(max(losses) - min(losses))
    return row


def table(rows, skipped):
    head = (
        "| model | compile s | "
        + " | ".join(SHORT[p] for p in u.STOCK_POLICIES)
        + " | everything / nothing | loss (finite) |"
    )
    lines = [head, "|" + "---|" * (len(u.STOCK_POLICIES) + 4)]
    for r in rows:
        ps = r["policies"]
        secs = [ps[p]["compile_s"] for p in u.STOCK_POLICIES]
        b = [ps[p]["bytes"] for p in u.STOCK_POLICIES]
        ratio = b[-1] / b[0]
        flag = "" if ratio > 1.2 else " (flat)" if ratio >= 1.0 else " (**<1**)"
        lines.append(
            f"| {r['model']} | {min(secs):.2f}-{max(secs):.2f} | "
            + " | ".join(f"{x:,}" for x in b)
            + f" | {ratio:.2f}{flag} | {r['loss']:.4f} ({'yes' if r['finite'] else '**no**'}"
            + (f", spread {r['loss_spread']:.1e}" if r["loss_spread"] > 1e-5 else "")
            + ") |"
        )
    for name, reason in skipped:
        lines.append(f"| {name} | skipped: {reason} |" + " |" * (len(u.STOCK_POLICIES) + 2))
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", help="comma-separated zoo names (default: all)")
    ap.add_argument("--json", help="also write the rows as JSON to this file")
    args = ap.parse_args(argv)
    names = args.models.split(",") if args.models else list(MODELS)
    rows, skipped = [], []
    t0 = time.perf_counter()
    print(
        f"# python {sys.version.split()[0]}, jax {jax.__version__}, devices {jax.devices()}",
        flush=True,
    )
    for name in names:
        entry = MODELS[name]
        reason = entry.skip_reason()
        if reason is not None:
            skipped.append((name, reason))
            print(f"{name}: skipped ({reason})", flush=True)
            continue
        row = measure(entry)
        rows.append(row)
        ps = row["policies"]
        print(
            f"{name}: "
            + ", ".join(f"{SHORT[p]}={ps[p]['bytes']:,} B ({ps[p]['compile_s']:.2f} s)" for p in ps)
            + f"; loss {row['loss']:.4f}, finite {row['finite']}",
            flush=True,
        )
    print(f"\n# total {time.perf_counter() - t0:.0f} s\n")
    print(table(rows, skipped))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                dict(
                    python=sys.version.split()[0], jax=jax.__version__, rows=rows, skipped=skipped
                ),
                f,
                indent=1,
            )
    return 0 if all(r["finite"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
