"""planner.profile and cost_models overlap_from_trace (issue 8), on CPU.

The interval arithmetic on hand-made events, the trace reader on two committed fixtures (a
real CPU trace, and a hand-made GPU trace in the structure XLA's CUPTI collector writes, see
tests/data/make_gpu_synthetic.py), the host-transfer names of a real H200 HLO excerpt, the CPU
"nothing measured" path with a real plan, and the feedback into a hardware profile.
"""

import dataclasses
import math
import os
import types
from pathlib import Path

import pytest

from cost_models import load_profile
from cost_models._trace_overlap import measured_overlap_efficiency, overlap_from_trace
from planner._src import profiling as pp  # noqa: E402
from planner._src.emit.emit import flags_to_compiler_options  # noqa: E402
from planner._src.errors import InvalidArgumentError
from planner._src.profiling import overlap as _overlap  # noqa: E402, F401  (pp.overlap)

DATA = os.path.join(os.path.dirname(__file__), "data")
CPU_TRACE = os.path.join(DATA, "cpu_tiny.xplane.pb")
GPU_TRACE = os.path.join(DATA, "gpu_synthetic.xplane.pbtxt")
HLO = os.path.join(DATA, "h200_offload_excerpt.hlo.txt")
US = 1000.0  # ns per us


# ---------------------------------------------------------------------------- interval math


def test_union_merges_overlapping_and_touching_and_drops_empty():
    assert pp.union([(5, 7), (0, 2), (1, 3), (3, 4), (8, 8), (9, 6)]) == [(0, 4), (5, 7)]
    assert pp.total_length([(0, 10), (2, 3), (5, 12)]) == 12
    assert pp.union([]) == [] and pp.total_length([]) == 0


def test_intersection_and_exposed_and_difference():
    copies = [(30, 60), (92, 98), (85, 95)]
    compute = [(0, 40), (40, 45), (50, 90)]
    assert pp.intersection(copies, compute) == [(30, 45), (50, 60), (85, 90)]
    assert pp.intersection_length(copies, compute) == 30
    assert pp.exposed_length(copies, compute) == 13  # |[30,60) u [85,98)| = 43
    assert pp.difference(copies, compute) == [(45, 50), (90, 98)]
    assert pp.exposed_length([(0, 5)], []) == 5
    assert pp.exposed_length([], [(0, 5)]) == 0
    assert pp.clip([(0, 10), (20, 30), (40, 50)], 5, 25) == [(5, 10), (20, 25)]


def _ev(kind, s, e, op="", line="Stream #1"):
    return pp.Event(
        name=op or kind, start_ns=s * US, end_ns=e * US, kind=kind, line=line, hlo_op=op
    )


def test_step_overlap_by_hand():
    events = [
        _ev("compute", 0, 40),
        _ev("compute", 50, 90),
        _ev("d2h", 30, 60, line="Stream #2"),
        _ev("d2h", 35, 55, line="Stream #3"),
        _ev("h2d", 85, 100, line="Stream #2"),
        _ev("copy_other", 10, 20),
        _ev("compute", 150, 160),
    ]  # outside the window
    s = pp.step_overlap(events, (0, 100 * US), index=3)
    assert s.index == 3 and math.isclose(s.step_s, 100e-6)
    assert math.isclose(s.compute_s, 80e-6)
    assert math.isclose(s.d2h_s, 30e-6)  # concurrent copies count once
    assert math.isclose(s.d2h_hidden_s, 20e-6) and math.isclose(s.d2h_exposed_s, 10e-6)
    assert math.isclose(s.h2d_s, 15e-6)
    assert math.isclose(s.h2d_hidden_s, 5e-6) and math.isclose(s.h2d_exposed_s, 10e-6)
    assert math.isclose(s.copy_s, 45e-6) and math.isclose(s.hidden_s, 25e-6)
    assert math.isclose(s.exposed_s, 20e-6) and math.isclose(s.copy_other_s, 10e-6)
    assert s.n_d2h == 2 and s.n_h2d == 1
    assert math.isclose(s.overlap_efficiency, 25 / 45)
    assert "no hlo_op" in s.per_trip_note and s.per_trip == ()


def test_per_trip_from_repeated_copy_instructions():
    # a scan of 2 layers: the forward DUS runs in trips 0 and 1, the backward DS in 0 and 1
    events = [
        _ev("compute", 0, 10),
        _ev("d2h", 5, 15, "dus.1"),
        _ev("compute", 20, 30),
        _ev("d2h", 25, 31, "dus.1"),
        _ev("compute", 40, 50),
        _ev("h2d", 38, 42, "ds.1"),
        _ev("h2d", 52, 55, "ds.1"),
    ]
    s = pp.step_overlap(events, (0, 60 * US))
    assert [t.trip for t in s.per_trip] == [0, 1]
    t0, t1 = s.per_trip
    assert math.isclose(t0.d2h_s, 10e-6) and math.isclose(t0.d2h_exposed_s, 5e-6)
    assert math.isclose(t1.d2h_s, 6e-6) and math.isclose(t1.d2h_exposed_s, 1e-6)
    assert math.isclose(t0.h2d_s, 4e-6) and math.isclose(t0.h2d_exposed_s, 2e-6)
    assert math.isclose(t1.h2d_s, 3e-6) and math.isclose(t1.h2d_exposed_s, 3e-6)
    assert "backward" in s.per_trip_note
    once = pp.step_overlap([_ev("compute", 0, 10), _ev("d2h", 5, 15, "dus.1")], (0, 20 * US))
    assert once.per_trip == () and "ran once" in once.per_trip_note


# ---------------------------------------------------------------------------- flags, HLO, rules


def test_flags_to_compiler_options():
    assert flags_to_compiler_options(
        "--xla_gpu_enable_latency_hiding_scheduler=true --a=FALSE --b=95 --c=x --d= --e"
    ) == {
        "xla_gpu_enable_latency_hiding_scheduler": True,
        "a": False,
        "b": 95,
        "c": "x",
        "d": "",
        "e": True,
    }
    assert flags_to_compiler_options("") == {}
    with pytest.raises(ValueError, match="does not start with '--'"):
        flags_to_compiler_options("xla_a=true")


def test_host_transfer_ops_on_h200_hlo_excerpt():
    ops = pp.host_transfer_ops(Path(HLO).read_text())
    # the async DUS into the stacked host buffer (forward) and the DS reload (backward)
    assert ops["dynamic-update-slice-start.1"] == "d2h"
    assert ops["dynamic-update-slice-done.1"] == "d2h"
    assert ops["dynamic_update_slice.28.1"] == "d2h"  # inside the called computation
    assert ops["dynamic-slice-start.1"] == "h2d"
    assert ops["dynamic-slice-done.1"] == "h2d"
    assert ops["dynamic_slice.42.1"] == "h2d"
    # device dynamic-slices of the stacked weights, the buffer allocation and plumbing: not copies
    for name in (
        "dynamic_slice.21.2",
        "custom-call.2",
        "get-tuple-element.84",
        "loop_add_multiply_fusion.1",
        "param_0.306",
    ):
        assert name not in ops


def test_classify_rules():
    ops = {"dynamic-update-slice-start.1": "d2h", "dynamic-slice-start.1": "h2d"}
    c = pp.classify
    assert (
        c("MemcpyD2D", "Stream #2", {"memcpy_details": "kind_src:device kind_dst:pinned"}) == "d2h"
    )
    assert c("MemcpyD2D", "s", {"memcpy_details": "kind_src:pageable kind_dst:device"}) == "h2d"
    assert c("MemcpyD2H", "s", {}) == "d2h" and c("MemcpyH2D", "s", {}) == "h2d"
    assert (
        c("MemcpyD2D", "s", {"memcpy_details": "kind_src:device kind_dst:device"}) == "copy_other"
    )
    assert c("wrapped_dus", "s", {"hlo_op": "dynamic-update-slice-start.1"}, ops) == "d2h"
    assert c("kernel", "s", {"hlo_op": "dynamic-slice-start.1"}, ops) == "h2d"
    # a device dynamic-slice fusion (scan slicing its weights) is compute, whatever its name
    assert (
        c("loop_dynamic_slice_fusion", "s", {"hlo_op": "dynamic-slice_bitcast_fusion.3"}, ops)
        == "compute"
    )
    assert c("sm90_gemm", "s", {}) == "compute"


# ---------------------------------------------------------------------------- fixtures


def test_cpu_trace_fixture_has_no_device_plane():
    td = pp.read_trace(CPU_TRACE)
    assert os.path.getsize(CPU_TRACE) < 1_000_000
    assert "/host:CPU" in td.planes and td.device_planes == () and td.events == ()
    assert td.step_source == "StepTraceAnnotation" and len(td.step_windows) == 2
    assert td.host_xla_events > 0  # XLA CPU runs its thunks on host threads
    r = pp.analyze_trace(CPU_TRACE, backend="cpu")
    assert not r.measured and r.status == pp.CPU_STATUS
    assert r.exposed_s is None and r.overlap_efficiency is None
    r = pp.analyze_trace(CPU_TRACE, backend="gpu")
    assert not r.measured and "no device plane" in r.status


def test_gpu_synthetic_fixture_by_hand(tmp_path):
    ops = pp.host_transfer_ops(Path(HLO).read_text())
    r = pp.analyze_trace(
        GPU_TRACE,
        host_ops=ops,
        module="jit_step",
        device="synthetic",
        date="2026-11-30",
        step_name="train_step",
    )
    assert r.measured, r.status
    assert r.step_source == "XLA Modules" and len(r.steps) == 2
    s = r.steps[0]
    kinds = {e.name: e.kind for e in s.events}
    assert kinds == {
        "sm90_xmma_gemm_bf16": "compute",
        "loop_dynamic_slice_fusion": "compute",
        "loop_multiply_fusion": "compute",
        "MemcpyD2H": "d2h",
        "MemcpyH2D": "h2d",
        "wrapped_dynamic_update_slice": "d2h",
        "MemcpyD2D": "copy_other",
    }
    # compute [0,45) u [50,90); d2h [30,60) + [92,98); h2d [85,95)  (us)
    expect = {
        "step_s": 100,
        "compute_s": 85,
        "d2h_s": 36,
        "d2h_hidden_s": 25,
        "d2h_exposed_s": 11,
        "h2d_s": 10,
        "h2d_hidden_s": 5,
        "h2d_exposed_s": 5,
        "copy_s": 43,
        "hidden_s": 30,
        "exposed_s": 13,
        "copy_other_s": 10,
    }
    for step in r.steps:
        for k, v in expect.items():
            assert math.isclose(getattr(step, k), v * 1e-6, abs_tol=1e-12), k
    for k, v in expect.items():
        assert math.isclose(getattr(r, k), v * 1e-6, abs_tol=1e-12), k  # medians
    assert math.isclose(r.overlap_efficiency, 30 / 43)
    assert "0.698" in r.summary()
    assert r.to_json()["median"]["exposed_s"] == pytest.approx(13e-6)
    png = r.timeline_png(tmp_path / "t.png")
    assert os.path.getsize(png) > 5000
    # without the XLA Modules line the host's step annotations give the windows
    r2 = pp.analyze_trace(GPU_TRACE, host_ops=ops, module="jit_other")
    assert r2.step_source == "StepTraceAnnotation" and len(r2.steps) == 2
    assert math.isclose(r2.steps[0].exposed_s, 13e-6)
    # without the HLO names the kernel-driven host DUS is not recognised (counted as compute)
    r3 = pp.analyze_trace(GPU_TRACE, module="jit_step")
    assert math.isclose(r3.steps[0].d2h_s, 30e-6)


# ---------------------------------------------------------------------------- a real plan on CPU


@pytest.fixture(scope="module")
def tiny_plan():
    import planner
    from examples import llama

    cfg = llama.LlamaConfig(n_layers=2)
    step, args = llama.make_train_step(cfg)
    plan = planner.solve(step, *args, hbm_gb=0.05, hardware="cpu", solver_time_limit_s=5)
    return cfg, plan


def test_profile_on_cpu_says_nothing_measured(tiny_plan, tmp_path):
    from examples import llama

    cfg, plan = tiny_plan
    step, args = llama.make_train_step(
        dataclasses.replace(cfg, remat_policy=plan.policy), concrete=True
    )
    r = pp.profile(plan, step, *args, steps=2, warmup=1, logdir=str(tmp_path), donate_argnums=(0,))
    assert not r.measured
    assert r.status == pp.CPU_STATUS
    assert r.backend == "cpu" and r.step_name == "train_step"
    assert r.trace_path.endswith(".xplane.pb") and str(tmp_path) in r.trace_path
    assert len(r.wall_step_s) == 2
    assert all(v is None for k, v in r.figures().items() if k != "steps")  # never zeros
    assert "nothing measured" in r.summary()
    with pytest.raises(ValueError, match="nothing to draw"):
        r.timeline_png(tmp_path / "x.png")
    with pytest.raises(ValueError, match="measured nothing"):
        overlap_from_trace(r, plan.hardware)


def test_profile_applies_flags_per_compile():
    import jax.numpy as jnp

    def step(x):
        return x * 2

    bad = types.SimpleNamespace(xla_flags="--xla_no_such_flag_for_the_test=true")
    with pytest.raises(InvalidArgumentError, match="xla_no_such_flag_for_the_test"):
        pp.profile(bad, step, jnp.ones(3), steps=1, warmup=0)
    ok = types.SimpleNamespace(xla_flags="--xla_cpu_enable_fast_math=false")
    r = pp.profile(ok, step, jnp.ones(3), steps=1, warmup=0)
    assert r.xla_flags == ok.xla_flags and not r.measured


# ---------------------------------------------------------------------------- feedback


def test_overlap_from_trace_numbers_and_source():
    assert measured_overlap_efficiency(0.02, 0.1) == pytest.approx(0.2)
    assert measured_overlap_efficiency(0.3, 0.1) == 1.0  # clamped
    assert measured_overlap_efficiency(-1e-9, 0.1) == 0.0
    with pytest.raises(ValueError, match="no host-copy time"):
        measured_overlap_efficiency(0.0, 0.0)
    hw = load_profile("h200")
    out = overlap_from_trace((0.1, 0.4), hw)
    assert out.overlap_efficiency == pytest.approx(0.25)
    assert out.hbm_bytes == hw.hbm_bytes and out.link == hw.link
    out = overlap_from_trace(
        {
            "hidden_s": 0.213,
            "copy_s": 0.777,
            "device": "NVIDIA H200",
            "date": "2026-12-01",
            "step": "train_step",
        },
        "h200",
    )
    src = out.source("overlap_efficiency")
    assert out.overlap_efficiency == pytest.approx(0.213 / 0.777)
    for text in (
        "device trace",
        "NVIDIA H200",
        "2026-12-01",
        "train_step",
        "0.274",
        "213.000 ms of 777.000 ms",
    ):
        assert text in src
    with pytest.raises(ValueError, match="copy_s"):
        overlap_from_trace({"hidden_s": 1.0}, hw)
    with pytest.raises(TypeError):
        overlap_from_trace(0.5, hw)


def test_overlap_from_trace_with_a_profile_result():
    ops = pp.host_transfer_ops(Path(HLO).read_text())
    r = pp.analyze_trace(
        GPU_TRACE,
        host_ops=ops,
        module="jit_step",
        device="synthetic GPU",
        date="2026-11-30",
        step_name="train_step",
        xla_flags="--a=true",
    )
    out = overlap_from_trace(r, "h200")
    # The model's reading: the fraction of compute time the copies hid behind.
    hidden, compute = sum(s.hidden_s for s in r.steps), sum(s.compute_s for s in r.steps)
    assert out.overlap_efficiency == pytest.approx(min(1.0, hidden / compute))
    assert "hidden/compute" in out.source("overlap_efficiency")
    src = out.source("overlap_efficiency")
    for text in (
        "synthetic GPU",
        "2026-11-30",
        "train_step",
        "2 profiled steps",
        "'--a=true'",
        "d2h 0.050/0.072 ms hidden",
        "gpu_synthetic.xplane.pbtxt",
    ):
        assert text in src


def test_a_trace_without_host_copies_still_reports_compute_busy_time(monkeypatch):
    """A program with nothing offloaded (the saved-instead run of profile_overlap.py
    --trace-saved): no overlap is measured, but each step's compute-busy time is there to
    compare with the offloading program's."""
    import dataclasses

    ops = pp.host_transfer_ops(Path(HLO).read_text())
    full = pp.read_trace(GPU_TRACE, host_ops=ops, module="jit_step")
    td = dataclasses.replace(full, events=tuple(e for e in full.events if e.kind == "compute"))
    monkeypatch.setattr(pp.overlap, "read_trace", lambda *a, **k: td)
    r = pp.analyze_trace(GPU_TRACE, host_ops=ops, module="jit_step")
    assert not r.measured and "no overlap measured" in r.status
    assert len(r.steps) == 2 and r.to_json()["median"]["compute_s"] > 0
    monkeypatch.undo()
    ref = pp.analyze_trace(GPU_TRACE, host_ops=ops, module="jit_step")
    assert r.to_json()["median"]["compute_s"] == pytest.approx(ref.to_json()["median"]["compute_s"])
    assert r.to_json()["median"]["copy_s"] == 0


def _result(events):
    step = pp.step_overlap(events, (0, 100 * US))
    return pp.ProfileResult(
        measured=True,
        status="measured",
        backend="gpu",
        device="test",
        date="2026-12-02",
        step_name="step",
        xla_flags="",
        trace_path="t",
        steps=(step,),
    )


def test_copies_on_the_compute_stream_are_diagnosed_as_serialized():
    """The H200 trace (2026-12-01) had every host copy on the compute stream (one device line,
    'Stream #14(MemcpyD2H,Compute,...)'): the result says they could not overlap and what to
    try. Copies on their own stream get no such note; nor do copies on a compute stream while
    another compute stream ran beside them."""
    one = "Stream #14(MemcpyD2H,Compute)"
    serial = _result(
        [
            _ev("compute", 0, 40, line=one),
            _ev("d2h", 40, 50, line=one),
            _ev("compute", 50, 90, line=one),
            _ev("h2d", 90, 95, line=one),
        ]
    )
    assert serial.streams() == {"copies": (one,), "compute": (one,)}
    text = serial.stream_diagnosis()
    assert "runs in order" in text and "--xla_gpu_enable_command_buffer=" in text
    assert "streams: every host copy" in serial.summary()
    assert serial.to_json()["stream_diagnosis"] == text

    apart = _result(
        [_ev("compute", 0, 40, line="Stream #14"), _ev("d2h", 10, 30, line="Stream #15(MemcpyD2H)")]
    )
    assert apart.stream_diagnosis() == "" and "streams:" not in apart.summary()

    beside = _result(
        [
            _ev("compute", 0, 40, line="Stream #14"),
            _ev("compute", 0, 40, line="Stream #15"),
            _ev("d2h", 10, 30, line="Stream #15"),
        ]
    )
    assert "yet 0.02 ms overlapped" in beside.stream_diagnosis()

    # TPU-style planes put everything on one "XLA Ops" line: no CUDA stream to blame.
    tpu = _result([_ev("compute", 0, 40, line="XLA Ops"), _ev("d2h", 40, 50, line="XLA Ops")])
    assert tpu.streams()["copies"] == ("XLA Ops",) and tpu.stream_diagnosis() == ""


def test_stall_and_waited_exposure_by_hand():
    # Compute stream #1: kernels 0-40 and 60-100, a device-to-device copy 40-50 on the same
    # stream (work the step does anyway), idle 50-60. A store 35-58 (copy stream) ends 2 us
    # before the compute resumes: the compute waited for it. A reload 70-80 hides; a launch
    # gap 100-103 has a copy in it (102-104 h2d... ends after the gap: not waited for).
    events = [
        _ev("compute", 0, 40),
        _ev("copy_other", 40, 50),
        _ev("compute", 60, 100),
        _ev("compute", 103, 120),
        _ev("d2h", 35, 58, line="Stream #2"),
        _ev("h2d", 70, 80, line="Stream #2"),
        _ev("h2d", 101, 110, line="Stream #2"),
        _ev("copy_other", 112, 130, line="Stream #2"),  # async d2d copy: not busy compute
    ]
    s = pp.step_overlap(events, (0, 130 * US))
    # kernels alone: the store is exposed 40-58 (18 us), counting the d2d copy's 10 us
    assert math.isclose(s.d2h_exposed_s, 18e-6)
    # against all the compute stream's work: exposed 50-58 only
    assert math.isclose(s.busy_s, 107e-6) and math.isclose(s.d2h_stall_s, 8e-6)
    assert math.isclose(s.h2d_exposed_s, 2e-6) and math.isclose(s.h2d_stall_s, 2e-6)
    # gaps of the busy union: 50-60 (a store ended at 58: waited), 100-103 (the reload in it
    # ends at 110: not waited for), 120-130 (no copy ends in it)
    assert math.isclose(s.d2h_waited_s, 10e-6) and s.h2d_waited_s == 0
    assert math.isclose(s.idle_s, 23e-6)
    assert math.isclose(s.idle_no_copy_s, 23e-6 - 8e-6 - 2e-6)
    assert pp.WAIT_TOLERANCE_NS == 50_000.0  # 50 us: the test's gaps are far shorter
