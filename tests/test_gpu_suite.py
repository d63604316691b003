"""benchmarks/gpu_suite.py's bookkeeping, without JAX: the measurement runner and the clock
are replaced, so what is checked is which measurements start, what is recorded, what a
resumed call skips, and that the tarball is always written."""

from __future__ import annotations

import argparse
import json
import os
import sys
import tarfile
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import gpu_suite as gs  # noqa: E402


class FakeDevice:
    """The clock and the runner: each measurement "takes" its duration and writes a file."""

    def __init__(self, durations: dict, timeouts=(), empty=()):
        self.t = 0.0
        self.durations = durations
        self.timeouts = set(timeouts)
        self.empty = set(empty)  # the script ran but its own budget let it measure nothing
        self.started: list[str] = []
        self.timeout_given: dict[str, float] = {}

    def clock(self) -> float:
        return self.t

    def runner(self, argv, env, cwd, timeout, log_path):
        mid = argv[-1]
        self.started.append(mid)
        self.timeout_given[mid] = timeout
        rec = {"kind": "skipped", "why": "out of time"} if mid in self.empty else {"ok": True}
        (log_path.parent / "results.jsonl").write_text(json.dumps({"id": mid, **rec}) + "\n")
        log_path.write_text(f"ran {mid}\n")
        if mid in self.timeouts:
            self.t += timeout
            return -9, True
        self.t += self.durations[mid]
        return 0, False


def _measurements(expected: dict, always=()):
    def build(mid):
        return lambda ctx, raw: gs.Command(["fake", mid])

    return [
        gs.Measurement(mid, mid.split(":")[0], mid, e, "test", build(mid), always=mid in always)
        for mid, e in expected.items()
    ]


def _args(tmp_path: Path, name: str, budget_s: float, resume_from=None):
    return argparse.Namespace(
        out=str(tmp_path / name),
        work=str(tmp_path / f"{name}-work"),
        budget_s=budget_s,
        resume_from=resume_from,
        plans=str(tmp_path / "no-plans"),
        only="",
        skip="",
        dry_run=False,
        no_versions=True,
    )


def _records(out: Path) -> list[dict]:
    return [json.loads(x) for x in (out / "records.jsonl").read_text().splitlines()]


def _status(out: Path) -> dict:
    st = {}
    for r in _records(out):
        if r["kind"] == "measurement":
            st[r["id"]] = r["status"]
        elif r["kind"] == "skipped":
            st[r["id"]] = "skipped"
    return st


@pytest.fixture
def device(monkeypatch):
    def make(durations, timeouts=(), empty=()):
        dev = FakeDevice(durations, timeouts, empty)
        monkeypatch.setattr(gs, "run_command", dev.runner)
        return dev

    return make


def test_budget_stops_starting_what_does_not_fit(tmp_path, device):
    ms = _measurements({"a": 50, "b": 60, "c": 30})
    dev = device({"a": 50, "b": 60, "c": 30})
    # 100 s to measure in (the pack reserve on top): a runs, b (60 > 50 left) is not
    # started, c (30) still fits after it
    gs.run(_args(tmp_path, "out", 100 + gs.PACK_RESERVE_S), ms, clock=dev.clock)
    out = tmp_path / "out"
    assert dev.started == ["a", "c"]
    assert _status(out) == {"a": "ok", "b": "skipped", "c": "ok"}
    skipped = next(r for r in _records(out) if r["kind"] == "skipped")
    assert skipped["expected_s"] == 60 and skipped["left_s"] == 50
    # each measurement may take at most what is left of the budget
    assert dev.timeout_given["a"] == pytest.approx(100) and dev.timeout_given["c"] == 50
    end = _records(out)[-1]
    assert end["kind"] == "end" and end["not_measured"] == ["b"]
    rec = next(r for r in _records(out) if r.get("id") == "a")
    for key in ("command", "git_commit", "jax", "start", "end", "wall_s", "expected_s", "raw"):
        assert key in rec
    assert rec["command"] == "fake a" and rec["wall_s"] == 50


def test_resume_skips_what_is_measured_and_carries_it(tmp_path, device):
    ms = _measurements({"a": 50, "b": 60, "c": 30, "loss": 1}, always=("loss",))
    dev = device({"a": 50, "b": 60, "c": 30, "loss": 1})
    gs.run(_args(tmp_path, "call1", 60 + gs.PACK_RESERVE_S), ms, clock=dev.clock)
    assert dev.started == ["a", "loss"]  # b and c do not fit the 9 s left after a
    first = tmp_path / "call1"
    dev2 = device({"a": 50, "b": 60, "c": 30, "loss": 1})
    gs.run(
        _args(tmp_path, "call2", 200 + gs.PACK_RESERVE_S, resume_from=str(first)),
        ms,
        clock=dev2.clock,
    )
    out = tmp_path / "call2"
    assert dev2.started == ["b", "c", "loss"]  # a is not measured again; loss always is
    recs = _records(out)
    calls = [r["call"] for r in recs if r["kind"] == "call"]
    assert calls == [1, 2]
    a = [r for r in recs if r.get("id") == "a" and r["kind"] == "measurement"]
    assert len(a) == 1 and a[0]["call"] == 1 and a[0]["carried_from"]
    # the newest OUT holds every call's raw outputs
    with tarfile.open(out / "suite.tgz") as tar:
        names = set(tar.getnames())
    assert {"raw/a/results.jsonl", "raw/b/results.jsonl", "raw/c/results.jsonl"} <= names
    assert "records.jsonl" in names and "summary.md" in names
    # a third call has nothing left but what always runs
    dev3 = device({"loss": 1})
    gs.run(
        _args(tmp_path, "call3", 200 + gs.PACK_RESERVE_S, resume_from=str(out)),
        ms,
        clock=dev3.clock,
    )
    assert dev3.started == ["loss"]


def test_tarball_written_when_a_measurement_is_cut(tmp_path, device):
    ms = _measurements({"a": 50, "b": 20})
    dev = device({"a": 50, "b": 20}, timeouts=("a",))
    gs.run(_args(tmp_path, "out", 80 + gs.PACK_RESERVE_S), ms, clock=dev.clock)
    out = tmp_path / "out"
    assert _status(out) == {"a": "timeout", "b": "skipped"}
    for f in ("suite.tgz", "records.jsonl", "summary.md"):
        assert (out / f).is_file()
    with tarfile.open(out / "suite.tgz") as tar:
        assert "raw/a/output.log" in tar.getnames()  # what the cut run left is kept
    # a cut measurement is not done: the next call runs it again, beside the first attempt
    dev2 = device({"a": 10, "b": 20})
    gs.run(
        _args(tmp_path, "again", 200 + gs.PACK_RESERVE_S, resume_from=str(out)),
        ms,
        clock=dev2.clock,
    )
    assert dev2.started == ["a", "b"]
    with tarfile.open(tmp_path / "again" / "suite.tgz") as tar:
        names = tar.getnames()
    assert "raw/a.attempt1/output.log" in names and "raw/a/output.log" in names


def test_a_run_that_measured_nothing_is_not_done(tmp_path, device):
    ms = _measurements({"a": 10, "b": 10})
    dev = device({"a": 10, "b": 10}, empty=("a",))
    gs.run(_args(tmp_path, "out", 100), ms, clock=dev.clock)
    assert _status(tmp_path / "out") == {"a": "empty", "b": "ok"}
    dev2 = device({"a": 10, "b": 10})
    gs.run(_args(tmp_path, "again", 100, resume_from=str(tmp_path / "out")), ms, clock=dev2.clock)
    assert dev2.started == ["a"]


def test_tarball_stays_under_the_limit(tmp_path, device, monkeypatch):
    monkeypatch.setattr(gs, "TARBALL_LIMIT", 64 * 1024)
    big = {}

    def runner(argv, env, cwd, timeout, log_path):
        (log_path.parent / "trace.bin").write_bytes(os.urandom(256 * 1024))
        (log_path.parent / "results.jsonl").write_text('{"ok": true}\n')
        log_path.write_text("ok\n")
        big["t"] = big.get("t", 0) + 1
        return 0, False

    monkeypatch.setattr(gs, "run_command", runner)
    gs.run(_args(tmp_path, "out", 100), _measurements({"a": 1}), clock=lambda: 0.0)
    tgz = tmp_path / "out" / "suite.tgz"
    assert tgz.stat().st_size <= 64 * 1024
    with tarfile.open(tgz) as tar:
        names = tar.getnames()
        left = tar.extractfile("left_out.txt").read().decode()
    assert "raw/a/trace.bin" not in names and "raw/a/trace.bin" in left
    assert "raw/a/output.log" in names


def test_unrunnable_is_recorded_not_started(tmp_path, device):
    ms = _measurements({"a": 10})
    ms.append(
        gs.Measurement("g", "g", "g", 10, "test", lambda ctx, raw: gs.Unrunnable("needs_gpu", "x"))
    )
    dev = device({"a": 10})
    gs.run(_args(tmp_path, "out", 100), ms, clock=dev.clock)
    assert dev.started == ["a"]
    assert _status(tmp_path / "out") == {"a": "ok", "g": "needs_gpu"}


def test_the_device_command_fits_the_tool():
    text = (ROOT / "benchmarks" / "gpu_suite_call.txt").read_text()
    cmd = text.split("COMMAND:\n", 1)[1].split("\n\n", 1)[0].strip()
    assert len(cmd) <= 2000 and "gpu_suite.py run" in cmd and "--budget-s" in cmd


def test_runner_kills_what_the_measurement_started(tmp_path):
    marker = tmp_path / "late"
    script = f"(sleep 3; touch {marker}) & sleep 30"
    t = time.monotonic()
    rc, cut = gs.run_command(["bash", "-c", script], None, tmp_path, 1, tmp_path / "log")
    assert cut and rc == -9 and time.monotonic() - t < 15
    time.sleep(3.5)
    assert not marker.exists()  # the background child died with the group
