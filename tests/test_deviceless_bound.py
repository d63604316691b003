"""The bound on what a deviceless XLA:GPU compile cannot see (planner/_src/xla/deviceless_bound.py)
and how the budget holds a program to it (budget.Margin): HLO text only, no plugin needed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from planner._src.budget import (
    Margin,
    headroom_short,
    headroom_why,
    program_usable,
    requested_for,
    usable_bytes,
)
from planner._src.xla import deviceless_bound as db
from planner._src.xla import targets

EXCERPT = Path(__file__).parent / "data" / "deviceless_cudnn_excerpt.hlo.txt"
ENGINE = db.ENGINE_BYTES


def _backward(b, h_q, h_k, s, d, *, ws=0, queue="0", deterministic=False, name="bwd"):
    """One backward fused-attention call as XLA prints it (the output tuple, the target, the
    backend config that names the [b, h_q, s_q, s_kv] intermediate)."""
    config = {
        "operation_queue_id": queue,
        "cudnn_fmha_backend_config": {
            "intermediate_tensor_shape": {"element_type": "BF16", "dimensions": [b, h_q, s, s]},
            "is_flash_attention": True,
            "mask_type": "CAUSAL",
            **({"force_deterministic": True} if deterministic else {}),
        },
    }
    return (
        f"  %{name} = (bf16[{b},{h_q},{s},{d}]{{3,1,2,0}}, bf16[{b},{h_k},{s},{d}]{{3,1,2,0}}, "
        f"bf16[{b},{h_k},{s},{d}]{{3,1,2,0}}, u8[{ws}]{{0}}) custom-call(%q, %k, %v, %o, %do), "
        f'custom_call_target="__cudnn$fmhaSoftmaxBackward", backend_config={json.dumps(config)}'
    )


def _cublas(ws=33554432):
    return (
        f"  %mm = (bf16[2048,512]{{1,0}}, s8[{ws}]{{0}}) custom-call(%a, %b), "
        'custom_call_target="__cublas$lt$matmul", backend_config={"operation_queue_id":"0"}'
    )


# The device's own backward workspaces recorded on the H200 (jaxlib 0.11.2, deviceless_gap.py):
# (b, h_q, h_k, s, d) -> bytes; the engine's part was 256 B on every call.
MEASURED = {
    (8, 32, 8, 4096, 128): 1_077_936_384,  # llama_scan: grouped-query
    (4, 32, 8, 4096, 128): 538_968_320,  # llama_loop, parallel
    (8, 16, 16, 4096, 128): 270_532_864,  # moe: multi-head
}


@pytest.mark.parametrize("shape", sorted(MEASURED))
def test_the_cudnn_bound_is_the_measured_device_workspace_with_the_engine_rounded_up(shape):
    got = db.unseen_workspaces(_backward(*shape))
    assert got.bytes == MEASURED[shape] - 256 + ENGINE
    assert got.cudnn_calls == 1 and got.cublas_calls == 0


def test_recorded_deviceless_hlo_is_read():
    """XLA's own text: the backward's workspace is u8[0]; the bound is cuDNN's formula for
    b=2, h_q=4, h_k=2, s=1024, d=128: dQ_accum and softmax_sum in float32, full-head dK and
    dV in bfloat16 (grouped-query), the engine's bytes; the forward adds the engine's only,
    and one call is live at a time, so the larger counts."""
    text = EXCERPT.read_text()
    assert "u8[0]" in text and "__cudnn$fmhaSoftmaxBackward" in text
    got = db.unseen_workspaces(text)
    b, h, s, d = 2, 4, 1024, 128
    assert got.bytes == b * h * s * d * 4 + b * h * s * 4 + 2 * b * h * s * d * 2 + ENGINE
    assert (got.cudnn_calls, got.cublas_calls) == (2, 1)
    assert got.cublas_workspace_bytes == 32 * 2**20
    assert "backward b=2 h_q=4 h_k=2 s_q=1024 s_kv=1024 d=128" in got.note()


def test_one_stream_counts_the_largest_call_other_streams_add():
    small, large = _backward(2, 8, 8, 1024, 64, name="a"), _backward(4, 8, 8, 1024, 64, name="b")
    one, two = db.unseen_workspaces(small).bytes, db.unseen_workspaces(large).bytes
    assert db.unseen_workspaces(small + "\n" + large).bytes == two
    aside = _backward(2, 8, 8, 1024, 64, queue="1", name="c")
    assert db.unseen_workspaces(large + "\n" + aside).bytes == two + one


def test_what_the_deviceless_figure_holds_is_not_counted_twice():
    full = db.unseen_workspaces(_backward(2, 8, 8, 1024, 64)).bytes
    assert db.unseen_workspaces(_backward(2, 8, 8, 1024, 64, ws=1000)).bytes == full - 1000
    assert db.unseen_workspaces(_backward(2, 8, 8, 1024, 64, ws=10**12)).bytes == 0


def test_a_deterministic_backward_adds_cudnns_dp_workspace():
    plain = db.unseen_workspaces(_backward(2, 8, 8, 1000, 64)).bytes
    det = db.unseen_workspaces(_backward(2, 8, 8, 1000, 64, deterministic=True)).bytes
    assert det - plain == 2 * 8 * 1024 * 1024 * 2  # sequences rounded up to 64


def test_cublas_workspaces_add_nothing_and_a_program_without_cudnn_gets_no_bound():
    got = db.unseen_workspaces(_cublas() + "\n" + _cublas(4 * 2**20))
    assert got.bytes == 0 and got.cublas_calls == 2 and got.cublas_workspace_bytes == 32 * 2**20
    assert got.note() == "" and db.unseen_workspaces("").bytes == 0


# ------------------------------------------------------------------- the budget


@pytest.fixture(scope="module")
def hw():
    from planner._src.planning.inputs import load_hardware

    return load_hardware("h200")


@pytest.mark.parametrize("workspace,fraction", [(0, 0.045), (540_016_640, 0.045), (10**9, 0.0)])
def test_a_program_fits_the_usable_budget_exactly_when_it_fits_with_its_bound(
    hw, workspace, fraction
):
    """usable_bytes folds the per-program rule ``device + workspace + fraction * temp <=
    the budget without the bound`` into one figure for programs with the step's inputs and
    outputs; requested_for inverts it."""
    m = Margin(workspace_bytes=workspace, temp_fraction=fraction)
    requested, io = 40 * 10**9, 22 * 10**9
    base, usable = usable_bytes(requested, hw, io), usable_bytes(requested, hw, io, m)
    assert usable < base
    for temp in range(usable - io - 2000, usable - io + 2000, 7):
        fits_usable = io + temp <= usable
        fits_bound = io + temp + m.bytes_for(temp) <= base
        assert fits_usable == fits_bound or abs(io + temp - usable) <= 2, temp
    again = requested_for(usable, hw, io, m)
    assert abs(usable_bytes(int(again) + 1, hw, io, m) - usable) <= 2


def test_the_headroom_names_each_part_of_the_bound(hw):
    m = Margin(workspace_bytes=542_000_000, temp_fraction=targets.DEVICELESS_TEMP_FRACTION)
    why = headroom_why(hw, margin=m)
    assert "0.542 GB of cuDNN workspaces" in why and "4.5% of each program's temporaries" in why
    assert "DEVICELESS_TEMP_FRACTION" in why and "deviceless-bound-2026-12-06.md" in why
    assert "deviceless bound (0.542 GB cuDNN workspaces + 4.5% of temporaries)" in headroom_short(
        hw, m
    )
    assert "deviceless" not in headroom_why(hw, margin=Margin())


@pytest.mark.parametrize("program_io,program_ws", [(14 * 10**9, None), (30 * 10**9, 10**9)])
def test_a_program_with_other_inputs_or_workspaces_is_held_to_the_same_rule(
    hw, program_io, program_ws
):
    """A plan that moves train state to the host has fewer device inputs than the step the
    usable figure was folded for: program_usable holds it to its own bound, not to the
    step's (where the usable figure alone would leave it temp_fraction of the moved
    bytes too much)."""
    m = Margin(workspace_bytes=540_016_640, temp_fraction=0.045)
    requested, io = 40 * 10**9, 22 * 10**9
    base, usable = usable_bytes(requested, hw, io), usable_bytes(requested, hw, io, m)
    limit = program_usable(usable, io, program_io, m, program_ws)
    ws = m.workspace_bytes if program_ws is None else program_ws
    for temp in range(limit - program_io - 2000, limit - program_io + 2000, 7):
        fits_bound = program_io + temp + ws + int(m.temp_fraction * temp) <= base
        assert (program_io + temp <= limit) == fits_bound or abs(program_io + temp - limit) <= 2
    assert program_usable(usable, io, io, m) == usable
    assert program_usable(usable, io, program_io, Margin()) == usable


def test_the_fit_rounds_hold_a_program_to_its_own_limit_not_the_folded_budget():
    """A plan that moves train state is verified against its own limit
    (budget.program_usable, lower than the budget the model is held to): a compile between
    the two is over, and the next round's correction closes the gap as well as the error."""
    from planner._src.planning.context import fits, limit_of
    from planner._src.types import Status, Verification

    budget, limit = 44_358_000, 44_200_000

    def ver(compiled, usable):
        return Verification(
            status=Status.OVER if compiled > usable else Status.OK,
            compiled=None,
            compiled_device_bytes=compiled,
            predicted_peak_bytes=44_300_000,
            usable_bytes=usable,
            checks=(),
            backend="gpu",
        )

    between = ver(44_258_000, limit)
    assert limit_of(between, budget) == limit
    assert not fits(between, budget)  # over its own limit though under the folded budget
    assert fits(ver(44_150_000, limit), budget)
    assert limit_of(ver(44_258_000, budget), budget) == budget  # the step's own io: no gap
    assert fits(ver(44_258_000, budget), budget)
