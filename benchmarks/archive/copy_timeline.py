"""Per-copy timelines out of profiler traces, small enough to bring back from the device
(issue 18: where each host copy starts and ends against the kernels around it; the
``.xplane.pb`` files are tens of MB, over the device tool's 16 MiB a file).

    python benchmarks/offload_must_show.py run ... --keep-traces --out OUT
    python benchmarks/archive/copy_timeline.py OUT/traces --out OUT/timelines

For every ``*.xplane.pb`` in the folder: ``<name>.json.gz`` with the step windows and, for
the first step window, every device event in it (kind compute / d2h / h2d / copy_other, the
HLO op, the stream, start and duration in microseconds from the window's start).
"""

from __future__ import annotations

import argparse
import gzip
import json
from pathlib import Path


def timeline(path: Path) -> dict:
    from planner._src.profiling.xplane import read_trace

    r = read_trace(str(path))
    windows = [(float(w[0]), float(w[1])) for w in r.step_windows]
    out = {
        "trace": path.name,
        "step_source": r.step_source,
        "step_windows_ms": [(s / 1e6, (e - s) / 1e6) for s, e in windows],
        "events": [],
    }
    if not windows:
        return out
    s0, e0 = windows[0]
    for ev in r.events:
        if ev.end_ns < s0 or ev.start_ns > e0:
            continue
        out["events"].append(
            (
                ev.kind,
                ev.hlo_op or ev.name[:60],
                ev.line,
                round((ev.start_ns - s0) / 1e3, 2),
                round((ev.end_ns - ev.start_ns) / 1e3, 2),
            )
        )
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("traces")
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    dst = Path(a.out)
    dst.mkdir(parents=True, exist_ok=True)
    for p in sorted(Path(a.traces).glob("*.xplane.pb")):
        t = timeline(p)
        with gzip.open(dst / (p.name.removesuffix(".xplane.pb") + ".json.gz"), "wt") as f:
            json.dump(t, f)
        kinds = {}
        for e in t["events"]:
            kinds[e[0]] = kinds.get(e[0], 0) + 1
        print(p.name, t["step_windows_ms"][:3], kinds, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
