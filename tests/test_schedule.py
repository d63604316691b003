"""planner/_src/verify/schedule/: host-copy windows read from a compiled (scheduled) module.

A handwritten scheduled module checks the window contents and the replay's arithmetic (one
link per direction: a second reload queues behind the first); another checks the copy
streams (a loop-slice copy dealt onto a store's stream waits for the store, and the compute
waits for it: the store's exposure on the H200, schedule-exposure-2026-12-05.md) and the
dealing order; a deviceless XLA:GPU compile of a small scanned step that offloads its layer
input checks that the windows of a real compiled schedule are found in the loop bodies, once
per trip, with the arithmetic of the replay, and the verify stage's figure built on them.
The stream deal: XLA's post-order (control predecessors first) and one round-robin for the
module on handwritten modules, and the deal of a deviceless compile against the thunk sequence
XLA dumps for it (planner/_src/verify/schedule/dump.py).
"""

from __future__ import annotations

import functools
import math
import os
import re
from types import SimpleNamespace

import jax
import jax.numpy as jnp
import pytest
from jax.ad_checkpoint import checkpoint_name

import cost_models as cm
from planner._src.verify import schedule
from planner._src.verify.exposure import schedule_exposure_of
from planner._src.verify.schedule import dump as streams
from planner._src.xla import compile as xla_compile
from planner._src.xla import deviceless, hlo
from planner._src.xla import targets as T

HW = cm.load_profile("h200")

# Two reloads (host -> device) started together, a matmul between the first's start and its
# done, an elementwise op before the second's done. bf16[1024,1024] = 2 MiB each.
FIXTURE = """\
HloModule m, is_scheduled=true

ENTRY %main (p0: bf16[1024,1024], p1: bf16[1024,1024], p2: bf16[1024,1024]) -> bf16[1024,1024] {
  %p0 = bf16[1024,1024]{1,0:S(5)} parameter(0)
  %p1 = bf16[1024,1024]{1,0} parameter(1)
  %p2 = bf16[1024,1024]{1,0:S(5)} parameter(2)
  %cs = (bf16[1024,1024]{1,0:S(5)}, bf16[1024,1024]{1,0}, u32[]) copy-start(%p0)
  %cs2 = (bf16[1024,1024]{1,0:S(5)}, bf16[1024,1024]{1,0}, u32[]) copy-start(%p2)
  %dot = bf16[1024,1024]{1,0} dot(%p1, %p1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %cd = bf16[1024,1024]{1,0} copy-done(%cs)
  %neg = bf16[1024,1024]{1,0} negate(%cd)
  %cd2 = bf16[1024,1024]{1,0} copy-done(%cs2)
  ROOT %add = bf16[1024,1024]{1,0} add(%neg, %cd2)
}
"""

MB2 = 1024 * 1024 * 2


def test_windows_and_queue_of_a_handwritten_schedule():
    w = schedule.read_windows(FIXTURE, HW)
    by = {c.start: c for c in w.copies}
    assert set(by) == {"cs", "cs2"}
    first, second = by["cs"], by["cs2"]
    assert (first.direction, first.done, first.nbytes, first.trips) == ("h2d", "cd", MB2, 1)
    assert first.window == ("dot",)
    assert second.window == ("dot", "neg")
    # The prices: the matmul by its FLOPs, the negation by its bytes, each plus a launch.
    t_dot = max(2 * 1024**3 / HW.matmul_rate("bf16"), 3 * MB2 / HW.hbm_bytes_per_s)
    t_dot += HW.kernel_launch_s
    t_neg = 2 * MB2 / HW.hbm_bytes_per_s + HW.kernel_launch_s
    assert first.window_s == pytest.approx(t_dot)
    assert second.window_s == pytest.approx(t_dot + t_neg)
    copy = cm.transfer_seconds(MB2, HW, "h2d")
    assert first.copy_s == second.copy_s == pytest.approx(copy)
    assert copy > t_dot + t_neg  # (the case checked: both copies outlast the compute)
    # The first is exposed for what the matmul does not cover; the second starts when the
    # link is free (after the first) and its done comes after the negation.
    assert first.exposed_s == pytest.approx(copy - t_dot)
    clock_at_cd2 = max(t_dot, copy) + t_neg
    assert second.exposed_s == pytest.approx(2 * copy - clock_at_cd2)
    # Without the queue the second would be exposed by copy - window only: the link matters.
    assert second.exposed_s > copy - second.window_s
    assert w.by_direction()["h2d"] == pytest.approx(
        (2 * copy, 2 * t_dot + t_neg, first.exposed_s + second.exposed_s)
    )
    assert w.by_direction()["d2h"] == (0.0, 0.0, 0.0)


def test_a_copy_in_a_while_body_counts_once_per_trip():
    body = FIXTURE.replace("ENTRY %main", "%body")
    text = body + (
        "\nENTRY %main (a: bf16[1024,1024]) -> bf16[1024,1024] {\n"
        "  %a = bf16[1024,1024]{1,0} parameter(0)\n"
        "  ROOT %w = bf16[1024,1024]{1,0} while(%a), condition=%c, body=%body, "
        'backend_config={"known_trip_count":{"n":"6"}}\n'
        "}\n"
    )
    w = schedule.read_windows(text, HW)
    assert {c.trips for c in w.copies} == {6}
    once = schedule.read_windows(FIXTURE, HW)
    assert w.exposed_s("h2d") == pytest.approx(6 * once.exposed_s("h2d"))


# A store (device -> host, an async dynamic-update-slice into a host buffer) and a loop-slice
# copy (device -> device) started together; the slice's done comes after one matmul, the
# store's after two. 2 MiB each way.
STREAMS = """\
HloModule m, is_scheduled=true

%wrapped_dus (p0: bf16[4,1024,1024], p1: bf16[1,1024,1024], p2: s32[]) -> bf16[4,1024,1024] {
  %p0 = bf16[4,1024,1024]{2,1,0:S(5)} parameter(0)
  %p1 = bf16[1,1024,1024]{2,1,0} parameter(1)
  %p2 = s32[] parameter(2)
  %z = s32[] constant(0)
  ROOT %dus = bf16[4,1024,1024]{2,1,0:S(5)} dynamic-update-slice(%p0, %p1, %p2, %z, %z)
}

%slice (q0: bf16[4,1024,1024], q1: s32[]) -> bf16[1,1024,1024] {
  %q0 = bf16[4,1024,1024]{2,1,0} parameter(0)
  %q1 = s32[] parameter(1)
  %zz = s32[] constant(0)
  ROOT %ds = bf16[1,1024,1024]{2,1,0} dynamic-slice(%q0, %q1, %zz, %zz), dynamic_slice_sizes={1,1024,1024}
}

ENTRY %main (h: bf16[4,1024,1024], x: bf16[1,1024,1024], w: bf16[4,1024,1024], i: s32[], a: bf16[1024,1024]) -> (bf16[4,1024,1024], bf16[1024,1024]) {
  %h = bf16[4,1024,1024]{2,1,0:S(5)} parameter(0)
  %x = bf16[1,1024,1024]{2,1,0} parameter(1)
  %w = bf16[4,1024,1024]{2,1,0} parameter(2)
  %i = s32[] parameter(3)
  %a = bf16[1024,1024]{1,0} parameter(4)
  %st = ((bf16[4,1024,1024]{2,1,0:S(5)}, bf16[1,1024,1024]{2,1,0}, s32[]), bf16[4,1024,1024]{2,1,0:S(5)}, u32[]) fusion-start(%h, %x, %i), kind=kLoop, calls=%wrapped_dus
  %sl = ((bf16[4,1024,1024]{2,1,0}, s32[]), bf16[1,1024,1024]{2,1,0}, u32[]) fusion-start(%w, %i), kind=kLoop, calls=%slice
  %d1 = bf16[1024,1024]{1,0} dot(%a, %a), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %sd = bf16[1,1024,1024]{2,1,0} fusion-done(%sl)
  %b = bf16[1024,1024]{1,0} bitcast(%sd)
  %d2 = bf16[1024,1024]{1,0} dot(%d1, %b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %std = bf16[4,1024,1024]{2,1,0:S(5)} fusion-done(%st)
  ROOT %t = (bf16[4,1024,1024]{2,1,0:S(5)}, bf16[1024,1024]{1,0}) tuple(%std, %d2)
}
"""


def test_a_slice_copy_on_a_stores_stream_waits_for_the_store():
    copy = cm.transfer_seconds(MB2, HW, "d2h")
    # Own streams (4 streams, 2 starts): the store hides behind both matmuls.
    (alone,) = schedule.read_windows(STREAMS, HW).copies
    assert (alone.direction, alone.nbytes, alone.window) == ("d2h", MB2, ("d1", "d2"))
    assert copy > alone.window_s  # (the case checked: the copy outlasts the compute)
    assert alone.stream >= 0 and alone.queued_s == 0.0
    assert alone.exposed_s == pytest.approx(copy - alone.window_s)
    # One stream: the slice copy queues behind the store, the compute waits at the slice's
    # done after the first matmul: the store hides only that matmul, and the whole wait is
    # charged to the store (the trace's reading: copy time with no kernel running).
    (shared,) = schedule.read_windows(STREAMS, HW, streams=1).copies
    t_d1 = alone.window_s / 2  # (the two matmuls have the same shapes)
    assert shared.exposed_s == pytest.approx(copy - t_d1)
    assert shared.queued_s == pytest.approx(shared.exposed_s)
    # Without streams (the earlier replay) the slice copy is free: as with its own stream.
    (free,) = schedule.read_windows(STREAMS, HW, streams=0).copies
    assert free.exposed_s == pytest.approx(alone.exposed_s) and free.stream == -1
    # Dealt round-robin, two starts never share one of 4 streams, whatever the order: the
    # averaged deals give the own-stream figure; over 1 stream, the shared one.
    (mean,) = schedule.read_windows(STREAMS, HW, stream_order="mean").copies
    assert mean.exposed_s == pytest.approx(alone.exposed_s)
    (mean1,) = schedule.read_windows(STREAMS, HW, streams=1, stream_order="mean").copies
    assert mean1.exposed_s == pytest.approx(shared.exposed_s)
    # A slower link (the in-step store rate) lengthens the copy by the ratio.
    (slow,) = schedule.read_windows(STREAMS, HW, link_rates={"d2h": 26e9}).copies
    assert slow.copy_s == pytest.approx(HW.link.latency_s + MB2 / 26e9)


def test_streams_are_dealt_round_robin_in_post_order():
    # The root lists the matmul first: post-order reaches the slice copy before the store,
    # the schedule lists the store first.
    text = STREAMS.replace("tuple(%std, %d2)", "tuple(%d2, %std)")
    text = text.replace(
        "-> (bf16[4,1024,1024], bf16[1024,1024]) {\n  %h",
        "-> (bf16[1024,1024], bf16[4,1024,1024]) {\n  %h",
    ).replace(
        "ROOT %t = (bf16[4,1024,1024]{2,1,0:S(5)}, bf16[1024,1024]{1,0})",
        "ROOT %t = (bf16[1024,1024]{1,0}, bf16[4,1024,1024]{2,1,0:S(5)})",
    )
    module = hlo.parse(text)
    assert schedule.stream_assignment(module, 4) == {"sl": 0, "st": 1}
    assert schedule.stream_assignment(module, 4, order="schedule") == {"st": 0, "sl": 1}
    assert schedule.stream_assignment(module, 1) == {"sl": 0, "st": 0}
    assert schedule.stream_assignment(module, 0) == {}
    # jaxlib 0.12's XLA: the store on the dedicated d2h stream (4), the counter not advanced.
    assert schedule.stream_assignment(module, 4, host_streams="memcpy") == {"sl": 0, "st": 4}
    names = schedule.post_order(module.computations()["main"])
    assert names.index("d1") < names.index("sl") < names.index("d2") < names.index("st")
    assert names[-1] == "t"
    with pytest.raises(ValueError, match="stream_order"):
        schedule.read_windows(text, HW, stream_order="name")
    with pytest.raises(ValueError, match="host_streams"):
        schedule.stream_assignment(module, 4, host_streams="dedicated")


# Control predecessors, as XLA's scheduler adds them to a loop body: %c must run after %b.
CONTROL = """\
HloModule m, is_scheduled=true

ENTRY %main (p0: f32[8], p1: f32[8]) -> (f32[8], f32[8], f32[8]) {
  %p0 = f32[8]{0} parameter(0)
  %p1 = f32[8]{0} parameter(1)
  %a = f32[8]{0} negate(%p0)
  %b = f32[8]{0} exponential(%p1)
  %e = f32[8]{0} sine(%p1)
  %c = f32[8]{0} add(%a, %p1), control-predecessors={%e, %b}
  ROOT %t = (f32[8]{0}, f32[8]{0}, f32[8]{0}) tuple(%c, %b, %e)
}
"""


def test_post_order_walks_control_predecessors_before_operands():
    """XLA's MakeInstructionPostOrder (hlo_computation.cc): below an instruction its control
    predecessors first, the last listed first, then its operands in order. (Before
    2026-12-05 this walked them after the operands: p0, a, p1, e, b, c, t.)"""
    body = hlo.parse(CONTROL).computations()["main"]
    assert schedule.post_order(body) == ["p1", "b", "e", "p0", "a", "c", "t"]
    # Instructions nothing reads start a walk each, in list order, the root among them: an
    # instruction only a control predecessor, or a dead one, listed before the root, first.
    alone = CONTROL.replace("tuple(%c, %b, %e)", "tuple(%c, %b, %b)")
    body = hlo.parse(alone).computations()["main"]
    assert schedule.post_order(body) == ["p1", "e", "b", "p0", "a", "c", "t"]
    dead = CONTROL.replace("  ROOT %t", "  %d = f32[8]{0} cosine(%p0)\n  ROOT %t")
    body = hlo.parse(dead).computations()["main"]
    assert schedule.post_order(body)[:2] == ["p0", "d"]


# ENTRY runs a copy-start, then a loop whose body has two: one round-robin for the module.
CARRIED = """\
HloModule m, is_scheduled=true

%body (bp: (s32[], f32[8], f32[8])) -> (s32[], f32[8], f32[8]) {
  %bp = (s32[], f32[8]{0}, f32[8]{0}) parameter(0)
  %i = s32[] get-tuple-element(%bp), index=0
  %x = f32[8]{0} get-tuple-element(%bp), index=1
  %y = f32[8]{0} get-tuple-element(%bp), index=2
  %cy = (f32[8]{0}, f32[8]{0}, u32[]) copy-start(%y)
  %cx = (f32[8]{0}, f32[8]{0}, u32[]) copy-start(%x)
  %dx = f32[8]{0} copy-done(%cx)
  %dy = f32[8]{0} copy-done(%cy), control-predecessors={%dx}
  %one = s32[] constant(1)
  %j = s32[] add(%i, %one)
  ROOT %out = (s32[], f32[8]{0}, f32[8]{0}) tuple(%j, %dy, %dx)
}

%cond (cp: (s32[], f32[8], f32[8])) -> pred[] {
  %cp = (s32[], f32[8]{0}, f32[8]{0}) parameter(0)
  %ci = s32[] get-tuple-element(%cp), index=0
  %n = s32[] constant(4)
  ROOT %lt = pred[] compare(%ci, %n), direction=LT
}

ENTRY %main (p: f32[8]) -> (s32[], f32[8], f32[8]) {
  %p = f32[8]{0} parameter(0)
  %cs = (f32[8]{0}, f32[8]{0}, u32[]) copy-start(%p)
  %cd = f32[8]{0} copy-done(%cs)
  %zero = s32[] constant(0)
  %init = (s32[], f32[8]{0}, f32[8]{0}) tuple(%zero, %cd, %p)
  ROOT %w = (s32[], f32[8]{0}, f32[8]{0}) while(%init), condition=%cond, body=%body
}
"""


def test_streams_carry_the_round_robin_across_computations():
    """XLA's ExecutionStreamAssignment: computations breadth-first from ENTRY, one counter
    for the module. ENTRY's copy takes stream 0, the loop body's copies 1 and 2 (restarted
    per computation, as before 2026-12-05: 0 and 1); in the body the control edge puts
    %dx's walk, and so %cx, first."""
    module = hlo.parse(CARRIED)
    assert schedule.stream_assignment(module, 4) == {"cs": 0, "cx": 1, "cy": 2}
    assert schedule.stream_assignment(module, 2) == {"cs": 0, "cx": 1, "cy": 0}
    assert schedule.host_streams_of("0.11.2") == "compute"
    assert schedule.host_streams_of("0.12.0.1") == "memcpy"


def test_the_verify_stages_figure_takes_the_schedules_reloads():
    """verify.schedule_exposure_of: per direction the schedule's exposure beside the model's
    (summed over the regions' trips), and the model's step with the schedule's reloads; no
    recompile outside a deviceless target."""
    called = []
    cost = SimpleNamespace(hardware=HW, regions=(SimpleNamespace(multiplicity=8),))
    pred = SimpleNamespace(
        step_s=1.0, regions=(SimpleNamespace(exposed_fwd_s=1e-3, exposed_bwd_s=2e-3),)
    )
    got = schedule_exposure_of(
        SimpleNamespace(as_text=lambda: FIXTURE),
        cost,
        pred,
        "XLA:GPU test",
        recompile=lambda o: called.append(o),
    )
    w = schedule.read_windows(FIXTURE, HW, pricing="kernels")
    assert not called and got.source == "the verify compile"
    assert (got.model_d2h_exposed_s, got.model_h2d_exposed_s) == (8e-3, 16e-3)
    assert got.h2d_exposed_s == pytest.approx(w.exposed_s("h2d")) and got.h2d_exposed_s > 0
    assert got.h2d_copy_s == pytest.approx(w.copy_s("h2d"))
    assert got.d2h_copy_s == got.d2h_exposed_s == 0.0
    assert got.step_s == pytest.approx(1.0 - 16e-3 + got.h2d_exposed_s)
    assert (got.copies, got.compiler) == (2, "XLA:GPU test")


# ---------------------------------------------------------------- a deviceless compile

L, B, S, D = 4, 4, 512, 512


def _layer(x, w):
    x = checkpoint_name(x, "layer_input")
    h = jnp.tanh(x @ w["up"])
    return x + h @ w["down"]


def _step(params, x):
    policy = jax.checkpoint_policies.save_and_offload_only_these_names(
        names_which_can_be_saved=[],
        names_which_can_be_offloaded=["layer_input"],
        offload_src="device",
        offload_dst="pinned_host",
    )
    body = jax.checkpoint(_layer, policy=policy)

    def loss(p):
        y, _ = jax.lax.scan(lambda c, w: (body(c, w), None), x, p)
        return jnp.mean(y.astype(jnp.float32) ** 2)

    return jax.grad(loss)(params)


def _skip(reason: str) -> None:
    # CI sets this where it installed the plugin: a skip there would hide a broken install.
    if os.environ.get("PLANNER_REQUIRE_DEVICELESS") == "1":
        pytest.fail(f"PLANNER_REQUIRE_DEVICELESS=1 but {reason}", pytrace=False)
    pytest.skip(reason)


def _h200():
    if T.cuda_plugin() is None:
        _skip("the CUDA PJRT plugin is not installed: no deviceless GPU compile here")
    tgt = T.resolve("h200")
    if tgt.kind != "deviceless":
        _skip(f"no deviceless H200 target here: {tgt.how_to_get_exact}")
    return tgt


def _jaxlib_at_least(*version: int) -> bool:
    parts = tuple(int(x) for x in re.findall(r"\d+", T.jaxlib_version())[: len(version)])
    return parts >= version


def _args():
    bf = jnp.bfloat16
    return (
        {
            "up": jax.ShapeDtypeStruct((L, D, 4 * D), bf),
            "down": jax.ShapeDtypeStruct((L, 4 * D, D), bf),
        },
        jax.ShapeDtypeStruct((B, S, D), bf),
    )


@functools.cache
def _compiled_text() -> str:
    tgt = _h200()
    return xla_compile.compile_traced(
        tgt, _step, deviceless.args_for(tgt, _args())
    ).compiled.as_text()


def test_windows_of_a_deviceless_h200_compile():
    w = schedule.read_windows(_compiled_text(), "h200")
    layer_input = B * S * D * 2
    for d in ("d2h", "h2d"):
        copies = [c for c in w.copies if c.direction == d]
        assert copies, f"no {d} copy found in the compiled schedule"
        # The layer input goes to the host in the forward loop and comes back in the
        # backward loop: one copy a trip, in a while body run L times.
        assert [(c.nbytes, c.trips) for c in copies] == [(layer_input, L)]
        (c,) = copies
        assert c.done  # waited for in the same trip
        assert c.copy_s == pytest.approx(cm.transfer_seconds(layer_input, HW, d))
        # Alone on its link and without streams: exposed = what the compute between start
        # and done leaves. With the copy streams, a loop-slice copy dealt onto its stream can
        # only add waits, never more than the copy itself.
        (bare,) = [
            x
            for x in schedule.read_windows(_compiled_text(), "h200", streams=0).copies
            if x.direction == d
        ]
        assert bare.exposed_s == pytest.approx(max(0.0, bare.copy_s - bare.window_s))
        assert bare.exposed_s - 1e-9 <= c.exposed_s <= c.copy_s + 1e-9
        assert c.window_s >= 0 and math.isfinite(c.window_s)
        assert w.exposed_s(d) == pytest.approx(L * c.exposed_s)
        assert w.copy_s(d) == pytest.approx(L * c.copy_s)
    # The reload's window is inside the backward loop's body, the store's in the forward's.
    (store,) = [c for c in w.copies if c.direction == "d2h"]
    (reload,) = [c for c in w.copies if c.direction == "h2d"]
    assert store.computation != reload.computation
    assert schedule.total_compute_s(_compiled_text(), "h200") > 0


def test_the_verify_figure_recompiles_with_triton_gemms_on_a_deviceless_target():
    """On a deviceless target the verify stage's figure comes from a second compile with
    Triton GEMMs on (the plan's own options kept): its schedule's copies are found, both
    directions, L trips each."""
    tgt = _h200()
    text = _compiled_text()
    seen = []

    def recompile(options):
        seen.append(dict(options))
        return xla_compile.compile_traced(
            tgt, _step, deviceless.args_for(tgt, _args()), dict(options)
        ).compiled

    cost = SimpleNamespace(hardware=HW, regions=(SimpleNamespace(multiplicity=L),))
    pred = SimpleNamespace(
        step_s=1.0, regions=(SimpleNamespace(exposed_fwd_s=0.0, exposed_bwd_s=0.0),)
    )
    with deviceless.target_scope(tgt):
        got = schedule_exposure_of(
            SimpleNamespace(as_text=lambda: text),
            cost,
            pred,
            tgt.description,
            recompile=recompile,
            compiler_options=(("xla_gpu_enable_latency_hiding_scheduler", True),),
        )
    assert seen == [
        {"xla_gpu_enable_latency_hiding_scheduler": True, "xla_gpu_enable_triton_gemm": True}
    ]
    assert "Triton GEMMs on" in got.source and got.compiler == tgt.description
    layer_input = B * S * D * 2
    assert got.copies == 2
    assert got.d2h_copy_s == pytest.approx(L * cm.transfer_seconds(layer_input, HW, "d2h"))
    assert got.h2d_copy_s == pytest.approx(L * cm.transfer_seconds(layer_input, HW, "h2d"))
    assert 0 <= got.d2h_exposed_s <= got.d2h_copy_s and 0 <= got.h2d_exposed_s <= got.h2d_copy_s
    assert got.step_s == pytest.approx(1.0 + got.h2d_exposed_s)


def test_verify_carries_the_schedule_figure_for_an_offloading_plan():
    """verify() on the deviceless H200 target, the plan offloading the layer input: the
    verification carries the schedule's figure (both directions, the plan's own region
    trips), and not when asked not to."""
    import planner
    from planner._src.cost import build_cost_model, evaluate
    from planner._src.emit.emit import emit
    from planner._src.types import Assignment
    from planner._src.verify.verify import VerifyRequest, verify

    tgt = _h200()

    def step(params, x):
        def loss(p):
            layer = jax.checkpoint(_layer)
            y, _ = jax.lax.scan(lambda c, w: (layer(c, w), None), x, p)
            return jnp.mean(y.astype(jnp.float32) ** 2)

        return jax.grad(loss)(params)

    session = planner.Planner(step, *_args(), hardware="h200", allow_offload=True)
    tr, graph = session.trace, session.graph
    (cls,) = [c for c in graph.classes if c.name == "layer_input"]
    a = Assignment.of({cls.key: "offload"})
    cost = build_cost_model(tr, graph, session.hardware, allow_offload=True)
    pred = evaluate(cost, graph, a)
    em = emit(a, {c.key: c.name for c in graph.classes}, session.hardware)
    got = {}
    for flag in (True, False):
        with deviceless.target_scope(tgt):
            got[flag] = verify(
                VerifyRequest(
                    step_fn=step,
                    args=deviceless.args_for(tgt, _args()),
                    trace=tr,
                    graph=graph,
                    cost=cost,
                    assignment=a,
                    emitted=em,
                    prediction=pred,
                    usable_bytes=10**10,
                    backend="cuda",
                    compiler=tgt.description,
                    schedule_exposure=flag,
                )
            ).verification
    assert got[False].schedule is None
    x = got[True].schedule
    assert x is not None and x.copies == 2 and x.compiler == tgt.description
    layer_input = B * S * D * 2
    assert x.d2h_copy_s == pytest.approx(L * cm.transfer_seconds(layer_input, HW, "d2h"))
    assert x.model_d2h_exposed_s > 0 and x.model_h2d_exposed_s > 0  # (the model offloads too)
    assert x.step_s == pytest.approx(pred.step_s - x.model_h2d_exposed_s + x.h2d_exposed_s)


def test_the_predicted_streams_are_xlas_in_a_deviceless_h200_compile(tmp_path):
    """The stream of every async start, predicted from the compiled text, equals the one XLA
    wrote in its thunk sequence (``xla_dump_to``): the forward loop's store and the backward
    loop's reload and weight-slice copies, one round-robin over both loops (jaxlib 0.10, 0.11) or
    with the host copies on their dedicated streams (0.12)."""
    tgt = _h200()
    compiled = xla_compile.compile_traced(
        tgt, _step, deviceless.args_for(tgt, _args()), {"xla_dump_to": str(tmp_path)}
    ).compiled
    dumped = streams.read_module(tmp_path, "_step").assignment(4)
    module = hlo.parse(compiled.as_text())
    mode = schedule.host_streams_of(T.jaxlib_version())
    predicted = schedule.stream_assignment(module, 4, host_streams=mode)
    # the store, the reload and (from jaxlib 0.11: its XLA:GPU copies a scan's weight slices
    # asynchronously; 0.10.2's copies them in line, kDynamicSliceFusion) a weight slice
    assert len(dumped) >= (3 if _jaxlib_at_least(0, 11) else 2), dumped
    assert predicted == dumped
    # Read from the dump, the replay takes it as its deal: the same windows.
    a = schedule.read_windows(module, HW, host_streams=mode)
    b = schedule.read_windows(module, HW, assignment=dumped)
    assert [c.exposed_s for c in a.copies] == [c.exposed_s for c in b.copies]


def test_streams_read_from_a_dumps_thunk_sequence(tmp_path):
    """planner/_src/verify/schedule/dump.py joins the thunk sequence's stream labels with the metadata's
    instruction names (lines as XLA:GPU of jaxlib 0.11.2 / 0.12.0.1 writes them)."""
    (tmp_path / "module_0001.jit_f.thunk_sequence.txt").write_text(
        "004: kWhile        [prev=003 (1) | next=016 (1)]\n"
        "  body:\n"
        "    006: kAsyncStart   [source | next=013 (4)] stream=memcpy_d2h_stream, async_id=6\n"
        "    022: kAsyncStart   [source | next=034 (6)] stream=computation_stream[2], async_id=22\n"
        "    032: kAsyncDone    [source | sink] async_id=22\n"
    )
    (tmp_path / "module_0001.jit_f.thunk_metadata.txt").write_text(
        'thunk_metadata {\n  thunk_info {\n    profile_annotation: "dynamic-update-slice-start.1"\n'
        '    thunk_id: 6\n  }\n  thunk_kind: "kAsyncStart"\n}\n'
        'thunk_metadata {\n  thunk_info {\n    profile_annotation: "fusion-start"\n'
        '    thunk_id: 22\n  }\n  thunk_kind: "kAsyncStart"\n}\n'
    )
    (got,) = streams.read_dump(tmp_path)
    assert got.module == "module_0001.jit_f"
    assert got.labels() == {
        "dynamic-update-slice-start.1": "memcpy_d2h_stream",
        "fusion-start": "computation_stream[2]",
    }
    assert got.assignment(4) == {"dynamic-update-slice-start.1": 4, "fusion-start": 2}
    assert streams.read_module(tmp_path) == got
    with pytest.raises(ValueError, match="unknown stream label"):
        streams.stream_index("memcpy_d2d_stream")
    with pytest.raises(FileNotFoundError, match="xla_dump_to"):
        streams.read_dump(tmp_path / "none")


def test_a_dumps_sequence_after_thunk_passes_is_the_same_module(tmp_path):
    """jaxlib 0.10.2's XLA:GPU writes a second sequence per module,
    ``*.thunk_sequence_after_thunk_passes.txt`` (the same thunk ids, command buffers formed;
    no metadata file of its own): the module is read once, its starts named from
    ``*.thunk_metadata.txt``, not by their thunk ids."""
    start = (
        "    010: kAsyncStart   [source | next=011 (1)] stream=computation_stream[0], async_id=10\n"
    )
    (tmp_path / "module_0001.jit_f.thunk_sequence.txt").write_text(start)
    (tmp_path / "module_0001.jit_f.thunk_sequence_after_thunk_passes.txt").write_text(
        "000: kCommandBuffer [source | next=006 (1)]\n" + start
    )
    (tmp_path / "module_0001.jit_f.thunk_metadata.txt").write_text(
        'thunk_metadata {\n  thunk_info {\n    profile_annotation: "dynamic-update-slice-start.1"\n'
        '    thunk_id: 10\n  }\n  thunk_kind: "kAsyncStart"\n}\n'
    )
    (got,) = streams.read_dump(tmp_path)
    assert got.module == "module_0001.jit_f"
    assert got.labels() == {"dynamic-update-slice-start.1": "computation_stream[0]"}
    assert streams.read_module(tmp_path, "jit_f") == got


# Two stores issued back to back: the first on the stream of a loop-slice copy issued just
# before it (not ready until the slice is copied), the second on a stream of its own (ready
# at once). The second's done comes after one matmul, the first's after two.
RACE = (
    STREAMS.replace(
        "(h: bf16[4,1024,1024], x:",
        "(h: bf16[4,1024,1024], g: bf16[4,1024,1024], x:",
    )
    .replace(
        "  %x = bf16[1,1024,1024]{2,1,0} parameter(1)",
        "  %g = bf16[4,1024,1024]{2,1,0:S(5)} parameter(5)\n"
        "  %x = bf16[1,1024,1024]{2,1,0} parameter(1)",
    )
    .replace(
        "  %st = ((bf16[4,1024,1024]{2,1,0:S(5)}, bf16[1,1024,1024]{2,1,0}, s32[]), "
        "bf16[4,1024,1024]{2,1,0:S(5)}, u32[]) fusion-start(%h, %x, %i), kind=kLoop, "
        "calls=%wrapped_dus\n"
        "  %sl = ((bf16[4,1024,1024]{2,1,0}, s32[]), bf16[1,1024,1024]{2,1,0}, u32[]) "
        "fusion-start(%w, %i), kind=kLoop, calls=%slice\n",
        "  %sl = ((bf16[4,1024,1024]{2,1,0}, s32[]), bf16[1,1024,1024]{2,1,0}, u32[]) "
        "fusion-start(%w, %i), kind=kLoop, calls=%slice\n"
        "  %st = ((bf16[4,1024,1024]{2,1,0:S(5)}, bf16[1,1024,1024]{2,1,0}, s32[]), "
        "bf16[4,1024,1024]{2,1,0:S(5)}, u32[]) fusion-start(%h, %x, %i), kind=kLoop, "
        "calls=%wrapped_dus\n"
        "  %st2 = ((bf16[4,1024,1024]{2,1,0:S(5)}, bf16[1,1024,1024]{2,1,0}, s32[]), "
        "bf16[4,1024,1024]{2,1,0:S(5)}, u32[]) fusion-start(%g, %x, %i), kind=kLoop, "
        "calls=%wrapped_dus\n",
    )
    .replace(
        "  %b = bf16[1024,1024]{1,0} bitcast(%sd)\n",
        "  %b = bf16[1024,1024]{1,0} bitcast(%sd)\n"
        "  %st2d = bf16[4,1024,1024]{2,1,0:S(5)} fusion-done(%st2)\n",
    )
)


def test_a_ready_store_takes_the_link_before_an_earlier_store_that_is_not_ready():
    # On the H200 the host link goes to the copy ready first, not to the one issued first
    # (lc16k_dots: 5 stores took the link up to 26 ms before a store issued ahead of them and
    # still queued on its stream; schedule-race-2026-12-06.md). Before 2026-12-06 the replay
    # gave the link in issue order: the first store held it from its issue while its stream
    # was still copying the slice, and the second store, ready at once, waited behind it.
    deal = {"sl": 0, "st": 0, "st2": 1}
    copy = cm.transfer_seconds(MB2, HW, "d2h")
    got = {
        order: {
            c.start: c
            for c in schedule.read_windows(RACE, HW, assignment=deal, link_order=order).copies
        }
        for order in ("ready", "issue")
    }
    ready, issue = got["ready"], got["issue"]
    assert ready["st2"].window == ("d1",) and ready["st"].window == ("d1", "d2")
    t_d1 = ready["st2"].window_s
    assert copy > 2 * t_d1  # (the case checked: each copy outlasts both matmuls)
    # Ready order: the second store runs first, hidden by the first matmul; the first store
    # runs after it, hidden by the second matmul.
    assert ready["st2"].exposed_s == pytest.approx(copy - t_d1)
    assert ready["st"].exposed_s == pytest.approx(copy - t_d1)
    # Issue order (the old replay): the second store waits the whole first store, and all
    # of it is exposed.
    assert issue["st2"].exposed_s == pytest.approx(copy)
    assert schedule.read_windows(RACE, HW, assignment=deal).copies == tuple(
        ready[c.start] for c in schedule.read_windows(RACE, HW, assignment=deal).copies
    )
    with pytest.raises(ValueError, match="link_order"):
        schedule.read_windows(RACE, HW, link_order="size")
