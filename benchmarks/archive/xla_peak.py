"""What XLA's buffer assignment holds at the peak of a compiled module (issue 14,
requirement 3; benchmarks/results/memory-model-2026-12-04.md).

    XLA_FLAGS="--xla_dump_to=DIR --xla_dump_hlo_as_text --xla_dump_hlo_module_re=.*train_step.*" \\
        python your_step.py
    python benchmarks/archive/xla_peak.py DIR [--module train_step] [--min-bytes 65536]

Reads the last ``*<module>.*after_optimizations-buffer-assignment.txt`` and its
``-live-range.txt`` in DIR, and for every position of the flattened HLO sequence adds up the
byte ranges (allocation, offset, size) of the values live there, so buffers that share memory
count once. Prints the position of the largest total, the values live there (the largest
first) and a coarse timeline. The largest total equals ``temp_size_in_bytes`` of
``memory_analysis()`` when the peak is in the temp allocation.
"""

from __future__ import annotations

import argparse
import glob
import re


def _files(d: str, module: str) -> tuple[str, str]:
    def last(suffix):
        found = sorted(glob.glob(f"{d}/*{module}*after_optimizations-{suffix}.txt"))
        if not found:
            raise SystemExit(
                f"no *{module}*after_optimizations-{suffix}.txt in {d}: compile with "
                "XLA_FLAGS=--xla_dump_to=DIR --xla_dump_hlo_as_text (XLA:CPU) first"
            )
        return found[-1]

    return last("buffer-assignment"), last("live-range")


def live_values(d: str, module: str = "train_step"):
    """``(sequence, values)``: position -> instruction name, and per value (name, size,
    allocation, offset, shape, (first, last) position or None)."""
    ba, lr = _files(d, module)
    seq, ranges = {}, {}
    for line in open(lr):
        if m := re.match(r"\s+(\d+):(\S+)$", line):
            seq[int(m.group(1))] = m.group(2)
        elif m := re.match(r"\s+(\S+)\{([^}]*)\}:(\d+)-(\d+)", line):
            ranges[(m.group(1), m.group(2))] = (int(m.group(3)), int(m.group(4)))
    values, alloc = [], None
    for line in open(ba):
        if m := re.match(r"allocation (\d+): size (\d+)", line):
            alloc = int(m.group(1))
        elif m := re.match(
            r"\s+value: <\d+ (\S+)(?: \(phi\))? @\S*> \(size=(\d+),offset=(\d+)\): (\S+)", line
        ):
            name, size, off, shape = m.group(1), int(m.group(2)), int(m.group(3)), m.group(4)
            idx = re.match(r"(.*)\{(.*)\}$", name)
            key = (idx.group(1), idx.group(2)) if idx else (name, "")
            values.append((name, size, alloc, off, shape, ranges.get(key)))
    return seq, values


def occupancy(seq, values) -> list[int]:
    """Bytes in use at each position: the union of the live values' (allocation, offset)
    ranges."""
    out = []
    for t in range(max(seq) + 1):
        spans = sorted((a, o, o + s) for _, s, a, o, _, r in values if r and r[0] <= t <= r[1])
        total, last = 0, (None, -1)
        for a, lo, hi in spans:
            end = last[1] if last[0] == a else -1
            if hi > end:
                total += hi - max(lo, end)
                last = (a, hi)
        out.append(total)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dump_dir")
    ap.add_argument("--module", default="train_step")
    ap.add_argument("--min-bytes", type=int, default=65536)
    a = ap.parse_args(argv)
    seq, values = live_values(a.dump_dir, a.module)
    occ = occupancy(seq, values)
    t = max(range(len(occ)), key=occ.__getitem__)
    print(f"peak {occ[t]:,} bytes at position {t} ({seq.get(t)})")
    for name, size, _, _off, shape, _ in sorted(
        (v for v in values if v[5] and v[5][0] <= t <= v[5][1]), key=lambda v: -v[1]
    ):
        if size >= a.min_bytes:
            print(f"  {size:>12,}  {name}  {shape}")
    step = max(1, len(occ) // 40)
    print("timeline (MB):", " ".join(f"{i}:{occ[i] / 1e6:.1f}" for i in range(0, len(occ), step)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
