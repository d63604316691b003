"""planner._src.xla.kernels and recompute_shares: device time of compiled XLA:GPU HLO, kernel by kernel.

Small hand-written modules in the form ``compiled.as_text()`` prints (the shapes of the
H200 MoE step's score chain, scaled down), with the bytes each rule must count worked out
by hand here; the whole-step check against measured kernels is
benchmarks/hlo_kernel_time.py (benchmarks/results/hlo-kernel-time-2026-12-05.md).
"""

from __future__ import annotations

import math

import pytest

import cost_models as cm
from planner._src.xla import hlo
from planner._src.xla import kernels as K
from planner._src.xla import recompute_shares as R

HW = cm.load_profile("h200")

# Rows of 1024 f32 (4 KiB), 256 rows: 1 MiB of scores; the softmax backward of full remat
# (the H200's fusion.161, shape for shape): a row max of the masked scores, then a row sum
# of grad * exp(s - max), then the output from both.
SOFTMAX_BWD = """
HloModule m, is_scheduled=true

%max (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %m = f32[] maximum(%a, %b)
}

%sum (a.1: f32[], b.1: f32[]) -> f32[] {
  %a.1 = f32[] parameter(0)
  %b.1 = f32[] parameter(1)
  ROOT %s = f32[] add(%a.1, %b.1)
}

%fused_softmax_bwd (param_0: f32[256,1024], param_1: bf16[256,1024]) -> f32[256,1024] {
  %param_0 = f32[256,1024]{1,0} parameter(0)
  %c = f32[] constant(-inf)
  %reduce.max = f32[256]{0} reduce(%param_0, %c), dimensions={1}, to_apply=%max, metadata={op_name="jit(f)/transpose(jvp())/checkpoint/rematted_computation/reduce_max"}
  %b.max = f32[256,1024]{1,0} broadcast(%reduce.max), dimensions={0}
  %sub = f32[256,1024]{1,0} subtract(%param_0, %b.max), metadata={op_name="jit(f)/transpose(jvp())/checkpoint/rematted_computation/sub"}
  %exp = f32[256,1024]{1,0} exponential(%sub), metadata={op_name="jit(f)/transpose(jvp())/checkpoint/rematted_computation/exp"}
  %param_1 = bf16[256,1024]{1,0} parameter(1)
  %g = f32[256,1024]{1,0} convert(%param_1)
  %mul = f32[256,1024]{1,0} multiply(%g, %exp)
  %z = f32[] constant(0)
  %reduce.sum = f32[256]{0} reduce(%mul, %z), dimensions={1}, to_apply=%sum
  %b.sum = f32[256,1024]{1,0} broadcast(%reduce.sum), dimensions={0}
  %d = f32[256,1024]{1,0} subtract(%g, %b.sum)
  ROOT %out = f32[256,1024]{1,0} multiply(%d, %exp)
}

ENTRY %main (p0: f32[256,1024], p1: bf16[256,1024]) -> f32[256,1024] {
  %p0 = f32[256,1024]{1,0} parameter(0)
  %p1 = bf16[256,1024]{1,0} parameter(1)
  ROOT %fusion.161 = f32[256,1024]{1,0} fusion(%p0, %p1), kind=kCustom, calls=%fused_softmax_bwd
}
"""

F32 = 256 * 1024 * 4  # the scores
BF16 = 256 * 1024 * 2  # the gradient


def _only(text: str) -> K.KernelTime:
    ks = K.kernel_times(text, HW)
    assert len(ks) == 1, ks
    return ks[0]


def test_softmax_backward_reads_its_rows_once_per_reduction_pass():
    k = _only(SOFTMAX_BWD)
    # pass 1 (row max): the scores; pass 2 (row sum): scores and gradient; the output pass:
    # scores and gradient again; written once.
    assert k.passes == 3
    assert k.bytes_read == F32 + (F32 + BF16) + (F32 + BF16)
    assert k.bytes_written == F32
    assert k.seconds == pytest.approx((k.bytes_read + k.bytes_written) / HW.hbm_bytes_per_s)


def test_a_saved_row_statistic_removes_its_pass():
    """The recompute's share of the kernel is the pass its recomputed reduction adds: with
    the row max read as a parameter (saved), the fusion reads the scores twice, not three
    times; the backward's own row sum is not a recompute and keeps its pass."""
    shares = R.recompute_shares(SOFTMAX_BWD, HW, "main")
    by_prim = {s.primitive: s.seconds for s in shares}
    assert set(by_prim) == {"reduce_max"}  # the kernel also does backward work: no split
    # one read of the scores, less the saved row max (256 f32) that both remaining passes read
    assert by_prim["reduce_max"] == pytest.approx((F32 - 2 * 256 * 4) / HW.hbm_bytes_per_s)


def test_one_pass_when_reductions_read_in_parallel():
    """Two reductions of the same rows that do not need each other's result (a multi-output
    reduction fusion) read them together: one pass."""
    text = """
HloModule m

%sum (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}

%fused (param_0: f32[256,1024]) -> (f32[256], f32[256]) {
  %param_0 = f32[256,1024]{1,0} parameter(0)
  %z = f32[] constant(0)
  %r1 = f32[256]{0} reduce(%param_0, %z), dimensions={1}, to_apply=%sum
  %sq = f32[256,1024]{1,0} multiply(%param_0, %param_0)
  %r2 = f32[256]{0} reduce(%sq, %z), dimensions={1}, to_apply=%sum
  ROOT %t = (f32[256]{0}, f32[256]{0}) tuple(%r1, %r2)
}

ENTRY %main (p0: f32[256,1024]) -> (f32[256], f32[256]) {
  %p0 = f32[256,1024]{1,0} parameter(0)
  ROOT %input_reduce_fusion = (f32[256]{0}, f32[256]{0}) fusion(%p0), kind=kInput, calls=%fused
}
"""
    k = _only(text)
    assert k.passes == 1
    assert k.bytes_read == F32
    assert k.bytes_written == 2 * 256 * 4


# A scan body: the layer's weights sliced out of the stacked [8, ...] parameter by the loop
# counter, a cuBLAS matmul, its output written into the stacked residual in place (an async
# fusion), inside a loop of 8 trips nested in a loop of 3.
LOOP = """
HloModule m

%fused_ds (param_0: bf16[8,512,512], param_1: s32[]) -> bf16[1,512,512] {
  %param_0 = bf16[8,512,512]{2,1,0} parameter(0)
  %param_1 = s32[] parameter(1)
  %z = s32[] constant(0)
  ROOT %ds = bf16[1,512,512]{2,1,0} dynamic-slice(%param_0, %param_1, %z, %z), dynamic_slice_sizes={1,512,512}
}

%fused_dus (param_0.1: bf16[8,1024,512], param_1.1: bf16[1,1024,512], param_2.1: s32[]) -> bf16[8,1024,512] {
  %param_0.1 = bf16[8,1024,512]{2,1,0} parameter(0)
  %param_1.1 = bf16[1,1024,512]{2,1,0} parameter(1)
  %param_2.1 = s32[] parameter(2)
  %z.1 = s32[] constant(0)
  ROOT %dus = bf16[8,1024,512]{2,1,0} dynamic-update-slice(%param_0.1, %param_1.1, %param_2.1, %z.1, %z.1)
}

%body (arg: (s32[], bf16[8,512,512], bf16[1024,512], bf16[8,1024,512])) -> (s32[], bf16[8,512,512], bf16[1024,512], bf16[8,1024,512]) {
  %arg = (s32[], bf16[8,512,512]{2,1,0}, bf16[1024,512]{1,0}, bf16[8,1024,512]{2,1,0}) parameter(0)
  %i = s32[] get-tuple-element(%arg), index=0
  %w = bf16[8,512,512]{2,1,0} get-tuple-element(%arg), index=1
  %x = bf16[1024,512]{1,0} get-tuple-element(%arg), index=2
  %stack = bf16[8,1024,512]{2,1,0} get-tuple-element(%arg), index=3
  %fusion-start.1 = ((bf16[8,512,512]{2,1,0}, s32[]), bf16[1,512,512]{2,1,0}, u32[]) fusion-start(%w, %i), kind=kLoop, calls=%fused_ds
  %fusion-done.1 = bf16[1,512,512]{2,1,0} fusion-done(%fusion-start.1)
  %wl = bf16[512,512]{1,0} bitcast(%fusion-done.1)
  %custom-call.1 = (bf16[1024,512]{1,0}, s8[4194304]{0}) custom-call(%x, %wl), custom_call_target="__cublas$lt$matmul", backend_config={"gemm_backend_config":{"dot_dimension_numbers":{"lhs_contracting_dimensions":["1"],"rhs_contracting_dimensions":["0"],"lhs_batch_dimensions":[],"rhs_batch_dimensions":[]}}}
  %y = bf16[1024,512]{1,0} get-tuple-element(%custom-call.1), index=0
  %y3 = bf16[1,1024,512]{2,1,0} bitcast(%y)
  %fusion-start.2 = ((bf16[8,1024,512]{2,1,0}, bf16[1,1024,512]{2,1,0}, s32[]), bf16[8,1024,512]{2,1,0}, u32[]) fusion-start(%stack, %y3, %i), kind=kLoop, calls=%fused_dus
  %fusion-done.2 = bf16[8,1024,512]{2,1,0} fusion-done(%fusion-start.2)
  ROOT %t = (s32[], bf16[8,512,512]{2,1,0}, bf16[1024,512]{1,0}, bf16[8,1024,512]{2,1,0}) tuple(%i, %w, %y, %fusion-done.2)
}

%cond (arg.c: (s32[], bf16[8,512,512], bf16[1024,512], bf16[8,1024,512])) -> pred[] {
  %arg.c = (s32[], bf16[8,512,512]{2,1,0}, bf16[1024,512]{1,0}, bf16[8,1024,512]{2,1,0}) parameter(0)
  ROOT %p = pred[] constant(true)
}

%outer_body (arg.o: (s32[], bf16[8,512,512], bf16[1024,512], bf16[8,1024,512])) -> (s32[], bf16[8,512,512], bf16[1024,512], bf16[8,1024,512]) {
  %arg.o = (s32[], bf16[8,512,512]{2,1,0}, bf16[1024,512]{1,0}, bf16[8,1024,512]{2,1,0}) parameter(0)
  ROOT %while = (s32[], bf16[8,512,512]{2,1,0}, bf16[1024,512]{1,0}, bf16[8,1024,512]{2,1,0}) while(%arg.o), condition=%cond, body=%body, backend_config={"known_trip_count":{"n":"8"}}
}

ENTRY %main (a: (s32[], bf16[8,512,512], bf16[1024,512], bf16[8,1024,512])) -> (s32[], bf16[8,512,512], bf16[1024,512], bf16[8,1024,512]) {
  %a = (s32[], bf16[8,512,512]{2,1,0}, bf16[1024,512]{1,0}, bf16[8,1024,512]{2,1,0}) parameter(0)
  ROOT %while.outer = (s32[], bf16[8,512,512]{2,1,0}, bf16[1024,512]{1,0}, bf16[8,1024,512]{2,1,0}) while(%a), condition=%cond, body=%outer_body, backend_config={"known_trip_count":{"n":"3"}}
}
"""


def test_loop_kernels_run_trips_times_and_async_slices_are_memcpys():
    ks = {k.name: k for k in K.kernel_times(LOOP, HW)}
    # bitcasts, tuples, get-tuple-element, the *-done halves and the loops move nothing
    assert set(ks) == {"fusion-start.1", "custom-call.1", "fusion-start.2"}
    assert {k.runs for k in ks.values()} == {24}  # 8 trips x 3 of the outer loop
    ds, mm, dus = ks["fusion-start.1"], ks["custom-call.1"], ks["fusion-start.2"]
    # the slice of one layer's weights (and the s32 offset), not the stacked parameter
    assert (ds.kind, ds.bytes_read, ds.bytes_written) == ("d2d", 512 * 512 * 2 + 4, 512 * 512 * 2)
    # in place: the update's bytes, not the 8-layer buffer's
    assert dus.kind == "d2d" and dus.bytes_written == 1024 * 512 * 2
    assert dus.seconds == pytest.approx(1024 * 512 * 2 / HW.loop_copy_rate())
    # cuBLAS: 2 M N K at the bf16 matmul rate, or its bytes (not the workspace), the larger
    assert mm.kind == "gemm" and mm.matmul_flops == 2 * 1024 * 512 * 512
    assert mm.bytes_written == 1024 * 512 * 2
    assert mm.seconds == pytest.approx(
        max(
            mm.matmul_flops / HW.matmul_rate("bf16"),
            (mm.bytes_read + mm.bytes_written) / HW.hbm_bytes_per_s,
        )
    )
    assert K.step_seconds(list(ks.values()), include_d2d=False) == pytest.approx(24 * mm.seconds)


def test_loop_times_and_anchor_gaps_difference_the_backward_loops():
    """Two programs with the same loops: the gap is the backward body's kernel time, per
    trip, under the first less under the second."""
    remat = LOOP.replace(
        "while(%arg.o)", 'while(%arg.o), metadata={op_name="jit(f)/transpose(jvp())/while"}'
    )
    saved = remat.replace("custom_call_target", "custom_call_target_unused")  # no matmul
    gaps = R.anchor_gaps(remat, saved, HW)
    mm = next(k for k in K.kernel_times(remat, HW) if k.kind == "gemm")
    assert len(gaps) == 1 and gaps[0].trips == 8
    # the second program's call is an unknown custom-call: priced by its bytes only
    other = next(k for k in K.kernel_times(saved, HW) if k.name == "custom-call.1")
    assert gaps[0].recompute_s == pytest.approx(mm.seconds - other.seconds)
    assert gaps[0].recompute_d2d_s == 0


def test_parses_a_real_compiled_module():
    """Whatever XLA this machine has: a jitted softmax compiles, parses and prices to a
    positive time with no instruction left unpriced that moves bytes."""
    import jax
    import jax.numpy as jnp

    text = jax.jit(jax.nn.softmax).lower(jnp.ones((64, 128), jnp.float32)).compile().as_text()
    ks = K.kernel_times(hlo.parse(text), HW)
    assert ks and all(k.seconds >= 0 for k in ks)
    assert sum(k.bytes_read for k in ks) >= 64 * 128 * 4


def _cand(index, primitive, shape, dtype="float32", source="model.py:10"):
    from tests.synthetic import candidate

    return candidate(
        index,
        primitive,
        shape,
        dtype,
        signature=f"{primitive}{shape}",
        nbytes=4 * math.prod(shape),
        source=source,
    )


def test_shares_go_to_the_candidates_of_their_equation():
    """By primitive, element type and size (XLA's bitcast dims do not matter) and, where
    both know it, the source line; an equation that is no candidate stays unmatched."""
    shares = [
        R.RecomputeShare("reduce_max", "f32[128,4096]", 2e-3, ("model.py", 10)),
        R.RecomputeShare("exp", "f32[8,16,4096,4096]", 1e-3, ("model.py", 11)),
        R.RecomputeShare("exp", "f32[8,16,4096,4096]", 3e-3, None),
        R.RecomputeShare("scatter", "u32[16,8]", 5e-4, None),
    ]
    cands = [
        _cand(0, "reduce_max", (8, 16, 4096)),  # same size, other dims: the same value
        _cand(1, "exp", (8, 16, 4096, 4096), source="model.py:11"),
        _cand(2, "exp", (8, 16, 4096, 4096), source="model.py:12"),
        _cand(3, "exp", (8, 16, 4096, 4096), dtype="bfloat16"),
    ]
    got, left = R.match_shares(shares, cands)
    assert got[0] == pytest.approx(2e-3)
    # the line picks candidate 1; the share with no line splits over both f32 exps
    assert got[1] == pytest.approx(1e-3 + 1.5e-3)
    assert got[2] == pytest.approx(1.5e-3)
    assert 3 not in got  # a bf16 exp is another value
    assert left == pytest.approx(5e-4)


def test_shares_match_the_source_lines_as_the_trace_writes_them():
    """The trace stage's sources carry a column and the function ("/p/llama.py:131:24 (attn)"):
    the HLO's (file, line) picks the candidate of that line among equal-sized ones (two
    projections of one shape, 2026-12-05: split evenly before)."""
    shares = [R.RecomputeShare("dot_general", "bf16[8,4096,4096]", 3e-3, ("llama.py", 131))]
    cands = [
        _cand(0, "dot_general", (8, 4096, 4096), "bfloat16", "/w/examples/llama.py:131:24 (attn)"),
        _cand(1, "dot_general", (8, 4096, 4096), "bfloat16", "/w/examples/llama.py:139:31 (attn)"),
    ]
    got, left = R.match_shares(shares, cands)
    assert got == {0: pytest.approx(3e-3)} and left == 0


def test_region_recompute_seconds_prices_the_backward_loop_of_the_region():
    """The matmul of a full-remat backward loop of 8 trips, marked as a recompute, goes to
    the candidate of that matmul; a loop of another trip count is another region's."""
    remat = LOOP.replace(
        'while(%arg.o), condition=%cond, body=%body, backend_config={"known_trip_count":{"n":"8"}}',
        'while(%arg.o), condition=%cond, body=%body, backend_config={"known_trip_count":{"n":"8"}},'
        ' metadata={op_name="jit(f)/transpose(jvp())/while"}',
    ).replace(
        'custom_call_target="__cublas$lt$matmul"',
        'custom_call_target="__cublas$lt$matmul", metadata={op_name="jit(f)/transpose(jvp())/'
        'while/body/checkpoint/rematted_computation/dot_general"}',
    )
    mm = next(k for k in K.kernel_times(remat, HW) if k.kind == "gemm")
    cands = [_cand(5, "dot_general", (1024, 512), dtype="bfloat16"), _cand(6, "exp", (1024, 512))]
    got, left = R.region_recompute_seconds(remat, HW, 8, cands)
    assert got == {5: pytest.approx(mm.seconds)} and left == 0
    assert R.region_recompute_seconds(remat, HW, 4, cands) == ({}, 0.0)


ATTENTION = """
HloModule m, is_scheduled=true

ENTRY %main (q: bf16[8,4096,32,128], k: bf16[8,4096,8,128], v: bf16[8,4096,8,128]) -> bf16[8,32,4096,128] {
  %q = bf16[8,4096,32,128]{3,2,1,0} parameter(0)
  %k = bf16[8,4096,8,128]{3,2,1,0} parameter(1)
  %v = bf16[8,4096,8,128]{3,2,1,0} parameter(2)
  %fmha = (bf16[8,32,4096,128]{3,1,2,0}, f32[8,32,4096]{2,1,0}, u8[256]{0}) custom-call(%q, %k, %v), custom_call_target="__cudnn$fmhaSoftmax", backend_config={"cudnn_fmha_backend_config":{"is_flash_attention":true,"mask_type":"MASK","sliding_window_length":0}}
  ROOT %o = bf16[8,32,4096,128]{3,1,2,0} get-tuple-element(%fmha), index=0
}
"""


@pytest.mark.parametrize(
    ("mask", "kept"), [("NO_MASK", 1.0), ("CAUSAL", 0.5), ("PADDING_CAUSAL", 0.5)]
)
def test_cudnn_attention_counts_the_scores_its_mask_keeps(mask, kept):
    """The profile's attention rates are FLOPs over the kept scores (cost_models' causal
    half): a causal call (the Llama examples', "mask_type":"CAUSAL" in the HLO) counts half
    the 4 b h s s d of an unmasked one, as the library prices the same equation."""
    k = _only(ATTENTION.replace('"MASK"', f'"{mask}"'))
    full = 4.0 * 8 * 32 * 4096 * 4096 * 128
    assert k.kind == "attention" and k.matmul_flops == pytest.approx(kept * full)
    assert k.seconds == pytest.approx(kept * full / HW.attention_rate("fwd", 4096))
