"""Command line: `python -m cost_models {profiles,calibrate,cpu-profile,overlap-probe}`."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from ._calibrate import calibrate, measure_overlap
from ._cpu_profile import this_cpu_profile
from ._profile_files import list_profiles


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cost_models")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("profiles", help="list the shipped hardware profiles")

    cal = commands.add_parser("calibrate", help="measure the default JAX device")
    cal.add_argument("--out", help="write the measured profile JSON here")
    cal.add_argument("--base", help="profile to start from (default: matched to the device)")
    cal.add_argument("--sizes-mb", type=float, nargs="+", default=[256, 1024])
    cal.add_argument("--repeats", type=int, default=5)
    cal.add_argument("--matmul-n", type=int)

    cpu = commands.add_parser(
        "cpu-profile", help="this machine's calibrated CPU profile (hardware='cpu'), as JSON"
    )
    cpu.add_argument("--refresh", action="store_true", help="measure again (a few seconds)")

    probe = commands.add_parser(
        "overlap-probe", help="print the copy/compute overlap as JSON (run under XLA_FLAGS)"
    )
    probe.add_argument("--size-mb", type=float, default=256)
    probe.add_argument("--repeats", type=int, default=5)
    probe.add_argument("--matmul-n", type=int)

    args = parser.parse_args(argv)
    if args.command == "profiles":
        print("\n".join(list_profiles()))
    elif args.command == "calibrate":
        profile = calibrate(
            out_path=args.out,
            base=args.base,
            sizes_mb=tuple(args.sizes_mb),
            repeats=args.repeats,
            matmul_n=args.matmul_n,
        )
        print(json.dumps(profile.to_json(), indent=2))
    elif args.command == "cpu-profile":
        profile = this_cpu_profile(refresh=args.refresh)
        print(json.dumps(profile.to_json(), indent=2))
    else:
        measured = measure_overlap(
            size_mb=args.size_mb, repeats=args.repeats, matmul_n=args.matmul_n
        )
        print(json.dumps(measured.to_json()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
