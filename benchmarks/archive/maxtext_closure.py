"""Which distributions planning (or running) MaxText's train step imports (issue 22's carry).

    JAX_PLATFORMS=cpu python benchmarks/archive/maxtext_closure.py --out closure.json [-- key=value ...]
    JAX_PLATFORMS=cpu python benchmarks/archive/maxtext_closure.py --out closure.json \
        --script benchmarks/maxtext_step.py -- --out step.json --set full=remat_policy=full ...

Runs ``python -m planner maxtext`` in this process on a small Llama config (the one of
tests/test_maxtext.py, scanned; any extra ``key=value`` after ``--`` are added), or with
``--script`` that script with the arguments after ``--``; then maps the file of every module in
``sys.modules`` to the distribution whose RECORD lists it, and writes, per distribution: its
version, the bytes its installed files take (its RECORD), and the top-level names imported
from it. The standard library is left out; modules of no distribution (this repository run
from its checkout) are listed apart.
"""

from __future__ import annotations

import argparse
import importlib.metadata as md
import json
import os
import runpy
import sys
import time

SMALL_LLAMA = [
    "model_name=llama2-7b",
    "override_model_config=True",
    "base_emb_dim=64",
    "base_num_query_heads=4",
    "base_num_kv_heads=4",
    "base_mlp_dim=192",
    "base_num_decoder_layers=3",
    "head_dim=16",
    "per_device_batch_size=2",
    "max_target_length=64",
    "vocab_size=256",
    "attention=dot_product",
    "dtype=float32",
    "weight_dtype=float32",
    "steps=1",
    "scan_layers=True",
]


def installed_bytes(dist: md.Distribution) -> int:
    total = 0
    for f in dist.files or ():
        p = dist.locate_file(f)
        try:
            total += os.path.getsize(p)
        except OSError:
            pass
    return total


def closure() -> dict:
    """Every imported module's file, attributed to the distribution whose RECORD lists it
    (exact also for namespace packages such as ``google``, which several distributions share)."""
    owner: dict[str, str] = {}
    for dist in md.distributions():
        name = dist.metadata["Name"]
        for f in dist.files or ():
            owner.setdefault(os.path.realpath(dist.locate_file(f)), name)
    stdlib_dir = os.path.realpath(os.path.dirname(os.__file__))
    dists: dict[str, dict] = {}
    other = set()
    for mod_name, mod in list(sys.modules.items()):
        f = getattr(mod, "__file__", None)
        if not f:
            continue  # built-in, frozen, or a namespace package (its modules have files)
        f = os.path.realpath(f)
        n = owner.get(f)
        if n is None:
            if f.startswith(stdlib_dir) and "site-packages" not in f:
                continue  # the standard library
            other.add(mod_name.split(".")[0])
            continue
        d = dists.setdefault(n, {"modules": 0, "top_level": set()})
        d["modules"] += 1
        d["top_level"].add(mod_name.split(".")[0])
    for n, d in dists.items():
        dist = md.distribution(n)
        d["version"] = dist.version
        d["installed_bytes"] = installed_bytes(dist)
        d["top_level"] = sorted(d["top_level"])
    return {"distributions": dict(sorted(dists.items())), "not_a_distribution": sorted(other)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--script", help="run this script instead of python -m planner maxtext")
    ap.add_argument("extra", nargs="*")
    a = ap.parse_args()
    if a.script:
        argv = [a.script, *a.extra]
    else:
        argv = ["planner", "maxtext", *SMALL_LLAMA, *a.extra, "--json", "-q"]
    t0 = time.perf_counter()
    sys.argv = argv
    rc = 0
    try:
        if a.script:
            runpy.run_path(a.script, run_name="__main__")
        else:
            runpy.run_module("planner", run_name="__main__", alter_sys=True)
    except SystemExit as e:
        rc = e.code
    got = {
        "command": " ".join(["python", *argv] if a.script else ["python -m", *argv]),
        "rc": rc,
        "wall_s": time.perf_counter() - t0,
        "python": sys.version.split()[0],
        **closure(),
    }
    with open(a.out, "w") as f:
        json.dump(got, f, indent=1)
    print(f"rc={rc}, {len(got['distributions'])} distributions", file=sys.stderr)


if __name__ == "__main__":
    main()
