"""planner/_src/schedule.py: host-copy windows read from a compiled (scheduled) module.

A handwritten scheduled module checks the window contents and the replay's arithmetic (one
link per direction: a second reload queues behind the first); a deviceless XLA:GPU compile of a
small scanned step that offloads its layer input checks that the windows of a real compiled
schedule are found in the loop bodies, once per trip, with the arithmetic of the replay.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import pytest
from jax.ad_checkpoint import checkpoint_name

import cost_models as cm
from planner._src import schedule
from planner._src import target as T

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


@functools.cache
def _compiled_text() -> str:
    if T.cuda_plugin() is None:
        pytest.skip("the CUDA PJRT plugin is not installed: no deviceless GPU compile here")
    tgt = T.resolve("h200")
    if tgt.kind != "deviceless":
        pytest.skip(f"no deviceless H200 target here: {tgt.how_to_get_exact}")
    bf = jnp.bfloat16
    args = (
        {
            "up": jax.ShapeDtypeStruct((L, D, 4 * D), bf),
            "down": jax.ShapeDtypeStruct((L, 4 * D, D), bf),
        },
        jax.ShapeDtypeStruct((B, S, D), bf),
    )
    prog = T.compile_traced(tgt, _step, T.args_for(tgt, args))
    return prog.compiled.as_text()


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
        # Alone on its link: exposed = what the compute between start and done leaves.
        assert c.exposed_s == pytest.approx(max(0.0, c.copy_s - c.window_s))
        assert c.window_s >= 0 and math.isfinite(c.window_s)
        assert w.exposed_s(d) == pytest.approx(L * c.exposed_s)
        assert w.copy_s(d) == pytest.approx(L * c.copy_s)
    # The reload's window is inside the backward loop's body, the store's in the forward's.
    (store,) = [c for c in w.copies if c.direction == "d2h"]
    (reload,) = [c for c in w.copies if c.direction == "h2d"]
    assert store.computation != reload.computation
    assert schedule.total_compute_s(_compiled_text(), "h200") > 0
