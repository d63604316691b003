"""Several GPUs of one host (issue 44), in one command: the host link when 1, 2, 4, 8 GPUs copy
at once, the hiding of a layer's offload when every GPU offloads, and a Llama-style step
sharded FSDP over the GPUs, planned per device at 4 budgets and run capped at each beside
full remat and the stock policies.

    # on an N-GPU host (the device tool: benchmarks/results/multi-gpu-2026-12-06.md has the
    # call; --resume-from skips what an earlier call measured):
    python3 benchmarks/multi_gpu.py run --out $OUT --budget-s 540 --resume-from DIR
    # a CPU dry run of every section, 8 fake devices, tiny model (tests/test_several_gpus.py):
    XLA_FLAGS=--xla_force_host_platform_device_count=8 JAX_PLATFORMS=cpu \\
        python benchmarks/multi_gpu.py run --dry-run --out /tmp/multi
    # deviceless plans on a CPU (JAX with the CUDA plugin): 8 x H200 and a 4-GPU GB200 tray
    JAX_PLATFORMS=cpu python benchmarks/multi_gpu.py plan --out DIR --hardware h200:8,gb200:4
    # the tables
    python benchmarks/multi_gpu.py summarize --out DIR

Sections of ``run`` (``--sections``), each record one JSON line of OUT/records.jsonl with a
``key``; a key already there (or in ``--resume-from``'s records) is not measured again:

* ``link``: per count n of 1, 2, 4, 8 (up to the host's GPUs), one SPMD program over the first
  n devices copies a ``--gib`` GiB shard per device from HBM to pinned host memory and back
  (``jax.jit`` of the identity with ``memory_kind`` out shardings; and ``jax.device_put``):
  the median of ``--reps`` runs, per-GPU bytes/s per direction. The profile's ``link.shared``
  rows are these figures (cost_models/_sharing.py).
* ``hiding``: the FSDP Llama step over 1 GPU and over all of them, saving the layer input
  (``decoder_layer_input``) or offloading it, the rest rematerialized; the offload's
  exposed time per step (offload - save) against its copy time at the measured per-GPU
  rate: the share hidden when every GPU offloads at once.
* ``plans``: the same step over all GPUs, planned on the machine (``planner.Planner``, the
  h200 profile, whose link rate is its ``link.shared`` row for N GPUs; 4 budgets per device
  from above full remat's predicted peak to the fastest plan's, ``plan_budgets``); each plan run in a fresh process capped
  at its budget per device (``XLA_PYTHON_CLIENT_MEM_FRACTION``), and full remat and the
  stock policies uncapped (their peaks say whether they fit): step time (median of 3 after
  a warm-up), peak bytes per device (the largest of the devices), and the plan's
  prediction.

Nothing here is measured on a CPU: ``--dry-run`` runs the code paths at a tiny size, each
job in this process (``--subprocess``: a fresh one, as on the device). The contention
model's predicted effect on offloading the step, deviceless (no plan):
``XLA_FLAGS=--xla_force_host_platform_device_count=8 python benchmarks/multi_gpu.py _effect
h200 8 DIR``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks import multi_gpu_plans as mp  # noqa: E402

COUNTS = (1, 2, 4, 8)
SECTIONS = ("link", "hiding", "plans")
STOCKS = ("nothing_saveable", "dots_saveable", "everything_saveable")
DRY_STOCKS = ("nothing_saveable", "everything_saveable")


# ------------------------------------------------------------------ the step


def concrete(args):
    """Arrays for abstract ``args``, made on their devices with their shardings."""
    import jax
    import jax.numpy as jnp

    leaves, tree = jax.tree.flatten(args)
    out = []
    for k, a in enumerate(leaves):
        key = jax.random.key(k)
        if jnp.issubdtype(a.dtype, jnp.integer):
            f = lambda key, a=a: jax.random.randint(key, a.shape, 0, 256, a.dtype)  # noqa: E731
        else:
            f = lambda key, a=a: (0.02 * jax.random.normal(key, a.shape)).astype(a.dtype)  # noqa: E731
        out.append(jax.jit(f, out_shardings=a.sharding)(key))
    return jax.tree.unflatten(tree, out)


def policy_step(step, spec: dict):
    """``step`` under ``spec``'s policy: {"kind": "stock", "name"}, {"kind": "names",
    "saved", "offloaded"}, or {"kind": "plan", "file"}."""
    import planner
    from planner._src import policies
    from planner._src.emit.apply import apply, binding

    if spec["kind"] == "plan":
        return planner.load_plan(spec["file"]).apply(step)
    if spec["kind"] == "stock":
        pol = policies.STOCK[spec["name"]].policy()
    else:
        pol = policies._names(saved=spec.get("saved", ()), offloaded=spec.get("offloaded", ()))
    return apply(step, binding({}, pol))


def time_steps(fn, args, steps: int = 3) -> tuple[float, float]:
    """(compile + first step seconds, median step seconds); the state is threaded through."""
    import jax

    state, batch = args
    t = time.perf_counter()
    state, loss = fn(state, batch)
    jax.block_until_ready(loss)
    first = time.perf_counter() - t
    times = []
    for _ in range(steps):
        t = time.perf_counter()
        state, loss = fn(state, batch)
        jax.block_until_ready((state, loss))
        times.append(time.perf_counter() - t)
    return first, statistics.median(times)


def peak_bytes() -> int | None:
    import jax

    peaks = [(d.memory_stats() or {}).get("peak_bytes_in_use") for d in jax.local_devices()]
    peaks = [p for p in peaks if p is not None]
    return max(peaks) if peaks else None


def job(spec: dict) -> dict:
    """One step run (a fresh process: the memory cap and the peak are its own)."""
    import jax

    step, abstract = mp.abstract_step(spec["devices"], spec["dry"])
    fn = policy_step(step, spec["policy"])
    args = concrete(abstract)
    first, step_s = time_steps(fn, args, spec.get("steps", 3))
    return {
        "first_s": first,
        "step_s": step_s,
        "peak_bytes": peak_bytes(),
        "backend": jax.default_backend(),
        "device_kind": jax.devices()[0].device_kind,
    }


# ------------------------------------------------------------------ sections


def link_rates(n: int, gib: float, reps: int) -> dict:
    """Per-GPU bytes/s of D2H and H2D while ``n`` devices copy their shards at once."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    devs = jax.devices()[:n]
    kinds = {m.kind for m in devs[0].addressable_memories()}
    host = "pinned_host" if "pinned_host" in kinds else "unpinned_host"
    mesh = Mesh(devs, ("d",))
    on_dev = NamedSharding(mesh, P("d"), memory_kind="device")
    on_host = NamedSharding(mesh, P("d"), memory_kind=host)
    per_dev = int(gib * 2**30) // 4
    x = jax.jit(lambda: jnp.ones((n * per_dev,), jnp.float32), out_shardings=on_dev)()
    to_host = jax.jit(lambda a: a, out_shardings=on_host)
    to_dev = jax.jit(lambda a: a, out_shardings=on_dev)
    nbytes = per_dev * 4

    def timed(f, a):
        f(a).block_until_ready()  # compile, first touch of the pinned buffers
        ts = []
        for _ in range(reps):
            t = time.perf_counter()
            f(a).block_until_ready()
            ts.append(time.perf_counter() - t)
        return statistics.median(ts)

    h = to_host(x)
    out = {"host_memory_kind": host, "bytes_per_gpu": nbytes}
    out["d2h_s"] = timed(to_host, x)
    out["h2d_s"] = timed(to_dev, h)
    for d, f, a in (
        ("d2h", lambda a: jax.device_put(a, on_host), x),
        ("h2d", lambda a: jax.device_put(a, on_dev), h),
    ):
        out[f"{d}_bytes_per_s"] = nbytes / out[f"{d}_s"]
        try:
            out[f"{d}_device_put_s"] = timed(f, a)
        except jax.errors.JaxRuntimeError as e:
            # XLA:CPU of JAX 0.12.1 cannot device_put a pinned-host-layout buffer (the dry
            # run's fake devices); a GPU can, so there it is an error
            if jax.default_backend() != "cpu":
                raise
            out[f"{d}_device_put_unsupported"] = str(e).splitlines()[0]
            continue
        out[f"{d}_device_put_bytes_per_s"] = nbytes / out[f"{d}_device_put_s"]
    return out


class Run:
    """OUT/records.jsonl, resumable; each job in a fresh process under a time budget."""

    def __init__(self, a):
        self.a = a
        self.out = Path(a.out)
        self.out.mkdir(parents=True, exist_ok=True)
        self.records = self.out / "records.jsonl"
        if a.resume_from and (Path(a.resume_from) / "records.jsonl").is_file():
            old = Path(a.resume_from) / "records.jsonl"
            if not self.records.exists() or old.resolve() != self.records.resolve():
                have = self.keys()
                with open(self.records, "a") as f:
                    for line in old.read_text().splitlines():
                        if line.strip() and json.loads(line)["key"] not in have:
                            f.write(line + "\n")
        self.start = time.monotonic()

    def keys(self) -> set[str]:
        if not self.records.exists():
            return set()
        return {json.loads(x)["key"] for x in self.records.read_text().splitlines() if x.strip()}

    def get(self, key: str) -> dict | None:
        if not self.records.exists():
            return None
        for line in self.records.read_text().splitlines():
            if line.strip() and json.loads(line)["key"] == key:
                return json.loads(line)
        return None

    def left_s(self) -> float:
        return self.a.budget_s - (time.monotonic() - self.start)

    def record(self, rec: dict) -> None:
        import jax

        rec = {"dry_run": self.a.dry_run, "jax": jax.__version__, **rec}
        with open(self.records, "a") as f:
            f.write(json.dumps(rec) + "\n")
        print(json.dumps(rec)[:400], flush=True)

    def skip(self, key: str) -> bool:
        if key in self.keys():
            print(f"{key}: already in {self.records}", flush=True)
            return True
        if self.left_s() < 30:
            print(f"{key}: not started, {self.left_s():.0f} s of --budget-s left", flush=True)
            return True
        return False

    def spawn(self, spec: dict, mem_fraction: float | None = None) -> dict:
        if self.a.dry_run and not self.a.subprocess:  # fake CPU devices: no cap, no peak
            try:
                return {"status": "ok", **job(spec)}
            except Exception as e:  # noqa: BLE001  (recorded, like a failed process)
                return {"status": "failed", "log_tail": f"{type(e).__name__}: {e}"[-1500:]}
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(":")
        env.pop("XLA_PYTHON_CLIENT_MEM_FRACTION", None)
        if mem_fraction is not None:
            env["XLA_PYTHON_CLIENT_MEM_FRACTION"] = f"{mem_fraction:.4f}"
        if spec.get("xla_flags"):
            env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " " + spec["xla_flags"]).strip()
        argv = [sys.executable, __file__, "_job", json.dumps(spec)]
        limit = max(30.0, min(self.a.job_timeout_s, self.left_s()))
        try:
            p = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=limit)
        except subprocess.TimeoutExpired:
            return {"status": f"timed out after {limit:.0f} s"}
        lines = [x for x in p.stdout.splitlines() if x.startswith("RESULT ")]
        if p.returncode or not lines:
            tail = (p.stdout + p.stderr)[-1500:]
            return {"status": "failed", "returncode": p.returncode, "log_tail": tail}
        return {"status": "ok", **json.loads(lines[-1][len("RESULT ") :])}


def section_link(r: Run, n_all: int) -> None:
    for n in COUNTS:
        key = f"link/{n}"
        if n > n_all or r.skip(key):
            continue
        rec = link_rates(n, r.a.gib, r.a.reps)
        r.record({"key": key, "section": "link", "gpus": n, **rec})


def section_hiding(r: Run, n_all: int) -> None:
    counts = {1, n_all} if r.a.hiding_gpus is None else set(map(int, r.a.hiding_gpus.split(",")))
    for n in sorted(c for c in counts if c <= n_all):
        cfg = mp.config(n, r.a.dry_run)
        for what, spec in (
            ("save", {"kind": "names", "saved": [mp.OFFLOADED]}),
            ("offload", {"kind": "names", "offloaded": [mp.OFFLOADED]}),
        ):
            key = f"hiding/{n}/{what}"
            if r.skip(key):
                continue
            got = r.spawn({"devices": n, "dry": r.a.dry_run, "policy": spec})
            r.record({"key": key, "section": "hiding", "gpus": n, "policy": what, **got})
        save, off = r.get(f"hiding/{n}/save"), r.get(f"hiding/{n}/offload")
        link = r.get(f"link/{n}") or r.get(f"link/{min(c for c in COUNTS if c >= n)}")
        key = f"hiding/{n}/result"
        if save and off and link and "step_s" in save and "step_s" in off and r.skip(key) is False:
            # Per device per step: the layer input of every layer, out and back.
            nbytes = cfg.per_device_batch * cfg.seq * cfg.d_model * 2 * cfg.n_layers
            copy_s = nbytes / link["d2h_bytes_per_s"] + nbytes / link["h2d_bytes_per_s"]
            exposed = off["step_s"] - save["step_s"]
            r.record(
                {
                    "key": key,
                    "section": "hiding",
                    "gpus": n,
                    "policy": "result",
                    "bytes_per_gpu_each_way": nbytes,
                    "copy_s": copy_s,
                    "exposed_s": exposed,
                    "hidden_share": 1 - exposed / copy_s if copy_s > 0 else None,
                }
            )


def section_plans(r: Run, n_all: int) -> None:
    plans_dir = r.out / "plans"
    plans_dir.mkdir(exist_ok=True)
    key = f"plans/{n_all}/made"
    made = r.get(key)
    if made is None and not r.skip(key):
        t = time.perf_counter()
        hardware = "cpu" if r.a.dry_run else r.a.hardware
        rows = mp.make_plans(n_all, hardware, r.a.dry_run, plans_dir, r.a.points)
        made = {"key": key, "section": "plans-made", "devices": n_all, "plans": rows}
        made["wall_s"] = time.perf_counter() - t
        r.record(made)
    if made is None:
        return
    stocks = r.a.stocks.split(",") if r.a.stocks else DRY_STOCKS if r.a.dry_run else STOCKS
    hbm = None if r.a.dry_run else _hbm_bytes()
    for row in made["plans"]:
        key = f"plans/{n_all}/plan {row['plan']}"
        if "file" not in row or r.skip(key):
            continue
        frac = None if hbm is None else min(0.99, row["budget_gb"] * 1e9 / hbm)
        spec = {"devices": n_all, "dry": r.a.dry_run, "policy": {"kind": "plan"}}
        spec["policy"]["file"] = row["file"]
        spec["xla_flags"] = row.get("xla_flags") or ""
        got = r.spawn(spec, mem_fraction=frac)
        r.record(_plan_record(key, n_all, f"plan {row['plan']}", row, got))
    for name in stocks:
        key = f"plans/{n_all}/{name}"
        if r.skip(key):
            continue
        got = r.spawn(
            {"devices": n_all, "dry": r.a.dry_run, "policy": {"kind": "stock", "name": name}}
        )
        label = "full remat" if name == "nothing_saveable" else name
        r.record({"key": key, "section": "plans", "devices": n_all, "policy": label, **got})


def _plan_record(key, n, label, row, got) -> dict:
    rec = {"key": key, "section": "plans", "devices": n, "policy": label, **got}
    rec["budget_gb"] = row["budget_gb"]
    rec["predicted_step_s"] = row["predicted_step_s"]
    if got.get("peak_bytes") is not None:
        rec["fits"] = got["peak_bytes"] <= row["budget_gb"] * 1e9
    if got.get("step_s"):
        rec["predicted_over_measured"] = row["predicted_step_s"] / got["step_s"]
    return rec


def _hbm_bytes() -> float:
    import jax

    return float((jax.devices()[0].memory_stats() or {}).get("bytes_limit") or 141e9)


def ensure_ortools() -> None:
    """The planner's solver: from the carried wheels (.whl/, as gpu_suite.py) where the
    device image has none."""
    try:
        import ortools  # noqa: F401

        return
    except ImportError:
        pass
    from benchmarks.gpu_suite import _ensure_ortools

    env = dict(os.environ, PYTHONPATH=os.environ.get("PYTHONPATH", str(ROOT)))
    print("ortools:", _ensure_ortools(env), flush=True)
    os.environ["PYTHONPATH"] = env["PYTHONPATH"]
    sys.path.insert(0, "/tmp/site")


def run(a) -> None:
    import jax

    r = Run(a)
    n_all = min(len(jax.devices()), max(COUNTS))
    print(f"{n_all} devices ({jax.devices()[0].device_kind}), JAX {jax.__version__}", flush=True)
    sections = a.sections.split(",")
    if "link" in sections:
        section_link(r, n_all)
    if "hiding" in sections:
        section_hiding(r, n_all)
    if "plans" in sections:
        ensure_ortools()
        section_plans(r, n_all)
    summarize(a)


def plan_cmd(a) -> None:
    """Deviceless plans (JAX_PLATFORMS=cpu, the CUDA plugin), one process per target."""
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    for item in a.hardware_list.split(","):
        hardware, n = item.split(":")
        argv = [sys.executable, __file__, "_plan", hardware, n, str(out)]
        env = dict(os.environ, XLA_FLAGS=f"--xla_force_host_platform_device_count={n}")
        env["PYTHONPATH"] = str(ROOT)
        t = time.perf_counter()
        p = subprocess.run(argv, env=env, capture_output=True, text=True)
        print(p.stdout[-3000:], p.stderr[-3000:] if p.returncode else "", flush=True)
        print(f"{item}: {time.perf_counter() - t:.0f} s, returncode {p.returncode}", flush=True)


def summarize(a) -> None:
    out = Path(a.out)
    recs = []
    for name in ("records.jsonl",):
        f = out / name
        if f.exists():
            recs += [json.loads(x) for x in f.read_text().splitlines() if x.strip()]
    lines = ["# Several GPUs: measured (benchmarks/multi_gpu.py)", ""]
    if any(r.get("dry_run") for r in recs):
        lines += ["**Dry run on fake CPU devices: nothing here is a GPU measurement.**", ""]
    link = [r for r in recs if r.get("section") == "link"]
    if link:
        lines += [
            "| GPUs copying at once | d2h GB/s per GPU | h2d GB/s per GPU | device_put d2h | device_put h2d |"
        ]
        lines += ["|---|---|---|---|---|"]

        def rate(r, key):
            v = r.get(key)
            return "unsupported here" if v is None else f"{v / 1e9:.2f}"

        for r in sorted(link, key=lambda r: r["gpus"]):
            lines.append(
                f"| {r['gpus']} | {r['d2h_bytes_per_s'] / 1e9:.2f} | {r['h2d_bytes_per_s'] / 1e9:.2f}"
                f" | {rate(r, 'd2h_device_put_bytes_per_s')}"
                f" | {rate(r, 'h2d_device_put_bytes_per_s')} |"
            )
        lines.append("")
    for r in recs:
        if r.get("section") == "hiding" and r.get("policy") == "result":
            lines.append(
                f"- hiding, {r['gpus']} GPU(s) offloading at once: copy {1e3 * r['copy_s']:.1f} ms, "
                f"exposed {1e3 * r['exposed_s']:.1f} ms per step, hidden share {r['hidden_share']:.2f}"
            )
    plans = [r for r in recs if r.get("section") == "plans"]
    if plans:
        lines += [
            "",
            "| policy | budget GB | step ms | predicted ms | peak GB per device | fits | status |",
        ]
        lines += ["|---|---|---|---|---|---|---|"]
        for r in plans:
            step = f"{1e3 * r['step_s']:.1f}" if r.get("step_s") else "-"
            pred = f"{1e3 * r['predicted_step_s']:.1f}" if r.get("predicted_step_s") else "-"
            peak = f"{r['peak_bytes'] / 1e9:.2f}" if r.get("peak_bytes") else "-"
            lines.append(
                f"| {r['policy']} | {r.get('budget_gb', '-') if not r.get('budget_gb') else round(r['budget_gb'], 2)}"
                f" | {step} | {pred} | {peak} | {r.get('fits', '-')} | {r.get('status', '')} |"
            )
    (out / "summary.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="on the N-GPU host (or --dry-run on fake CPU devices)")
    r.add_argument("--out", required=True)
    r.add_argument("--resume-from", default=None)
    r.add_argument("--sections", default=",".join(SECTIONS))
    r.add_argument("--budget-s", type=float, default=540.0)
    r.add_argument("--job-timeout-s", type=float, default=240.0)
    r.add_argument("--gib", type=float, default=None, help="GiB per GPU per copy (1; dry 0.01)")
    r.add_argument("--reps", type=int, default=5)
    r.add_argument("--hardware", default="h200")
    r.add_argument("--points", type=int, default=4, help="plans: budgets per device")
    r.add_argument("--stocks", default=None, help="plans: stock policies run beside them")
    r.add_argument("--hiding-gpus", default=None, help="hiding: GPU counts (default 1 and all)")
    r.add_argument("--dry-run", action="store_true")
    r.add_argument(
        "--subprocess",
        action="store_true",
        help="dry run: each job in a fresh process as on the device (default: in this one)",
    )
    p = sub.add_parser("plan", help="deviceless plans on a CPU")
    p.add_argument("--out", required=True)
    p.add_argument("--hardware", dest="hardware_list", default="h200:8,gb200:4")
    s = sub.add_parser("summarize")
    s.add_argument("--out", required=True)
    if argv is None:
        argv = sys.argv[1:]
    if argv[:1] == ["_job"]:
        spec = json.loads(argv[1])
        print("RESULT " + json.dumps(job(spec)), flush=True)
        return 0
    if argv[:1] == ["_effect"]:  # XLA_FLAGS=--xla_force_host_platform_device_count=N
        mp.effect(argv[1], int(argv[2]), Path(argv[3]))
        return 0
    if argv[:1] == ["_plan"]:
        mp.plan_one(argv[1], int(argv[2]), Path(argv[3]))
        return 0
    a = ap.parse_args(argv)
    if a.cmd == "run":
        if a.gib is None:
            a.gib = 0.01 if a.dry_run else 1.0
        if a.dry_run:
            a.reps = min(a.reps, 2)
        run(a)
    elif a.cmd == "plan":
        plan_cmd(a)
    else:
        summarize(a)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
