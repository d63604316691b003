"""The GPU evidence in one command: every H200 measurement the docs quote, in order of value,
resumable across device calls, packed for the device tool's return (issue 43).

Device etiquette (the integrator calls the device tool; this script never does):

1. Ask ``status`` first: it is free. Do not call inside a ``none_now`` window (each refused
   call costs device time and restarts the window); never poll for a machine.
2. One call per batch of work: the command of ``benchmarks/gpu_suite_call.txt`` (under 2,000
   characters), ``carry: [".whl"]`` (ortools and its two dependencies as wheels: the image
   has JAX 0.11.2 and its CUDA plugin, no ortools), ``timeout_s: 600``. The suite stops
   starting measurements when the next one's expected time exceeds what is left of
   ``--budget-s 540`` and always leaves ``OUT/suite.tgz``, ``OUT/records.jsonl`` and
   ``OUT/summary.md``: three files, within the tool's 8 files of 16 MiB.
3. After a call, extract what came back (``files_at``/suite.tgz) into
   ``benchmarks/results/h200-suite-DATE/`` (replacing it: the newest tarball holds every call
   of the campaign) and commit it; every call of the campaign names that folder in
   ``--resume-from`` (the first finds none and starts from the top; a later one skips what
   is measured). Then ``summarize`` and ``docs --from`` on it (gpu_suite_call.txt).
4. A session has 30 minutes of device time, a fresh machine per call (a minute or more to
   start): about three 540 s calls. The whole list (``list``) needs four or five.

Commands:

    # 1. on a CPU beforehand, with the H200's jaxlib (JAX 0.11.2 + its CUDA plugin:
    #    deviceless XLA:GPU; /work/venvs/h200), every plan the suite runs (about an hour:
    #    the throughput searches are most of it; ``--only`` picks items):
    JAX_PLATFORMS=cpu python benchmarks/gpu_suite.py plan --out benchmarks/results/gpu-suite-plans-DATE
    # 2. on the H200 (benchmarks/gpu_suite_call.txt):
    python3 benchmarks/gpu_suite.py run --out $OUT --budget-s 540 --resume-from benchmarks/results/h200-suite-DATE
    # 3. here: the one page of results, and the docs' generated block from it
    python benchmarks/gpu_suite.py summarize --out benchmarks/results/h200-suite-DATE
    python benchmarks/gpu_suite.py docs --from benchmarks/results/h200-suite-DATE
    # what runs, in which order, with its expected seconds and where they come from
    python benchmarks/gpu_suite.py list
    # a CPU dry run of the whole flow (tiny models; makes its tiny plans first if missing)
    python benchmarks/gpu_suite.py run --dry-run --out /tmp/x --budget-s 120

Each measurement is one fresh process running an existing script (offload_must_show.py,
planning_time_on_gpu_host.sh, gpu_bench.py replay / h200_zoo.sh, throughput_h200.py measure,
state_offload_h200.py, param_state_h200.py, deviceless_gap.py, loss_agreement.py,
zoo_on_gpu_host.sh), writing into WORK/raw/ID/; after each one, a JSON line goes to
OUT/records.jsonl (its command, the code's git commit or tree id, the JAX version, start and
end, status) and the tarball and summary are rewritten, so a call cut at its limit keeps
what it measured. Plans: ``--plans`` (default: the newest
benchmarks/results/gpu-suite-plans-*), else the committed plans each script used last
(offload-plans-2026-12-06, throughput-plans-2026-12-04c, state-offload-config-2026-12-04);
the zoo without CPU-made plans is planned on the GPU (h200_zoo.sh).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import hashlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
PY = sys.executable
_SAFE = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}  # tar members as data
TARBALL_LIMIT = 15 * 2**20  # the device returns files of at most 16 MiB
PACK_RESERVE_S = 20.0  # kept back from --budget-s for the last tarball
DRY_PLANS = Path(tempfile.gettempdir()) / "gpu-suite-plans-dry"
DRY_BUDGET_GB = "0.08"  # the tiny Llama (GPU_BENCH_DRY_RUN) compiles to 44 MB on XLA:CPU
# The plans each script ran last, committed: used where --plans has none of its own.
FALLBACK = {
    "must_show": RESULTS / "offload-plans-2026-12-06",
    "throughput": RESULTS / "throughput-plans-2026-12-04c",
    "state": RESULTS / "state-offload-config-2026-12-04",
    "train_state": RESULTS / "train-state-h200-plans-2026-12-07",
}
# The zoo of h200_zoo.sh (h200-2026-12-05-zoo.md): gpu_bench.py BENCH with these overrides.
ZOO = {
    "loop": "layer_loop=loop,batch=4,attention_impl=cudnn,prevent_cse=true",
    "parallel": "parallel_residual=true,batch=4,attention_impl=cudnn",
}
STATE_HBM_GB = 59.1  # state_offload_h200.py's budget (state-offload-config-2026-12-04.md)


# ---------------------------------------------------------------------------- measurements


@dataclasses.dataclass
class Command:
    argv: list[str]
    env: dict = dataclasses.field(default_factory=dict)
    plans: str | None = None  # the plans it runs (a path relative to the repository)
    expected_s: float | None = None  # overrides the measurement's (another form of it)
    setup: Callable[[], None] | None = None  # run just before the command (copy plans)


@dataclasses.dataclass
class Unrunnable:
    status: str  # "no_plans" or "needs_gpu"
    why: str


@dataclasses.dataclass
class Ctx:
    work: Path
    plans: Path | None
    dry: bool
    left_s: float = 0.0  # seconds this measurement may take

    def inner_budget(self) -> str:
        """The --budget-s handed to a script: what is left, less time to write its summary."""
        return str(int(max(30.0, self.left_s - 10.0)))

    def plan_file(self, kind: str, name: str) -> Path | None:
        """A plan file of --plans (KIND/NAME), else (not in a dry run) the committed one."""
        for d in ([self.plans / kind] if self.plans else []) + (
            [FALLBACK[kind]] if kind in FALLBACK and not self.dry else []
        ):
            if (d / name).is_file():
                return d / name
        return None


@dataclasses.dataclass(frozen=True)
class Measurement:
    id: str
    group: str
    title: str
    expected_s: float  # on the H200
    source: str  # where expected_s comes from
    build: Callable[[Ctx, Path], Command | Unrunnable]
    # its smallest form on this 2-core CPU: 18-55 s each in dry runs of 2026-12-06 (load 8-11),
    # and at least the script's own guard (gpu_bench's driver starts a job with 30-45 s left)
    dry_expected_s: float = 60.0
    always: bool = False  # run again in every call (it reads every record so far)
    ok_rcs: tuple = (0,)


def _rel(p: Path | str) -> str:
    try:
        return str(Path(p).resolve().relative_to(ROOT))
    except ValueError:
        return str(p)


def _must_show(model: str):
    def build(ctx: Ctx, raw: Path):
        f = ctx.plan_file("must_show", f"{model}.json")
        if f is None:
            return Unrunnable("no_plans", f"no must_show/{model}.json in --plans")
        argv = [PY, "benchmarks/offload_must_show.py", "run", "--plans", _rel(f.parent)]
        argv += ["--models", model, "--out", str(raw), "--budget-s", ctx.inner_budget()]
        return Command(argv + (["--steps", "1"] if ctx.dry else []), plans=_rel(f))

    return build


def _planning_time(modes: str):
    def build(ctx: Ctx, raw: Path):
        if ctx.dry:
            if modes != "default":
                return Unrunnable("needs_gpu", "XLA's autotune results are the GPU's")
            argv = [PY, "benchmarks/gpu_bench.py", "plan", "--save", str(raw / "run1-default.json")]
            argv += ["--hardware", "cpu", "--budgets", DRY_BUDGET_GB]
            return Command(argv + ["--config", "layer_loop=loop,prevent_cse=true"])
        argv = ["bash", "benchmarks/planning_time_on_gpu_host.sh", str(raw), ctx.inner_budget()]
        # cold: no persistent compilation cache shared with the other measurements
        return Command(argv + [modes], env={"JAX_COMPILATION_CACHE_DIR": None})

    return build


def _zoo(name: str):
    def build(ctx: Ctx, raw: Path):
        f = ctx.plan_file("zoo", f"{name}.json")
        if f is not None:
            argv = [PY, "benchmarks/gpu_bench.py", "replay", "--plans", _rel(f), "--out", str(raw)]
            argv += ["--budget-s", ctx.inner_budget(), "--steps", "1" if ctx.dry else "10"]
            if ctx.dry:
                argv += ["--stock", "nothing_saveable,dots_saveable,everything_saveable"]
            return Command(argv, plans=_rel(f))
        if ctx.dry:
            return Unrunnable("no_plans", f"no zoo/{name}.json in --plans")
        # no CPU-made plans: planned on the GPU first, as h200-2026-12-05-zoo.md was
        argv = ["bash", "benchmarks/h200_zoo.sh", name, ZOO[name], str(raw), ctx.inner_budget()]
        return Command(argv, expected_s={"loop": 300.0, "parallel": 240.0}[name])

    return build


def _throughput(model: str):
    def build(ctx: Ctx, raw: Path):
        f = ctx.plan_file("throughput", f"plan-{model}.json")
        if f is None:
            return Unrunnable("no_plans", f"no throughput/plan-{model}.json in --plans")
        job = json.loads(f.read_text()).get("job", {})
        argv = [PY, "benchmarks/throughput_h200.py", "measure", "--out", str(raw)]
        argv += ["--models", model, "--hbm-gb", str(job.get("hbm_gb", 40.0))]
        argv += ["--measure-stock", "1" if ctx.dry else "3", "--steps", "1" if ctx.dry else "10"]
        argv += ["--budget-s", ctx.inner_budget()]

        def setup():
            raw.mkdir(parents=True, exist_ok=True)
            shutil.copy(f, raw / f"plan-{model}.json")

        return Command(argv, plans=_rel(f), setup=setup)

    return build


def _state(only: str):
    def build(ctx: Ctx, raw: Path):
        if ctx.dry:
            return Unrunnable(
                "needs_gpu", "a 7.2 B-parameter step with state in pinned host memory"
            )
        d = ctx.plans / "state" if ctx.plans else None
        if (
            d is None
            or not (d / "mixed-m0.json").is_file()
            or not (d / "predictions.json").is_file()
        ):
            d = FALLBACK["state"]
        argv = [PY, "benchmarks/state_offload_h200.py", "run", "--out", str(raw), "--only", only]
        return Command(argv, env={"STATE_OFFLOAD_PLANS": str(d)}, plans=_rel(d))

    return build


def _train_state(ctx: Ctx, raw: Path):
    if ctx.dry:
        return Unrunnable("needs_gpu", "a 7.2 B-parameter TrainState step with state on the host")
    f = ctx.plan_file("train_state", "plan.json")
    if f is None or not (f.parent / "job.json").is_file():
        return Unrunnable("no_plans", "no train_state/plan.json and job.json in --plans")
    argv = [PY, "benchmarks/train_state_h200.py", "run", "--plans", _rel(f.parent)]
    argv += ["--out", str(raw), "--budget-s", ctx.inner_budget()]
    return Command(argv, plans=_rel(f.parent))


def _param_state(ctx: Ctx, raw: Path):
    if ctx.dry:
        return Unrunnable("needs_gpu", "parameters in pinned host memory, timed on the device")
    return Command([PY, "benchmarks/param_state_h200.py", "--out", str(raw)])


def _smallest_budget(f: Path) -> str | None:
    plans = json.loads(f.read_text()).get("plans", {})
    ok = [b for b, spec in plans.items() if "error" not in spec]
    return min(ok, key=float) if ok else None


def _deviceless_gap(ctx: Ctx, raw: Path):
    argv = [PY, "benchmarks/deviceless_gap.py", "run", "--out", str(raw)]
    argv += ["--budget-s", ctx.inner_budget()]
    if ctx.dry:  # deviceless_gap's own dry run: tiny models; "device" is XLA:CPU here
        argv += ["--only", "llama_scan", "--policies", "nothing_saveable"]
        return Command(argv, env={"DEVICELESS_GAP_DRY_RUN": "1"})
    items = []  # each must-show model's plan at its smallest budget: deviceless vs device
    for model in ("long_context", "llama", "moe"):
        f = ctx.plan_file("must_show", f"{model}.json")
        b = _smallest_budget(f) if f else None
        if b is not None:
            items.append(f"{_rel(f)}:{b}")
    if not items:
        return Unrunnable("no_plans", "no must_show plans to compile")
    return Command(argv + ["--only", "none", "--plans", ",".join(items)], plans=",".join(items))


def _loss_agreement(ctx: Ctx, raw: Path):
    return Command([PY, "benchmarks/loss_agreement.py", "--results", str(ctx.work / "raw")])


def _zoo_table(ctx: Ctx, raw: Path):
    if ctx.dry:
        return Unrunnable("needs_gpu", "tests/zoo planned on the GPU (and penzai as a wheel)")
    return Command(["bash", "benchmarks/zoo_on_gpu_host.sh", str(raw), ctx.inner_budget()])


MS = "h200-2026-12-04-offload-must-show"
MEASUREMENTS = [
    # first: the one measurement issue 42 still waits for (a call may be the only one)
    Measurement(
        "train_state",
        "train_state",
        "7.2 B Llama + Adam in a Flax TrainState below its state's size: plan.apply of the "
        "CPU-made plan against MaxText's all-or-nothing optimizer offload (issue 42)",
        200,
        "estimate: 3-4 processes of a 7.2 B step, each as state:whole's (2 jobs 81.4 s)",
        _train_state,
    ),
    Measurement(
        "must_show:long_context",
        "must_show",
        "long-context decoder: plans capped at 4 budgets, stock policies, exposure per direction",
        130,
        f"{MS}/results-llama-long.jsonl: its 7 jobs 105.6 s of wall time",
        _must_show("long_context"),
        dry_expected_s=60,
    ),
    Measurement(
        "must_show:llama",
        "must_show",
        "Llama example (32k tokens): plans capped at 4 budgets, stock policies",
        110,
        f"{MS}/results-llama-long.jsonl: its 8 jobs 85.4 s",
        _must_show("llama"),
        dry_expected_s=60,
    ),
    Measurement(
        "must_show:moe",
        "must_show",
        "MoE example: plans capped at 4 budgets, stock policies",
        130,
        f"{MS}/results-moe.jsonl: its 5 jobs 110.1 s",
        _must_show("moe"),
        dry_expected_s=60,
    ),
    Measurement(
        "planning_time:cold",
        "planning_time",
        "planning time of one budget, 8-layer Python-loop Llama, no autotune results on disk",
        125,
        "planning-time-2026-12-05.md: 4 runs in 285 s, 05b: 4 in 214 s (a run 55-75 s); the "
        "script starts a run only with 110 s of its limit left",
        _planning_time("default"),
        dry_expected_s=30,
    ),
    Measurement(
        "zoo:loop",
        "zoo",
        "Python-loop Llama: CPU-made plans capped at 4 budgets beside 8 stock policies",
        215,
        "h200-2026-12-05-zoo/loop/results.jsonl: 11 jobs 205.0 s (planned on the GPU "
        "first: 292 s, h200-2026-12-05-zoo.md)",
        _zoo("loop"),
        dry_expected_s=60,
    ),
    Measurement(
        "zoo:parallel",
        "zoo",
        "parallel-residual Llama: CPU-made plans capped at 4 budgets beside 8 stock policies",
        200,
        "h200-2026-12-05-zoo/parallel/results.jsonl: 11 jobs 190.2 s (planned on the GPU "
        "first: 230 s)",
        _zoo("parallel"),
        dry_expected_s=60,
    ),
    Measurement(
        "throughput:llama",
        "throughput",
        "throughput: the planner's (batch, plan) vs the estimator's 3 best (batch, stock)",
        100,
        "h200-2026-12-04-throughput-c.md: the llama measure call, 95 s",
        _throughput("llama"),
        dry_expected_s=60,
    ),
    Measurement(
        "throughput:moe",
        "throughput",
        "throughput of the MoE example, the same way",
        95,
        "h200-2026-12-04-throughput-c.md: the moe measure call, 86 s",
        _throughput("moe"),
        dry_expected_s=60,
    ),
    Measurement(
        "state:mixed",
        "state",
        "7.2 B Llama + Adam at 59.1 GB: the mixed plan (activations + Adam leaves on the host)",
        60,
        "h200-2026-12-05-state-offload-c/results-mixed.jsonl: one job 24.0 s (3 if the "
        "device compile is over)",
        _state("mixed"),
    ),
    Measurement(
        "state:remat",
        "state",
        "full remat with the whole state in HBM at its largest batch",
        60,
        "h200-2026-12-05-state-offload-c/results-remat.jsonl: 4 jobs 34.9 s",
        _state("remat"),
    ),
    Measurement(
        "state:whole",
        "state",
        "the whole optimizer state on the host (MaxText's optimizer_memory_host_offload)",
        100,
        "h200-2026-12-04-state-offload-b/results-run2-whole.jsonl: 2 jobs 81.4 s",
        _state("whole"),
    ),
    Measurement(
        "param_state",
        "param_state",
        "parameters and Adam moments in pinned host memory: bytes and step per placement",
        130,
        "h200-2026-12-04-param-state/results-inplace.jsonl: 5 variants, compile 4-14 s and "
        "12 steps of 0.11-0.20 s each, plus about 10 s to start each process",
        _param_state,
    ),
    Measurement(
        "deviceless_gap",
        "deviceless_gap",
        "deviceless vs device compiled bytes of the must-show plans at their smallest budgets",
        160,
        "h200-2026-12-03-deviceless/gap4/results.jsonl: 8 device compiles in 176.2 s; here 6",
        _deviceless_gap,
        dry_expected_s=50,
    ),
    Measurement(
        "planning_time:autotune_cache",
        "planning_time",
        "planning time again with XLA's autotune results kept on disk (fill, then read)",
        185,
        "planning-time-2026-12-05b.md call 1: 55.7 s (fill) + 27.7 s (read); the script "
        "starts a run only with 110 s of its limit left",
        _planning_time("cache cache"),
    ),
    Measurement(
        "loss_agreement",
        "loss_agreement",
        "planned vs unplanned losses over every record of the suite so far",
        10,
        "loss_agreement.py reads records only (no device work)",
        _loss_agreement,
        dry_expected_s=5,
        always=True,
        ok_rcs=(0, 1),  # 1: a plan's loss outside the tolerance (a finding, in the table)
    ),
    Measurement(
        "zoo_table",
        "zoo_table",
        "tests/zoo planned on the GPU at 3 budgets each (no runs; penzai models need its wheel)",
        480,
        "zoo-2026-12-02.md: zoo_on_gpu_host.sh OUT 480",
        _zoo_table,
    ),
]
BY_ID = {m.id: m for m in MEASUREMENTS}


def measured(group: str, raw: Path) -> str:
    """ "ok" if the script's records hold a measurement, "partial" if it also skipped some
    for want of time (gpu_bench's driver), "empty" if none: the last two run again in the
    next call."""
    if group == "loss_agreement":
        return "ok"
    if group == "planning_time":
        runs = [_read_json(f) for f in raw.glob("run*.json")]
        return "ok" if any("plans" in r for r in runs) else "empty"
    if group == "zoo_table":
        f = raw / "gpu-table.md"
        rows = f.read_text().splitlines() if f.is_file() else []
        return "ok" if any(r.startswith("| ") and "no result" not in r for r in rows) else "empty"
    recs = [r for f in sorted(raw.rglob("*.jsonl")) for r in _read_jsonl(f)]
    if group == "param_state":
        return "ok" if any("step_ms_median" in r for r in recs) else "empty"
    ok = any(r.get("ok") is True for r in recs)
    cut = any(r.get("kind") == "skipped" for r in recs) or any(
        r.get("error") == "not started: out of time" for r in recs
    )
    return "empty" if not ok else ("partial" if cut else "ok")


def _read_json(f: Path) -> dict:
    try:
        return json.loads(f.read_text())
    except (OSError, ValueError):
        return {}


# ---------------------------------------------------------------------------- processes


# Its own process group (killed whole at its timeout), not its own session: the device tool
# ends a command's session when the command returns, so nothing outlives the call.
_GROUP = {"process_group": 0} if sys.version_info >= (3, 11) else {"preexec_fn": os.setpgrp}
_CHILD: dict = {}  # the measurement running now, for the SIGTERM handler


def _kill_group(p) -> None:
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def run_command(argv, env, cwd, timeout, log_path) -> tuple[int, bool]:
    """One measurement's process and its children, killed together at the timeout; stdout
    and stderr to ``log_path``. (rc, timed out)."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "w") as log:
        p = subprocess.Popen(argv, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT, **_GROUP)
        _CHILD["p"] = p
        try:
            rc, cut = p.wait(timeout=timeout), False
        except subprocess.TimeoutExpired:
            try:
                os.killpg(p.pid, signal.SIGTERM)  # a driver may still write its records
                p.wait(timeout=10)
            except (subprocess.TimeoutExpired, ProcessLookupError):
                pass
            rc, cut = -9, True
        _kill_group(p)  # what it started and left behind (no worker keeps the GPU)
        p.wait()
        _CHILD.pop("p", None)
        return rc, cut


def _capture(argv, env=None, timeout=120) -> str:
    try:
        p = subprocess.run(
            argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout, check=False
        )
        return (p.stdout + p.stderr).strip()
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"({argv[0]}: {e})"


def _git_blob(path: Path) -> str:
    data = path.read_bytes()
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


CODE_DIRS = ("planner", "cost_models", "examples", "benchmarks")


def code_id(root: Path = ROOT) -> str:
    """The code's identity without git (the device gets the working tree, no .git): sha256
    of every (path, git blob id) under CODE_DIRS but benchmarks/results; ``commit_of`` finds
    the commit whose tree gives the same."""
    rows = []
    for d in CODE_DIRS:
        for p in sorted((root / d).rglob("*")):
            rel = p.relative_to(root).as_posix()
            if (
                p.is_file()
                and not rel.startswith("benchmarks/results/")
                and "__pycache__" not in rel
                and not rel.endswith(".pyc")
            ):
                rows.append(f"{rel} {_git_blob(p)}")
    return hashlib.sha256("\n".join(sorted(rows)).encode()).hexdigest()[:16]


def commit_of(cid: str, depth: int = 200) -> str | None:
    """The commit (of the last ``depth`` on any branch) whose tree has code id ``cid``."""
    revs = _capture(["git", "rev-list", "--all", f"--max-count={depth}"]).split()
    for rev in revs:
        out = _capture(["git", "ls-tree", "-r", rev, "--", *CODE_DIRS])
        rows = []
        for line in out.splitlines():
            meta, _, path = line.partition("\t")
            parts = meta.split()
            if (
                len(parts) == 3
                and parts[1] == "blob"
                and not path.startswith("benchmarks/results/")
            ):
                rows.append(f"{path} {parts[2]}")
        if hashlib.sha256("\n".join(sorted(rows)).encode()).hexdigest()[:16] == cid:
            return rev
    return None


def _git_commit() -> str | None:
    out = _capture(["git", "rev-parse", "HEAD"], timeout=10)
    return out if len(out) == 40 and all(c in "0123456789abcdef" for c in out) else None


# ---------------------------------------------------------------------------- run


def _read_jsonl(path: Path) -> list[dict]:
    out = []
    if not path.is_file():
        return out
    for line in path.read_text(errors="replace").splitlines():
        line = line.strip()
        if line:
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                pass
    return out


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


class Suite:
    """One call: the records, the work folder, the deadline, the tarball."""

    def __init__(self, out: Path, work: Path, budget_s: float, clock=time.monotonic):
        self.out, self.work, self.clock = out, work, clock
        self.deadline = clock() + budget_s
        self.out.mkdir(parents=True, exist_ok=True)
        (self.work / "raw").mkdir(parents=True, exist_ok=True)
        self.records: list[dict] = []
        self.call = 1

    def left(self) -> float:
        return self.deadline - self.clock() - PACK_RESERVE_S

    def add(self, rec: dict) -> None:
        self.records.append(rec)
        with open(self.out / "records.jsonl", "a") as f:
            f.write(json.dumps(rec, default=str) + "\n")
        brief = {k: v for k, v in rec.items() if k not in ("tail", "versions")}
        print(json.dumps(brief, default=str)[:400], flush=True)

    def resume(self, src: Path) -> set[str]:
        """Carry an earlier OUT's records and raw outputs over; the ids measured there."""
        recs = _read_jsonl(src / "records.jsonl")
        tgz = src / "suite.tgz"
        if tgz.is_file():
            with tarfile.open(tgz) as tar:
                members = [m for m in tar.getmembers() if m.name.startswith("raw/")]
                for m in members:  # no absolute paths or .. in what we extract
                    if m.name.startswith("/") or ".." in Path(m.name).parts:
                        raise SystemExit(f"{tgz}: unsafe member {m.name}")
                tar.extractall(self.work, members=members, **_SAFE)
        elif (src / "raw").is_dir():
            shutil.copytree(src / "raw", self.work / "raw", dirs_exist_ok=True)
        for r in recs:
            self.add({**r, "carried_from": r.get("carried_from") or _rel(src)})
        self.call = 1 + max((r.get("call", 0) for r in recs), default=0)
        return {
            r["id"]
            for r in recs
            if r.get("kind") == "measurement" and r.get("status") in ("ok", "needs_gpu")
        }

    def pack(self) -> Path:
        """OUT/summary.md and OUT/suite.tgz (records, summary, raw outputs but compilation
        caches and traces), under the device tool's 16 MiB a file: the largest raw files are
        left out, and named, where needed."""
        try:
            text = render_page(self.records, self.work / "raw", title="GPU suite (this OUT)")
        except Exception as e:  # the summary must never cost the tarball
            text = f"# GPU suite\n\nsummary failed: {e!r}\n\n" + status_table(self.records)
        (self.out / "summary.md").write_text(text)
        files = []
        for p in sorted((self.work / "raw").rglob("*")):
            rel = p.relative_to(self.work).as_posix()
            if p.is_file() and ".jax-cache" not in rel and not rel.endswith(".xplane.pb"):
                files.append((rel, p))
        left_out: list[str] = []
        while True:
            tmp = self.out / "suite.tgz.tmp"
            with tarfile.open(tmp, "w:gz") as tar:
                tar.add(self.out / "records.jsonl", arcname="records.jsonl")
                tar.add(self.out / "summary.md", arcname="summary.md")
                for rel, p in files:
                    tar.add(p, arcname=rel)
                if left_out:
                    data = ("\n".join(left_out) + "\n").encode()
                    info = tarfile.TarInfo("left_out.txt")
                    info.size = len(data)
                    tar.addfile(info, fileobj=__import__("io").BytesIO(data))
            if tmp.stat().st_size <= TARBALL_LIMIT or not files:
                break
            files.sort(key=lambda x: x[1].stat().st_size)
            rel, p = files.pop()
            left_out.append(f"{rel} ({p.stat().st_size} bytes)")
        tmp.replace(self.out / "suite.tgz")
        return self.out / "suite.tgz"


def status_table(records: list[dict]) -> str:
    rows = ["| call | measurement | status | wall s (expected) | note |", "|---|---|---|---|---|"]
    for r in records:
        if r.get("kind") == "measurement":
            note = r.get("why") or r.get("plans") or ""
            wall = f"{r.get('wall_s', 0):.0f} ({r.get('expected_s', 0):.0f})"
            rows.append(f"| {r.get('call')} | {r['id']} | {r['status']} | {wall} | {note} |")
        elif r.get("kind") == "skipped":
            rows.append(
                f"| {r.get('call')} | {r['id']} | not started | - ({r.get('expected_s', 0):.0f}) "
                f"| {r.get('why', '')} |"
            )
    return "\n".join(rows) + "\n"


def _child_env(dry: bool) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    )
    env["PYTHONUNBUFFERED"] = "1"
    if dry:
        env.update(GPU_BENCH_DRY_RUN="1", JAX_PLATFORMS="cpu")
    return env


def _ensure_ortools(env: dict) -> str:
    """ortools from the carried wheels (.whl/) where the image has none; its version."""
    check = [PY, "-c", "import ortools; print(ortools.__version__)"]
    got = _capture(check, env=env)
    if "Error" not in got:
        return got
    whl = sorted((ROOT / ".whl").glob("*.whl"))
    if not whl:
        return f"missing, and no wheels in .whl/ ({got[-200:]})"
    cmd = [PY, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile"]
    cmd += ["--no-cache-dir", "--upgrade", "--target", "/tmp/site", *map(str, whl)]
    print(_capture(cmd, timeout=300)[-2000:], flush=True)
    env["PYTHONPATH"] = os.pathsep.join(["/tmp/site", env["PYTHONPATH"]])
    return _capture(check, env=env)


def _versions(env: dict, dry: bool) -> dict:
    v = {
        "nvidia_smi": _capture(
            [
                "nvidia-smi",
                "--query-gpu=name,memory.total,driver_version",
                "--format=csv,noheader",
            ],
            timeout=30,
        ),
        "jax": _capture(
            [
                PY,
                "-c",
                "import jax, jaxlib, json; d = jax.devices()[0]; print(json.dumps("
                "{'jax': jax.__version__, 'jaxlib': jaxlib.__version__, 'device': str(d), "
                "'device_kind': getattr(d, 'device_kind', ''), 'n_devices': len(jax.devices())}))",
            ],
            env=env,
            timeout=180,
        ),
        "ortools": _ensure_ortools(env),
        "python": sys.version.split()[0],
        "cpus": os.cpu_count(),
    }
    try:
        v.update(json.loads(v.pop("jax").splitlines()[-1]))
    except (ValueError, IndexError, KeyError):
        pass
    return v


def run(a, measurements=None, clock=time.monotonic) -> Suite:
    """``run``: the measurements in order, each started only if its expected time fits what
    is left (a later, shorter one may still fit), records and tarball after each."""
    measurements = MEASUREMENTS if measurements is None else measurements
    out = Path(a.out)
    work = Path(a.work) if a.work else Path(tempfile.mkdtemp(prefix="gpu-suite-work-"))
    if (out / "records.jsonl").exists():
        raise SystemExit(f"{out}/records.jsonl exists: give a new --out (or --resume-from it)")
    suite = Suite(out, work, a.budget_s, clock=clock)
    done: set[str] = set()
    if a.resume_from and (Path(a.resume_from) / "records.jsonl").is_file():
        done = suite.resume(Path(a.resume_from))
    elif a.resume_from:  # the first call of a campaign: the folder comes back from it
        print(f"nothing to resume in {a.resume_from}: a first call", flush=True)
    env = _child_env(a.dry_run)
    plans = Path(a.plans) if a.plans else None
    if a.dry_run and plans is None:
        plans = DRY_PLANS
        if not (plans / "plans.jsonl").is_file():
            print(
                f"making the tiny plans first (the CPU step before a run; not counted in "
                f"--budget-s): {plans}",
                flush=True,
            )
            plan(argparse.Namespace(out=str(plans), only="", dry_run=True, force=False))
            suite.deadline = clock() + a.budget_s
    elif plans is None:
        found = sorted(p for p in RESULTS.glob("gpu-suite-plans-*") if p.is_dir())
        plans = found[-1] if found else None
    versions = (
        {"skipped": "--no-versions"}
        if getattr(a, "no_versions", False)
        else _versions(env, a.dry_run)
    )
    commit = _git_commit() or os.environ.get("SUITE_COMMIT") or None
    suite.add(
        {
            "kind": "call",
            "call": suite.call,
            "start": _now(),
            "budget_s": a.budget_s,
            "dry_run": a.dry_run,
            "plans": _rel(plans) if plans else None,
            "git_commit": commit,
            "code_id": code_id(),
            "resumed_from": a.resume_from,
            "host": os.uname().nodename,
            "versions": versions,
        }
    )
    print("versions:", json.dumps(versions, default=str), flush=True)
    only = set(filter(None, (a.only or "").split(",")))
    skip = set(filter(None, (a.skip or "").split(",")))
    base = {"call": suite.call, "git_commit": commit, "jax": versions.get("jax")}

    def stop(signum, frame):  # the tool's limit: end the measurement, leave the tarball
        if _CHILD.get("p") is not None and _CHILD["p"].poll() is None:
            _kill_group(_CHILD["p"])
        suite.add({"kind": "end", **base, "end": _now(), "why": f"signal {signum}"})
        suite.pack()
        sys.exit(1)

    signal.signal(signal.SIGTERM, stop)
    for m in measurements:
        if (only and m.id not in only and m.group not in only) or m.id in skip:
            continue
        if m.id in done and not m.always:
            print(f"{m.id}: measured in an earlier call, skipped", flush=True)
            continue
        raw = work / "raw" / m.id.replace(":", "-")
        ctx = Ctx(work=work, plans=plans, dry=a.dry_run, left_s=suite.left())
        cmd = m.build(ctx, raw)
        if isinstance(cmd, Unrunnable):
            suite.add(
                {
                    "kind": "measurement",
                    "id": m.id,
                    "title": m.title,
                    **base,
                    "status": cmd.status,
                    "why": cmd.why,
                    "start": _now(),
                    "end": _now(),
                    "wall_s": 0.0,
                    "expected_s": 0.0,
                }
            )
            continue
        expected = m.dry_expected_s if a.dry_run else (cmd.expected_s or m.expected_s)
        if expected > suite.left():
            suite.add(
                {
                    "kind": "skipped",
                    "id": m.id,
                    **base,
                    "expected_s": expected,
                    "left_s": round(suite.left(), 1),
                    "source": m.source,
                    "why": f"expected {expected:.0f} s, {suite.left():.0f} s left",
                }
            )
            continue
        if raw.exists():  # an earlier, unfinished attempt: kept beside this one
            n = 1
            while raw.with_name(f"{raw.name}.attempt{n}").exists():
                n += 1
            raw.rename(raw.with_name(f"{raw.name}.attempt{n}"))
            suite.add(
                {
                    "kind": "moved",
                    "id": m.id,
                    "call": suite.call,
                    "from": f"raw/{raw.name}",
                    "to": f"raw/{raw.name}.attempt{n}",
                }
            )
        raw.mkdir(parents=True, exist_ok=True)
        if cmd.setup:
            cmd.setup()
        child = dict(env)
        for k, v in cmd.env.items():
            if v is None:
                child.pop(k, None)
            else:
                child[k] = v
        start, t0 = _now(), clock()
        timeout = max(10.0, suite.left())
        rc, timed_out = run_command(cmd.argv, child, ROOT, timeout, raw / "output.log")
        log = (
            (raw / "output.log").read_text(errors="replace")
            if (raw / "output.log").exists()
            else ""
        )
        status = "timeout" if timed_out else ("ok" if rc in m.ok_rcs else "failed")
        if status == "ok":  # the script ran; did it measure (its own budget may stop it)?
            status = measured(m.group, raw)
        suite.add(
            {
                "kind": "measurement",
                "id": m.id,
                "title": m.title,
                "group": m.group,
                **base,
                "status": status,
                "rc": rc,
                "command": shlex.join(
                    [f"{k}={v}" for k, v in cmd.env.items() if v is not None]
                    + [("python3" if x == PY else x) for x in cmd.argv]
                ),
                "plans": cmd.plans,
                "raw": raw.relative_to(work).as_posix(),
                "start": start,
                "end": _now(),
                "wall_s": round(clock() - t0, 1),
                "expected_s": expected,
                "expected_source": m.source,
                "tail": log[-2500:],
            }
        )
        suite.pack()
    left = [
        m.id
        for m in measurements
        if not any(
            r.get("kind") == "measurement"
            and r["id"] == m.id
            and r["status"] in ("ok", "needs_gpu")
            for r in suite.records
        )
    ]
    suite.add({"kind": "end", **base, "end": _now(), "not_measured": left})
    suite.pack()
    print(f"\n{out}/suite.tgz, records.jsonl, summary.md; not measured yet: {left}", flush=True)
    return suite


# ---------------------------------------------------------------------------- plan


@dataclasses.dataclass(frozen=True)
class PlanItem:
    id: str
    output: str  # relative to the plans folder: done when it exists
    cmd: str  # the script and its arguments, shell words; {d}: the plans folder
    expected_s: float  # on a CPU, from the plans' own records
    source: str

    def argv(self, d: Path) -> list[str]:
        return [PY] + [w.replace("{d}", str(d)) for w in shlex.split(self.cmd)]


GB, MSS, TP = (
    "benchmarks/gpu_bench.py",
    "benchmarks/offload_must_show.py",
    "benchmarks/throughput_h200.py",
)
SC = "benchmarks/state_offload_config.py"
TINY = "this CPU, 2026-12-06: 46 s for one tiny budget, at a load of 9 on 2 cores"
# The tiny plans of a dry run (GPU_BENCH_DRY_RUN models, XLA:CPU compiles, one budget).
DRY_PLAN_ITEMS = [
    PlanItem(
        "must_show:llama",
        "must_show/llama.json",
        f"{MSS} plan --out {{d}}/must_show --models llama --hardware cpu --budgets {DRY_BUDGET_GB}",
        120,
        TINY,
    ),
    PlanItem(
        "zoo:loop",
        "zoo/loop.json",
        f"{GB} plan --save {{d}}/zoo/loop.json --hardware cpu --budgets {DRY_BUDGET_GB} "
        "--config layer_loop=loop,prevent_cse=true",
        120,
        TINY,
    ),
    PlanItem(
        "throughput:llama",
        "throughput/plan-llama.json",
        f"{TP} plan --out {{d}}/throughput --models llama --hardware cpu --hbm-gb 0.1 "
        "--max-batch 2 --stock nothing_saveable,everything_saveable",
        300,
        "estimate: two batch sizes per policy",
    ),
]
PLAN_ITEMS = (
    [
        PlanItem(
            f"must_show:{m}",
            f"must_show/{m}.json",
            f"{MSS} plan --out {{d}}/must_show --models {m}",
            t,
            f"offload-plans-2026-12-06/{m}.json plan_wall_s {w} (offload-plans-2026-12-04: {w2})",
        )
        for m, t, w, w2 in (
            ("long_context", 120, "44.5", "288.9"),
            ("llama", 120, "48.0", "223.5"),
            ("moe", 180, "93.4", "297.4"),
        )
    ]
    + [
        PlanItem(
            "zoo:loop",
            "zoo/loop.json",
            f"{GB} plan --save {{d}}/zoo/loop.json --hardware h200 --config {ZOO['loop']}",
            240,
            "h200-2026-12-02-zoo/plans-loop-cpu-deviceless-jax0.12.json: plan_wall_s 232.6",
        ),
        PlanItem(
            "zoo:parallel",
            "zoo/parallel.json",
            f"{GB} plan --save {{d}}/zoo/parallel.json --hardware h200 --config {ZOO['parallel']}",
            150,
            "estimate: the loop's 232.6 s without its Python-loop compiler probes",
        ),
    ]
    + [
        PlanItem(
            f"throughput:{m}",
            f"throughput/plan-{m}.json",
            f"{TP} plan --out {{d}}/throughput --models {m} --hardware h200 --plan-timeout-s 3600",
            t,
            f"throughput-plans-2026-12-04c/plan-{m}.json: plan_wall_s {t:.0f}",
        )
        for m, t in (("llama", 1546.0), ("moe", 915.0))
    ]
    + [
        PlanItem(
            f"state:mixed-m{mg}",
            f"state/mixed-m{mg}.json",
            f"{SC} plan '{{}}' --hbm-gb {STATE_HBM_GB} --margin {mg} --save {{d}}/state/mixed-m{mg}.json",
            90,
            f"state-offload-config-2026-12-04/mixed-m{mg}.json: trace_s + plan_s {t} (+ start)",
        )
        for mg, t in (("0", "42.9"), ("0.01", "43.9"), ("0.03", "54.8"))
    ]
    + [
        PlanItem(
            f"state:probe-b{b}",
            f"state/probe-b{b}.json",
            f"{SC} probe '{{\"batch\": {b}}}' --save {{d}}/state/probe-b{b}.json",
            60,
            "estimate: one trace stage of state-offload-config-2026-12-04 (28-30 s) + start",
        )
        for b in (1, 2, 4, 8)
    ]
    + [
        PlanItem(
            "train_state",
            "train_state/plan.json",
            "benchmarks/train_state_h200.py plan --skip-refusal --save-dir {d}/train_state",
            240,
            "train-state-h200-deviceless-2026-12-06.md: trace stage 115 s + the state plan 57 s",
        )
    ]
)


def _plan_items(dry: bool) -> list[PlanItem]:
    return DRY_PLAN_ITEMS if dry else PLAN_ITEMS


def _state_predictions(d: Path) -> None:
    """state/predictions.json (state_offload_h200.py reads it) from the four probes."""
    full = {}
    for p in sorted((d / "state").glob("probe-b*.json")):
        r = json.loads(p.read_text())
        b = str(r["config"]["batch"])
        full[b] = {
            "device_bytes": r["full_remat_device_bytes"],
            "step_s": r["full_remat_step_s"],
            "tokens_per_s": r["full_remat_tokens_per_s"],
        }
    if full:
        note = "planner's model, deviceless XLA:GPU H200 (gpu_suite.py plan: the probes)"
        (d / "state" / "predictions.json").write_text(
            json.dumps({"note": note, "full_remat": full}, indent=1) + "\n"
        )


def plan(a) -> None:
    """``plan``: every plan the suite runs, on this CPU (deviceless XLA:GPU for the H200
    where the interpreter has jaxlib 0.11.2 and its CUDA plugin), each item a fresh process;
    an item whose output exists is skipped (``--force``: made again). PLANS/plans.jsonl
    records each (command, commit, JAX version, wall time)."""
    d = Path(a.out)
    d.mkdir(parents=True, exist_ok=True)
    env = _child_env(a.dry_run)
    env["JAX_PLATFORMS"] = "cpu"
    jaxv = _capture(
        [PY, "-c", "import jax, jaxlib; print(jax.__version__, jaxlib.__version__)"], env=env
    )
    if not a.dry_run and not jaxv.startswith("0.11.2"):
        print(
            f"warning: JAX {jaxv}: the H200 runs 0.11.2; plans made with another jaxlib "
            "compile another program (use /work/venvs/h200/bin/python)",
            flush=True,
        )
    only = set(filter(None, (a.only or "").split(",")))
    commit = _git_commit()
    for it in _plan_items(a.dry_run):
        if only and it.id not in only and it.id.split(":")[0] not in only:
            continue
        if (d / it.output).exists() and not a.force:
            print(f"{it.id}: {d / it.output} exists", flush=True)
            continue
        (d / it.output).parent.mkdir(parents=True, exist_ok=True)
        argv = it.argv(d)
        t0, start = time.perf_counter(), _now()
        log = d / "logs" / (it.id.replace(":", "-") + ".log")
        print(
            f"{it.id}: {shlex.join(argv)} (expected {it.expected_s:.0f} s: {it.source})", flush=True
        )
        rc, _ = run_command(argv, env, ROOT, None, log)
        wall = time.perf_counter() - t0
        rec = {
            "id": it.id,
            "command": shlex.join(["python" if x == PY else x for x in argv]),
            "rc": rc,
            "start": start,
            "end": _now(),
            "wall_s": round(wall, 1),
            "expected_s": it.expected_s,
            "expected_source": it.source,
            "git_commit": commit,
            "jax": jaxv,
            "dry_run": a.dry_run,
            "output": it.output if (d / it.output).exists() else None,
        }
        with open(d / "plans.jsonl", "a") as f:
            f.write(json.dumps(rec) + "\n")
        print(f"{it.id}: rc {rc} in {wall:.0f} s", flush=True)
    _state_predictions(d)


# ---------------------------------------------------------------------------- tables


def _f(x, fmt="{:,.1f}") -> str:
    return "n/a" if x is None else fmt.format(x)


def _pct(meas, pred) -> str:
    return "" if meas in (None, 0) or pred is None else f"{(pred - meas) / meas:+.1%}"


def side_by_side(recs: list[dict], model: str | None = None) -> list[dict]:
    """Per plan of gpu_bench records (``replay``, ``compare``, offload_must_show ``run``):
    the capped run beside full remat and the fastest stock policy whose measured peak fits
    the budget; predictions; per-direction exposed copy time where traced."""
    jobs = {r["job"]["name"]: r for r in recs if r.get("kind") == "job"}
    planned_on = {r.get("model"): r.get("planned_on") for r in recs if r.get("kind") == "planned"}
    rows = []
    for p in recs:
        if p.get("kind") != "plan" or (model and p.get("model", model) != model):
            continue
        pre = f"{p['model']}:" if "model" in p else ""
        b = str(p["budget_gb"])
        run_ = jobs.get(f"{pre}plan@{b}")
        got = (run_ or {}).get("result") or {}
        stocks = [
            (
                j["result"]["step_ms_median"],
                n.split("stock:", 1)[1],
                j["result"].get("peak_bytes_in_use"),
            )
            for n, j in jobs.items()
            if n.startswith(f"{pre}stock:") and j.get("ok") and j.get("result")
        ]
        fits = [s for s in stocks if s[2] is not None and s[2] <= float(b) * 1e9]
        best = min(fits) if fits else None
        full = next((s for s in stocks if s[1] == "nothing_saveable"), None)
        tr = got.get("trace") or {}
        step = got.get("step_ms_median")
        rows.append(
            {
                "model": p.get("model", model),
                "budget_gb": float(b),
                "choice": p.get("choice"),
                "offloads": [k for k, v in (p.get("decisions") or {}).items() if v == "offload"],
                "ran": None if run_ is None else bool(run_.get("ok")),
                "fail": None if run_ is None or run_.get("ok") else str(run_.get("tail"))[-160:],
                "step_ms": step,
                "pred_step_ms": p.get("predicted_step_ms"),
                "peak_gb": None
                if got.get("peak_bytes_in_use") is None
                else got["peak_bytes_in_use"] / 1e9,
                "pred_peak_gb": None
                if p.get("predicted_peak") is None
                else p["predicted_peak"] / 1e9,
                "verified_gb": None if p.get("verified_peak") is None else p["verified_peak"] / 1e9,
                "full_remat_ms": full[0] if full else None,
                "best": best,  # (ms, name, peak bytes)
                "ratio": step / best[0] if step and best else None,
                "d2h": (tr.get("d2h_exposed_s_ms"), p.get("predicted_exposed_d2h_ms")),
                "h2d": (tr.get("h2d_exposed_s_ms"), p.get("predicted_exposed_h2d_ms")),
                "loss": got.get("loss"),
                "planned_on": planned_on.get(p.get("model", model)) or planned_on.get(None),
            }
        )
    return rows


def side_by_side_table(rows: list[dict], exposure: bool = True) -> str:
    head = "| model | budget GB | answer | capped run: step ms (predicted) | peak GB (verified compile) | full remat ms | best stock that fits, ms | plan / best stock |"
    sep = "|---|---|---|---|---|---|---|---|"
    if exposure:
        head += " d2h exposed ms/step: trace (model) | h2d exposed: trace (model) |"
        sep += "---|---|"
    out = [head, sep]
    for r in rows:
        ans = r["choice"] or "?"
        if r["offloads"]:
            ans += " (offloads " + ", ".join(f"`{x[:40]}`" for x in r["offloads"][:2]) + ")"
        if r["ran"] is None:
            step = f"not run ({_f(r['pred_step_ms'])})"
        elif not r["ran"]:
            step = f"**failed** ({_f(r['pred_step_ms'])})"
        else:
            step = f"{_f(r['step_ms'])} ({_f(r['pred_step_ms'])}, {_pct(r['step_ms'], r['pred_step_ms'])})"
        best = "none measured" if r["best"] is None else f"{r['best'][0]:,.1f} ({r['best'][1]})"
        line = (
            f"| {r['model']} | {r['budget_gb']:g} | {ans} | {step} | {_f(r['peak_gb'], '{:.2f}')} "
            f"({_f(r['verified_gb'], '{:.2f}')}) | {_f(r['full_remat_ms'])} | {best} | "
            f"{_f(r['ratio'], '{:.3f}')} |"
        )
        if exposure:
            for meas, pred in (r["d2h"], r["h2d"]):
                line += f" {_f(meas)} ({_f(pred)}) |" if r["offloads"] else " - |"
        out.append(line)
    return "\n".join(out) + "\n"


def side_by_side_facts(rows: list[dict]) -> str:
    ran = [r for r in rows if r["ran"]]
    ratios = [r["ratio"] for r in ran if r["ratio"]]
    steps = [
        (r["pred_step_ms"] - r["step_ms"]) / r["step_ms"]
        for r in ran
        if r["pred_step_ms"] and r["step_ms"]
    ]
    peaks = [
        (r["verified_gb"] - r["peak_gb"]) / r["peak_gb"]
        for r in ran
        if r["verified_gb"] and r["peak_gb"]
    ]
    peaked = [r for r in ran if r["peak_gb"] is not None]  # no allocator figures on a CPU
    within = sum(1 for r in peaked if r["peak_gb"] <= r["budget_gb"])
    failed = [f"{r['model']} at {r['budget_gb']:g} GB" for r in rows if r["ran"] is False]
    rng = lambda xs, f: f"{f.format(min(xs))} to {f.format(max(xs))}" if xs else "n/a"
    lines = [
        f"- Capped runs: {len(ran)} of {len(rows)} ran; the allocator's peak within the budget "
        f"in {within} of the {len(peaked)} with a peak"
        + (f"; failed: {', '.join(failed)}" if failed else "")
        + ".",
        f"- Plan / best stock policy that fits: {rng(ratios, '{:.3f}')} ({len(ratios)} budgets).",
        f"- Predicted step vs measured: {rng(steps, '{:+.1%}')}.",
        f"- Verified (compiled) peak vs the allocator's measured peak: {rng(peaks, '{:+.1%}')}.",
    ]
    where = sorted({f"{r['model']}: {r['planned_on']}" for r in rows if r.get("planned_on")})
    if where:
        lines.append(f"- Planned on: {'; '.join(where)}.")
    return "\n".join(lines) + "\n"


def planning_rows(d: Path) -> list[dict]:
    """planning_time_on_gpu_host.sh's runs (gpu_bench.py plan records, runs.txt)."""
    process = {}
    runs_txt = d / "runs.txt"
    for line in runs_txt.read_text().splitlines() if runs_txt.is_file() else []:
        parts = line.split()
        if parts[:1] == ["run"] and "process_s" in parts:
            process[parts[1]] = float(parts[parts.index("process_s") + 1])
    rows = []
    cache_seen = False
    for f in sorted(d.glob("run*.json"), key=lambda f: int(f.stem[3:].partition("-")[0] or 0)):
        r = json.loads(f.read_text())
        n, _, mode = f.stem[3:].partition("-")
        if mode == "cache":
            mode, cache_seen = ("cache-filled" if cache_seen else "cache-empty"), True
        plans = r.get("plans", {})
        b, spec = next(iter(plans.items()), (None, {}))
        tt = dict((k, v) for k, v in r.get("trace_timings", []))
        rows.append(
            {
                "run": n,
                "mode": {
                    "default": "cold",
                    "0": "cold, one compile at a time",
                    "cache-empty": "autotune cache dir, empty (this run fills it)",
                    "cache-filled": "autotune cache dir, filled by the run before",
                }.get(mode, mode),
                "planning_s": (r.get("trace_s") or 0) + sum(r.get("plan_s") or [0]),
                "trace_s": r.get("trace_s"),
                "budget_s": (r.get("plan_s") or [None])[0],
                "anchor_s": next(
                    (v for k, v in tt.items() if k.startswith("compile the full-remat")), None
                ),
                "budget_gb": b,
                "choice": spec.get("choice") or ("error" if "error" in spec else None),
                "pred_ms": spec.get("predicted_step_ms"),
                "verified": spec.get("verified_peak"),
                "probes": r.get("probes"),
                "process_s": process.get(n),
                "planned_on": r.get("planned_on"),
            }
        )
    return rows


def planning_table(rows: list[dict]) -> str:
    out = [
        "| run | mode | planning s (trace + budget) | trace stage s | full-remat anchor compile s | budget 1 s | answer (predicted ms) | verified GB | process s |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        out.append(
            f"| {r['run']} | {r['mode']} | **{_f(r['planning_s'])}** | {_f(r['trace_s'])} | "
            f"{_f(r['anchor_s'])} | {_f(r['budget_s'])} | {r['choice']} ({_f(r['pred_ms'])}) | "
            f"{_f(None if r['verified'] is None else r['verified'] / 1e9, '{:.2f}')} | {_f(r['process_s'])} |"
        )
    return "\n".join(out) + "\n"


def throughput_rows(recs: list[dict]) -> list[dict]:
    planned = {r["model"]: r for r in recs if r.get("kind") == "planned" and "chosen" in r}
    rows = []
    for r in recs:
        if r.get("kind") != "job":
            continue
        model, who, rest = (r["job"]["name"].split(":", 2) + ["", ""])[:3]
        name, _, batch = rest.rpartition("@")
        p = planned.get(model, {})
        pred = (
            p.get("chosen", {}).get("predicted_tokens_per_s")
            if who == "planner"
            else next(
                (
                    e["predicted_tokens_per_s"]
                    for e in p.get("estimator", [])
                    if e["policy"] == name
                ),
                None,
            )
        )
        res = r.get("result") or {}
        rows.append(
            {
                "model": model,
                "who": who,
                "policy": name,
                "batch": batch,
                "pred": pred,
                "tps": res.get("tokens_per_s_pipelined") or res.get("tokens_per_s"),
                "peak_gb": None
                if res.get("peak_bytes_in_use") is None
                else res["peak_bytes_in_use"] / 1e9,
                "ok": r.get("ok"),
            }
        )
    return rows


def throughput_table(rows: list[dict]) -> str:
    out = [
        "| model | who | policy | batch | tokens/s measured (predicted, error) | peak GB | planner / this |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        mine = next(
            (x["tps"] for x in rows if x["model"] == r["model"] and x["who"] == "planner"), None
        )
        err = (
            ""
            if not r["tps"] or r["pred"] is None
            else f", {abs(r['pred'] - r['tps']) / r['tps']:.1%}"
        )
        ratio = (
            "" if r["who"] == "planner" or not (mine and r["tps"]) else f"{mine / r['tps']:.3f}x"
        )
        tps = "failed" if not r["ok"] else _f(r["tps"], "{:,.0f}")
        out.append(
            f"| {r['model']} | {r['who']} | {r['policy']} | {r['batch']} | {tps} "
            f"({_f(r['pred'], '{:,.0f}')}{err}) | {_f(r['peak_gb'], '{:.2f}')} | {ratio} |"
        )
    return "\n".join(out) + "\n"


def _gb(x: dict, k: str) -> str:
    return _f(None if x.get(k) is None else x[k] / 1e9, "{:.2f}")


def state_table(recs: list[dict], plans: Path | None) -> str:
    pred = {}
    if plans and plans.is_dir():
        for p in sorted(plans.glob("mixed-m*.json")):
            x = json.loads(p.read_text())
            pred[f"mixed-m{x.get('margin')}"] = x["mixed"]["predicted_tokens_per_s"]
            pred["whole-offload-b8"] = x["whole"]["predicted_tokens_per_s"]
        if (plans / "predictions.json").is_file():
            for b, v in json.loads((plans / "predictions.json").read_text())["full_remat"].items():
                pred[f"full-remat-b{b}"] = v["tokens_per_s"]
    out = [
        "| run | batch | ok | tokens/s (predicted) | step ms | device GB (compiled) | host args GB | peak GB |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in recs:
        j = r.get("job") or {}
        if j.get("kind") != "measure":
            continue
        x = r.get("result") or {}
        over = " (over the usable bytes: not run)" if x.get("over") else ""
        out.append(
            f"| {j.get('id')}{over} | {j.get('batch')} | {r.get('ok')} | {_f(x.get('tokens_per_s'), '{:,.0f}')} "
            f"({_f(pred.get(j.get('id')), '{:,.0f}')}) | {_f(x.get('step_ms_median'), '{:,.0f}')} | "
            f"{_gb(x, 'device_bytes')} | {_gb(x, 'host_argument_bytes')} | {_gb(x, 'peak_bytes_in_use')} |"
        )
    return "\n".join(out) + "\n"


def param_state_table(recs: list[dict]) -> str:
    last = {}
    for r in recs:
        if r.get("variant"):
            last[r["variant"]] = r
    none = last.get("none", {})
    out = [
        "| variant | step ms | over `none` | model's copy ms | device GB | device saved MB (model) | host args MB (planned) |",
        "|---|---|---|---|---|---|---|",
    ]
    for v, r in last.items():
        if "error" in r:
            out.append(f"| {v} | failed | | | | | |")
            continue
        d = lambda k, r=r: None if none.get(k) is None or r.get(k) is None else r[k] - none[k]
        saved = None if d("device_bytes") is None else -d("device_bytes") / 1e6
        out.append(
            f"| {v} | {_f(r.get('step_ms_median'))} | {_f(d('step_ms_median'), '{:+,.1f}')} | "
            f"{_f(r.get('model_exposed_ms'))} | {_f(r['device_bytes'] / 1e9, '{:.2f}')} | "
            f"{_f(saved, '{:,.1f}')} ({_f(r.get('model_saved_bytes', 0) / 1e6 - r.get('model_inflight_bytes', 0) / 1e6, '{:,.1f}')}) | "
            f"{_f(r.get('host_argument_bytes', 0) / 1e6, '{:,.1f}')} ({_f(r.get('planned_host_bytes', 0) / 1e6, '{:,.1f}')}) |"
        )
    return "\n".join(out) + "\n"


def gap_table(rows: list[dict]) -> str:
    """deviceless_gap.py's own table (its summarize), without importing the models."""
    by = {}
    for r in rows:
        if r.get("ok"):
            by[(r["name"], r.get("policy_label") or r["policy"], r["where"])] = r
    out = [
        "| model | policy | device GB (GPU) | deviceless GB | diff | GPU without autotuning (diff) |",
        "|---|---|---|---|---|---|",
    ]
    for (name, pol, where), g in sorted(by.items()):
        d = by.get((name, pol, "deviceless"))
        if where != "device" or d is None:
            continue
        a0 = by.get((name, pol, "device-autotune0"))
        a0t = (
            "-"
            if a0 is None
            else f"{a0['device_bytes'] / 1e9:.2f} ({(d['device_bytes'] - a0['device_bytes']) / a0['device_bytes']:+.2%})"
        )
        out.append(
            f"| {name} | {pol} | {g['device_bytes'] / 1e9:.2f} | {d['device_bytes'] / 1e9:.2f} | "
            f"{(d['device_bytes'] - g['device_bytes']) / g['device_bytes']:+.2%} | {a0t} |"
        )
    return "\n".join(out) + "\n"


def loss_agreement_text(files: list[Path], label_root: Path) -> str:
    """loss_agreement.py's table over ``files`` (its own function, in this process)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import loss_agreement as la

    text, _ = la.report(files, label_root)
    return text


# ---------------------------------------------------------------------------- the page


@dataclasses.dataclass
class Sources:
    """What each section is made from: (label, path) lists, and the records to cite."""

    must_show: list = dataclasses.field(default_factory=list)  # (model, results.jsonl)
    zoo: list = dataclasses.field(default_factory=list)  # (model, results.jsonl)
    planning: list = dataclasses.field(default_factory=list)  # folders of run*.json
    throughput: list = dataclasses.field(default_factory=list)  # results.jsonl
    state: list = dataclasses.field(default_factory=list)  # (results.jsonl, plans folder)
    param_state: list = dataclasses.field(default_factory=list)  # results.jsonl
    gap: list = dataclasses.field(default_factory=list)  # results.jsonl
    zoo_table: list = dataclasses.field(default_factory=list)  # zoo_on_gpu_host.sh folders
    losses: list = dataclasses.field(default_factory=list)  # jsonl files for loss agreement
    cite: dict = dataclasses.field(default_factory=dict)  # section -> record (.md) names
    root: Path = RESULTS  # file names in the loss table are relative to it


def _R(p: str) -> Path:
    return RESULTS / p


# The newest H200 records of each measurement before the suite's first run (2026-12-06).
NEWEST = Sources(
    must_show=[
        ("long_context", _R(f"{MS}/results-llama-long.jsonl")),
        ("llama", _R(f"{MS}/results-llama-long.jsonl")),
        ("moe", _R(f"{MS}/results-moe.jsonl")),
    ],
    zoo=[
        ("loop", _R("h200-2026-12-05-zoo/loop/results.jsonl")),
        ("parallel", _R("h200-2026-12-05-zoo/parallel/results.jsonl")),
    ],
    planning=[_R("planning-time-2026-12-05b/call1")],
    throughput=[
        _R("h200-2026-12-04-throughput-c/results.jsonl"),
        _R("h200-2026-12-04-throughput-c/results-moe.jsonl"),
    ],
    state=[
        (_R("h200-2026-12-05-state-offload-c/results-mixed.jsonl"), FALLBACK["state"]),
        (_R("h200-2026-12-05-state-offload-c/results-remat.jsonl"), FALLBACK["state"]),
        (_R("h200-2026-12-04-state-offload-b/results-run2-whole.jsonl"), FALLBACK["state"]),
    ],
    param_state=[
        _R("h200-2026-12-04-param-state/results-inplace.jsonl"),
        _R("h200-2026-12-04-param-state/results-inplace-guarded.jsonl"),
    ],
    gap=[_R(f"h200-2026-12-03-deviceless/gap{i}/results.jsonl") for i in (1, 2, 3, 4)],
    losses=[
        _R(f"{MS}/results-llama-long.jsonl"),
        _R(f"{MS}/results-moe.jsonl"),
        _R("h200-2026-12-05-zoo/loop/results.jsonl"),
        _R("h200-2026-12-05-zoo/parallel/results.jsonl"),
    ],
    cite={
        "must_show": "h200-2026-12-04-offload-must-show.md",
        "zoo": "h200-2026-12-05-zoo.md",
        "planning": "planning-time-2026-12-05b.md",
        "throughput": "h200-2026-12-04-throughput-c.md",
        "state": "h200-2026-12-05-state-offload-c.md",
        "param_state": "h200-2026-12-04-param-state.md",
        "gap": "deviceless-2026-12-03.md",
        "losses": "h200-loss-agreement-2026-12-03.md",
    },
)


def suite_sources(records: list[dict], raw_root: Path, cite: str = "") -> Sources:
    """Sources of a suite's OUT: each measurement's newest successful raw folder."""
    s = Sources()
    newest = {}
    for r in records:
        if (
            r.get("kind") == "measurement"
            and r.get("status") in ("ok", "partial", "timeout")
            and r.get("raw")
        ):
            newest[r["id"]] = (raw_root.parent / r["raw"], r)
    for mid, (d, r) in newest.items():
        group, _, label = mid.partition(":")
        res = d / "results.jsonl"
        if group == "must_show":
            s.must_show.append((label, res))
        elif group == "zoo":
            # h200_zoo.sh writes OUT/NAME/results.jsonl; replay writes OUT/results.jsonl
            s.zoo.append((label, res if res.is_file() else d / label / "results.jsonl"))
        elif group == "planning_time":
            s.planning.append(d)
        elif group == "throughput":
            s.throughput.append(res)
        elif group == "state":
            s.state.append((res, ROOT / r["plans"] if r.get("plans") else None))
        elif group == "param_state":
            s.param_state.append(res)
        elif group == "deviceless_gap":
            s.gap.append(res)
        elif group == "zoo_table":
            s.zoo_table.append(d)
    s.losses = sorted(raw_root.rglob("*.jsonl")) if raw_root.is_dir() else []
    s.root = raw_root
    s.cite = (
        {
            k: cite
            for k in (
                "must_show",
                "zoo",
                "planning",
                "throughput",
                "state",
                "param_state",
                "gap",
                "losses",
            )
        }
        if cite
        else {}
    )
    return s


ZOO_HEADER = (  # benchmarks/zoo.py's table header (zoo_on_gpu_host.sh keeps only the rows)
    "| model | budget MB | answer | status | compiled MB | best stock that fits | "
    "predicted step / best stock | predicted peak vs compiled | plan s |\n"
    "|---|---|---|---|---|---|---|---|---|\n"
)


def render_sections(s: Sources, level: str = "##", compact: bool = False) -> str:
    """The tables of every section with data (summarize's page and the docs' block)."""
    parts = []
    cite = lambda k: f" (`{s.cite[k]}`)" if s.cite.get(k) else ""
    ms_rows = [row for model, f in s.must_show for row in side_by_side(_read_jsonl(f), model)]
    if ms_rows:
        parts += [
            f"{level} Plans capped at their budgets beside the stock policies{cite('must_show')}\n",
            "The long-context decoder (2 x 16,384 tokens), the Llama example (8 x 4,096) and the "
            "MoE example (64 experts top-6 + a shared one), 8 layers under `lax.scan`, bf16, cuDNN "
            "attention; each planned on a CPU (deviceless XLA:GPU for the H200) at 4 budgets from "
            "just above full remat to save-everything, then run on the H200 with the allocator "
            "capped at its budget (`offload_must_show.py run`). The stock policies ran uncapped; "
            '"best stock that fits" is the fastest whose measured peak is within the budget.\n',
            side_by_side_table(ms_rows),
            side_by_side_facts(ms_rows),
        ]
    zoo_rows = [row for model, f in s.zoo for row in side_by_side(_read_jsonl(f), model)]
    if zoo_rows:
        parts += [
            f"{level} Code the planner was not fitted to{cite('zoo')}\n",
            "A Python-loop Llama (each layer one `jax.checkpoint(prevent_cse=True)`) and a "
            "parallel-residual decoder under `lax.scan` (d_model 4096, batch 4 x 4,096, cuDNN "
            "attention), each plan capped at its budget beside 8 stock policies "
            "(`gpu_bench.py replay`).\n",
            side_by_side_table(zoo_rows, exposure=False),
            side_by_side_facts(zoo_rows),
        ]
    pt = [row for d in s.planning for row in planning_rows(d)]
    if pt:
        parts += [
            f"{level} Planning time{cite('planning')}\n",
            "One budget (18.54 GB) of the 8-layer Python-loop Llama, planned from a fresh "
            "process (`planning_time_on_gpu_host.sh`: `gpu_bench.py plan`) on "
            + "; ".join(sorted({str(r["planned_on"]) for r in pt}))
            + "; planning = trace stage + the budget.\n",
            planning_table(pt),
        ]
    tp = [row for f in s.throughput for row in throughput_rows(_read_jsonl(f))]
    if tp:
        parts += [
            f"{level} Throughput: batch x policy{cite('throughput')}\n",
            "The planner's (batch, plan) against the best (largest fitting batch, stock policy) "
            "answers of MaxText's estimator procedure, each run capped at the same budget; "
            "tokens/s with the steps dispatched back to back (`throughput_h200.py measure`).\n",
            throughput_table(tp),
        ]
    st = "".join(state_table(_read_jsonl(f), p).split("\n", 2)[2] for f, p in s.state)
    if st.strip():
        head = state_table([], None).split("\n", 2)
        parts += [
            f"{level} Optimizer state in host memory{cite('state')}\n",
            "A 7.2 B-parameter Llama with Adam at 59.1 GB (58.3 GB usable), every run capped at "
            "it (`state_offload_h200.py`): the mixed plan (activations and part of Adam's state "
            "on the host, one CP-SAT model), full remat with the whole state in HBM at its "
            "largest batch, and the whole state on the host (MaxText's "
            "optimizer_memory_host_offload).\n",
            head[0] + "\n" + head[1] + "\n" + st,
        ]
    ps = [r for f in s.param_state for r in _read_jsonl(f)]
    if ps:
        parts += [
            f"{level} Parameters and Adam moments in host memory{cite('param_state')}\n",
            "Adam Llama step (d_model 2048, 8 layers, batch 4 x 2,048), one placement per "
            "fresh process (`param_state_h200.py`); the model's copy time counts every copy "
            "exposed.\n",
            param_state_table(ps),
        ]
    gp = [r for f in s.gap for r in _read_jsonl(f)]
    if gp:
        parts += [
            f"{level} Deviceless vs device compiled bytes{cite('gap')}\n",
            "The same program compiled on the H200 and deviceless (`JAX_PLATFORMS=cpu`, the "
            "CUDA plugin's compile-only H200) with the same jaxlib (`deviceless_gap.py`); "
            "diff = (deviceless - GPU) / GPU.\n",
            gap_table(gp),
        ]
    zt = [(d, w) for d in s.zoo_table for w in ("gpu", "cpu") if (d / f"{w}-table.md").is_file()]
    if zt:
        parts.append(
            f"{level} The model zoo planned on the GPU and on its host's CPU{cite('zoo_table')}\n"
        )
        parts.append(
            "Every tests/zoo model at three budgets (`zoo_on_gpu_host.sh`: `zoo.py`, one process "
            'per model), `hardware="h200"` planned on the H200, `hardware="cpu"` on its '
            "host; planning only, no runs.\n"
        )
        for d, w in zt:
            parts += [
                f"{'GPU (h200)' if w == 'gpu' else 'CPU'}:\n",
                ZOO_HEADER + (d / f"{w}-table.md").read_text(),
            ]
    if s.losses:
        try:
            text = loss_agreement_text(list(s.losses), s.root)
        except Exception as e:  # never lose the page for one section
            text = f"(loss agreement failed: {e!r})\n"
        if "| plan" in text or "plans;" in text:
            body = text.split("\n", 2)[2] if text.startswith("#") else text
            if compact:  # the docs: the verdict, not the table (the records hold it)
                body = body.rstrip().rsplit("\n\n", 1)[-1] + "\n"
            parts += [f"{level} Planned and unplanned losses agree{cite('losses')}\n", body]
    return "\n".join(parts)


def render_page(records: list[dict], raw_root: Path, title: str) -> str:
    calls = [r for r in records if r.get("kind") == "call"]
    v = (calls[-1] if calls else {}).get("versions", {})
    lines = [
        f"# {title}",
        "",
        "Made by `python benchmarks/gpu_suite.py summarize` from the suite's raw records "
        "(`records.jsonl`, and each measurement's output in `suite.tgz`). Machine: "
        f"{v.get('nvidia_smi') or v.get('device', 'unknown')}; JAX {v.get('jax')}, jaxlib "
        f"{v.get('jaxlib')}, ortools {v.get('ortools')}.",
        "",
        "## Calls",
        "",
        "| call | start (UTC) | budget s | git commit / code id | plans | dry run |",
        "|---|---|---|---|---|---|",
    ]
    for c in calls:
        lines.append(
            f"| {c.get('call')} | {c.get('start')} | {c.get('budget_s')} | "
            f"{(c.get('git_commit') or '')[:10]} {c.get('code_id')} | {c.get('plans')} | {c.get('dry_run')} |"
        )
    lines += ["", "## Measurements", "", status_table(records)]
    cmds = [r for r in records if r.get("kind") == "measurement" and r.get("command")]
    if cmds:
        lines += ["Commands (each a fresh process on the device):", "", "```"]
        lines += [f"# {r['id']} (call {r.get('call')})\n{r['command']}" for r in cmds]
        lines += ["```", ""]
    lines.append(render_sections(suite_sources(records, raw_root)))
    return "\n".join(lines) + "\n"


def _raw_root(out: Path) -> tuple[Path, Path | None]:
    """OUT's raw folder: OUT/raw, else suite.tgz extracted to a temporary folder."""
    if (out / "raw").is_dir():
        return out / "raw", None
    tmp = Path(tempfile.mkdtemp(prefix="gpu-suite-summary-"))
    if (out / "suite.tgz").is_file():
        with tarfile.open(out / "suite.tgz") as tar:
            members = [m for m in tar.getmembers() if m.name.startswith("raw/")]
            tar.extractall(tmp, members=members, **_SAFE)
    return tmp / "raw", tmp


def summarize(a) -> Path:
    out = Path(a.out)
    records = _read_jsonl(out / "records.jsonl")
    calls = [r for r in records if r.get("kind") == "call"]
    if not calls:
        raise SystemExit(f"{out}/records.jsonl has no call record")
    dry = any(c.get("dry_run") for c in calls)
    date = (a.date or calls[0]["start"][:10]) if calls[0].get("start") else a.date
    raw, tmp = _raw_root(out)
    try:
        title = f"H200 suite, {date}" + (" (dry run on a CPU: tiny models)" if dry else "")
        text = render_page(records, raw, title)
        cid = calls[-1].get("code_id")
        if cid and not calls[-1].get("git_commit"):
            rev = commit_of(cid)
            text = text.replace(
                "## Calls",
                f"## Calls\n\nCode id {cid}: commit {rev or 'none of the last 200 (a tree with changes)'}.",
                1,
            )
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
    save = (
        Path(a.save)
        if a.save
        else (out / f"h200-suite-dry-{date}.md" if dry else RESULTS / f"h200-suite-{date}.md")
    )
    save.write_text(text)
    print(f"wrote {save}")
    return save


# ---------------------------------------------------------------------------- docs

BEGIN, END = "<!-- gpu-suite:begin -->", "<!-- gpu-suite:end -->"


def docs_block(s: Sources, origin: str) -> str:
    return (
        f"{BEGIN}\n<!-- Generated by `python benchmarks/gpu_suite.py docs` from {origin}; "
        "edit the generator, not this block. -->\n\n"
        + render_sections(s, compact=True)
        + f"\n{END}"
    )


def docs(a) -> int:
    page = ROOT / "docs" / "measured.md"
    if a.from_:
        out = Path(a.from_)
        records = _read_jsonl(out / "records.jsonl")
        if any(r.get("dry_run") for r in records if r.get("kind") == "call"):
            raise SystemExit(f"{out} is a dry run (tiny models on a CPU): not for the docs")
        raw, _ = _raw_root(out)
        name = f"h200-suite-{[r for r in records if r.get('kind') == 'call'][0]['start'][:10]}.md"
        s, origin = suite_sources(records, raw, cite=name), f"`{_rel(out)}`"
    else:
        s, origin = NEWEST, "the newest H200 records of each measurement (gpu_suite.NEWEST)"
    text = page.read_text()
    if BEGIN not in text or END not in text:
        raise SystemExit(f"{page} has no {BEGIN} ... {END} block")
    head, rest = text.split(BEGIN, 1)
    new = head + docs_block(s, origin) + rest.split(END, 1)[1]
    if a.check:
        if new != text:
            print(
                f"{page}: the generated block is out of date (python benchmarks/gpu_suite.py docs)"
            )
            return 1
        return 0
    page.write_text(new)
    print(f"wrote the block of {page}")
    return 0


# ---------------------------------------------------------------------------- main


def list_(a) -> None:
    total = 0.0
    print("| # | measurement | expected s on the H200 | from | dry run s |")
    print("|---|---|---|---|---|")
    for i, m in enumerate(MEASUREMENTS, 1):
        total += m.expected_s
        print(
            f"| {i} | `{m.id}`: {m.title} | {m.expected_s:.0f} | {m.source} | {m.dry_expected_s:.0f} |"
        )
    print(
        f"\nTotal {total:.0f} s: {total / (540 - PACK_RESERVE_S - 20):.1f} calls of --budget-s 540."
    )
    print("\nPlans (`plan`, on a CPU):\n")
    t = 0.0
    for it in _plan_items(False):
        t += it.expected_s
        print(f"- `{it.id}` -> {it.output}: about {it.expected_s:.0f} s ({it.source})")
    print(f"\nTotal about {t / 60:.0f} min at the recorded loads.")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="on the H200: every measurement that fits --budget-s")
    r.add_argument("--out", required=True, help="records.jsonl, summary.md, suite.tgz")
    r.add_argument("--budget-s", type=float, default=540)
    r.add_argument(
        "--resume-from", default=None, help="an earlier call's OUT: skip what it measured"
    )
    r.add_argument(
        "--plans", default=None, help="default: newest benchmarks/results/gpu-suite-plans-*"
    )
    r.add_argument("--work", default=None, help="raw outputs (default: a new temporary folder)")
    r.add_argument("--only", default="", help="measurement ids or groups, comma-separated")
    r.add_argument("--skip", default="", help="measurement ids, comma-separated")
    r.add_argument("--dry-run", action="store_true", help="tiny models on this CPU")
    r.add_argument("--no-versions", action="store_true", help=argparse.SUPPRESS)
    p = sub.add_parser("plan", help="on a CPU: every plan the suite runs")
    p.add_argument("--out", required=True)
    p.add_argument("--only", default="", help="plan item ids or kinds (must_show, zoo, ...)")
    p.add_argument("--dry-run", action="store_true", help="the tiny plans of a dry run")
    p.add_argument("--force", action="store_true")
    s = sub.add_parser("summarize", help="the one page: benchmarks/results/h200-suite-DATE.md")
    s.add_argument("--out", required=True)
    s.add_argument("--date", default=None)
    s.add_argument("--save", default=None)
    d = sub.add_parser("docs", help="docs/measured.md's generated block")
    d.add_argument(
        "--from", dest="from_", default=None, help="a suite OUT (default: gpu_suite.NEWEST)"
    )
    d.add_argument("--check", action="store_true", help="exit 1 if the block is out of date")
    sub.add_parser("list", help="the measurements and plans, expected times and sources")
    a = ap.parse_args(argv)
    if a.cmd == "run":
        run(a)
    elif a.cmd == "plan":
        plan(a)
    elif a.cmd == "summarize":
        summarize(a)
    elif a.cmd == "docs":
        return docs(a)
    else:
        list_(a)
    return 0


if __name__ == "__main__":
    sys.exit(main())
