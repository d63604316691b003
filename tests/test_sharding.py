"""Sharded (SPMD) train steps: bytes, times and the budget are per device.

conftest.py gives the process 8 fake CPU devices (XLA_FLAGS, before JAX starts). Each mesh
below runs the same scanned, checkpointed MLP layer with a with_sharding_constraint inside;
the expected per-device bytes are computed by hand from the mesh and the partition specs.
"""

import dataclasses

import jax
import jax.extend
import jax.numpy as jnp
import numpy as np
import pytest
from jax.ad_checkpoint import checkpoint_name
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

import cost_models as cm
import planner
from planner._src.cost import Assignment, build_cost_model, evaluate
from planner._src.graph import build_graph
from planner._src.results.report import build_report, render
from planner._src.results.report.build import sharding_notes
from planner._src.trace import shard, trace_step

B, D, F, L = 16, 32, 64, 2  # batch, model width, hidden width, layers (scan trips)
F32 = 4

# name: (mesh shape, axis names, w1 spec, w2 spec, x spec, spec of the hidden activation)
MESHES = {
    "dp8": ((8,), ("data",), P(), P(), P("data", None), P("data", None)),
    "data2_tensor4": (
        (2, 4),
        ("data", "model"),
        P(None, None, "model"),
        P(None, "model", None),
        P("data", None),
        P("data", "model"),
    ),
    "fsdp4_tensor2": (
        (4, 2),
        ("fsdp", "model"),
        P(None, "fsdp", "model"),
        P(None, "model", "fsdp"),
        P("fsdp", None),
        P("fsdp", "model"),
    ),
}


def make_step(mesh_name, batch=B, layers=L):
    shape, names, w1s, w2s, xs, hs = MESHES[mesh_name]
    mesh = Mesh(np.array(jax.devices()[: int(np.prod(shape))]).reshape(shape), names)

    def layer(x, w):
        w1, w2 = w
        h = checkpoint_name(x @ w1, "hidden")
        h = jax.lax.with_sharding_constraint(h, NamedSharding(mesh, hs))
        return x + jnp.tanh(h) @ w2, None

    def loss(params, x):
        y, _ = jax.lax.scan(jax.checkpoint(layer), x, params)
        return jnp.sum(y**2)

    def step(params, x):
        return jax.grad(loss)(params, x)

    args = (
        (
            jax.ShapeDtypeStruct((layers, D, F), jnp.float32, sharding=NamedSharding(mesh, w1s)),
            jax.ShapeDtypeStruct((layers, F, D), jnp.float32, sharding=NamedSharding(mesh, w2s)),
        ),
        jax.ShapeDtypeStruct((batch, D), jnp.float32, sharding=NamedSharding(mesh, xs)),
    )
    return step, args


@pytest.fixture(scope="module")
def traces():
    assert len(jax.devices()) >= 8, "conftest.py must give the process 8 CPU devices"
    return {name: trace_step(*make_step(name)) for name in MESHES}


def _per_device(c) -> int:
    """Per-device bytes of a candidate's output (or an input's), live or not."""
    if not hasattr(c, "shape"):
        return c.nbytes
    return -(-F32 * int(np.prod(c.shape)) // c.shard_divisor)


def _cands(tr):
    (r,) = tr.regions
    first_dot = next(c for c in r.candidates if c.primitive == "dot_general")
    out_dot = [c for c in r.candidates if c.primitive == "dot_general"][-1]
    return {
        "x@w1": first_dot,
        "hidden": next(c for c in r.candidates if c.name == "hidden"),
        "constraint": next(c for c in r.candidates if c.primitive == "sharding_constraint"),
        "tanh": next(c for c in r.candidates if c.primitive == "tanh"),
        "a@w2": out_dot,
        "layer input": next(i for i in r.inputs if i.stacked),
    }


# Hand-computed per-device bytes of one trip. Global: hidden [B, F] = 16*64*4 = 4096 bytes,
# layer output / input [B, D] = 16*32*4 = 2048 bytes.
EXPECTED = {
    # Pure data parallel over 8: every activation has B/8 = 2 rows.
    "dp8": {
        "x@w1": (B // 8) * F * F32,  # 2*64*4 = 512
        "hidden": (B // 8) * F * F32,
        "constraint": (B // 8) * F * F32,
        "tanh": (B // 8) * F * F32,
        "a@w2": (B // 8) * D * F32,  # 2*32*4 = 256
        "layer input": (B // 8) * D * F32,
    },  # 256
    # data=2 x tensor=4: the hidden is split both ways; a @ w2 contracts the tensor-sharded F,
    # so its output is a partial sum, all-reduced over 'model': only B is split.
    "data2_tensor4": {
        "x@w1": (B // 2) * (F // 4) * F32,  # 8*16*4 = 512
        "hidden": (B // 2) * (F // 4) * F32,
        "constraint": (B // 2) * (F // 4) * F32,
        "tanh": (B // 2) * (F // 4) * F32,
        "a@w2": (B // 2) * D * F32,  # 8*32*4 = 1024
        "layer input": (B // 2) * D * F32,
    },  # 1024
    # fsdp=4 x tensor=2: batch over fsdp, hidden over both; weights gathered before use.
    "fsdp4_tensor2": {
        "x@w1": (B // 4) * (F // 2) * F32,  # 4*32*4 = 512
        "hidden": (B // 4) * (F // 2) * F32,
        "constraint": (B // 4) * (F // 2) * F32,
        "tanh": (B // 4) * (F // 2) * F32,
        "a@w2": (B // 4) * D * F32,  # 4*32*4 = 512
        "layer input": (B // 4) * D * F32,
    },  # 512
}


@pytest.mark.parametrize("mesh_name", list(MESHES))
def test_per_device_bytes_match_hand_computed(traces, mesh_name):
    tr = traces[mesh_name]
    assert tr.num_partitions == 8
    got = _cands(tr)
    for what, expected in EXPECTED[mesh_name].items():
        c = got[what]
        assert _per_device(c) == expected, (what, c)
        assert c.global_nbytes == c.nbytes * c.shard_divisor, (what, c)
    assert got["x@w1"].global_nbytes == B * F * F32
    # The layer's output is read by neither the backward pass nor a recompute: never a
    # residual, it weighs nothing (its per-device size above is still 1/divisor).
    assert got["a@w2"].live_outputs == () and got["a@w2"].nbytes == 0
    # How each size was found: the matmuls and tanh from the partitioned HLO, the constraint
    # from its own sharding, the checkpoint_name (no HLO instruction) from its operand.
    assert got["x@w1"].shard_source == "hlo"
    assert got["tanh"].shard_source == "hlo"
    assert got["a@w2"].shard_source == "hlo"
    assert got["constraint"].shard_source == "sharding-constraint"
    assert got["hidden"].shard_source == "input-sharding"
    assert got["layer input"].shard_source == "hlo"


def test_argument_bytes_are_per_device(traces):
    # dp8: weights replicated (2 * L*D*F*4 = 32768), x split 8 ways (16*32*4 / 8 = 256).
    assert traces["dp8"].argument_bytes == 2 * L * D * F * F32 + B * D * F32 // 8
    # data2_tensor4: each weight split 4 ways over 'model', x split 2 ways over 'data'.
    assert traces["data2_tensor4"].argument_bytes == 2 * L * D * F * F32 // 4 + B * D * F32 // 2


def test_matmul_work_and_collectives_per_device(traces):
    # a @ w2 under data2 x tensor4: output split 2 ways, contraction (F) split 4 ways, so
    # each device does 1/8 of the multiply-adds and all-reduces its [8, 32] partial sum over
    # the 4 'model' devices: a ring all-reduce sends 2 * (4-1)/4 * 8*32*4 = 1536 bytes.
    c = _cands(traces["data2_tensor4"])["a@w2"]
    assert c.shard_divisor == 2 and c.flop_divisor == 8
    assert c.collectives == ("all-reduce f32[8,32]",)
    assert c.collective_bytes == pytest.approx(2 * 3 / 4 * (B // 2) * D * F32)
    # FSDP: x @ w1 needs w1 gathered over 'fsdp' (4 devices): the per-device [8, 32] shard
    # becomes [32, 32] (32*32*4 = 4096 bytes), of which each device receives 3/4.
    c = _cands(traces["fsdp4_tensor2"])["x@w1"]
    assert "all-gather f32[32,32]" in c.collectives
    assert c.collective_bytes == pytest.approx(3 / 4 * D * (F // 2) * F32)
    # Pure data parallel needs no collective in the forward pass.
    assert not any(c.collectives for c in traces["dp8"].regions[0].candidates)


def test_recompute_pays_the_fsdp_all_gather_again(traces):
    hw = cm.load_profile("cpu")
    costs = {}
    for name in ("dp8", "fsdp4_tensor2"):
        tr = traces[name]
        g = build_graph(tr)
        costs[name] = (build_cost_model(tr, g, hw, allow_offload=False), tr)
    i = _cands(traces["fsdp4_tensor2"])["x@w1"].index
    # Same global matmul, 1/8 of it per device in both meshes; FSDP adds the all-gather.
    gather_s = (3 / 4 * D * (F // 2) * F32) / hw.ici_bytes_per_s
    dp = costs["dp8"][0].regions[0].recompute_s[i]
    fsdp = costs["fsdp4_tensor2"][0].regions[0].recompute_s[i]
    assert dp > 0
    assert fsdp == pytest.approx(dp + gather_s)


def test_fixed_bytes_are_per_device():
    # F = per-device anchor (memory_analysis) - per-device model. With global candidate bytes
    # the model exceeds the per-device anchor: F goes negative and saving everything is
    # predicted at about twice what the compiler reports (measured: -57 kB, 271 vs 140 kB).
    tr = trace_step(*make_step("data2_tensor4", batch=128, layers=4))
    g = build_graph(tr)
    cost = build_cost_model(tr, g, "cpu", allow_offload=False)
    assert tr.argument_bytes < cost.fixed_bytes < tr.anchor.device_bytes
    every = evaluate(cost, g, Assignment.of({c.key: "save" for c in g.classes}))
    assert (
        abs(every.peak_bytes - tr.anchor_saved.device_bytes) <= 0.15 * tr.anchor_saved.device_bytes
    )


def test_budget_that_fits_per_device_but_not_globally():
    step, args = make_step("data2_tensor4", batch=128, layers=4)
    tr = trace_step(step, args)
    per_device_all_saved = tr.anchor_saved.device_bytes
    budget = per_device_all_saved * 1.1
    # Globally, the residuals alone would not fit: every candidate the backward pass reads,
    # at its global size, on every trip, plus the stacked layer inputs.
    (r,) = tr.regions
    global_residuals = r.multiplicity * (
        sum(c.global_nbytes for c in r.candidates if c.needed)
        + sum(i.global_nbytes for i in r.inputs if i.stacked)
    )
    assert global_residuals > budget
    plan = planner.solve(
        step, *args, hbm_gb=budget / 1e9, hardware="cpu", allow_offload=False, verify_compile=True
    )
    assert plan.verification.ok, plan.verification.checks
    pred = plan.prediction
    assert pred.peak_bytes <= plan.budget_bytes
    # Everything fits per device: the fastest plan saves every non-elementwise value the backward
    # pass reads (elementwise values may be recomputed: cheaper than writing them,
    # docs/cost-model.md M_r), so what is left to recompute is a few elementwise ops' arithmetic.
    import cost_models

    kept = [
        row
        for row in plan.candidates()
        if row["needed_by_backward"] and row["primitive"] not in cost_models.FUSIBLE
    ]
    # (JAX 0.12.0.1 keeps tanh, written anyway for the matmul that reads it, so no matmul
    # output is read by the backward pass and ``kept`` is empty; JAX 0.10.2 keeps the dots.)
    assert all(row["decision"] == "save" for row in kept)
    assert pred.recompute_s < 1e-6
    # The prediction is per device: within 25% of the compiler's per-device figure.
    compiled = plan.verification.compiled_device_bytes
    assert compiled is not None and compiled <= plan.budget_bytes
    assert abs(pred.peak_bytes - compiled) <= 0.25 * compiled
    text = render(build_report(plan), "markdown")
    assert "Sharded step over 8 devices" in text and "per device" in text
    rows = plan.candidates()
    assert {row["shard_source"] for row in rows} >= {"hlo", "sharding-constraint"}


def test_unmatched_equations_fall_back_and_say_so(monkeypatch):
    # A partitioned program whose instructions cannot be matched (as when XLA drops the
    # metadata): the divisors fall back, conservatively, and the report names them.
    real = shard.parse_hlo
    monkeypatch.setattr(shard, "parse_hlo", lambda texts: dataclasses.replace(real(texts), ops={}))
    tr = trace_step(*make_step("data2_tensor4"))
    got = _cands(tr)
    for what in ("a@w2", "layer input"):
        assert got[what].shard_source == "unsharded (conservative)", what
        assert got[what].shard_divisor == 1 and got[what].nbytes == got[what].global_nbytes
    # What is still known without the HLO: the constraint's own sharding (2 x 4 ways); tanh
    # reads it (input-sharding); the checkpoint_name and x @ w1 before it are read by it,
    # element for element (reader-sharding).
    assert got["constraint"].shard_source == "sharding-constraint"
    assert got["constraint"].nbytes == (B // 2) * (F // 4) * F32
    assert got["tanh"].shard_source == "input-sharding" and got["tanh"].shard_divisor == 8
    for what in ("hidden", "x@w1"):
        assert got[what].shard_source == "reader-sharding" and got[what].shard_divisor == 8
    notes = " ".join(sharding_notes(tr))
    assert "counted at their global size" in notes and "dot_general[16, 32]" in notes


HLO = """HloModule jit_step, num_partitions=8

FileNames
1 "/home/user/model.py"

FunctionNames
1 "layer"

FileLocations
1 {file_name_id=1 function_name_id=1 line=42 end_line=42 column=8 end_column=8}

StackFrames
1 {file_location_id=1 parent_frame_id=1}

ENTRY %main (p0: f32[8,32], p1: f32[8,16]) -> f32[8,16] {
  %p0 = f32[8,32]{1,0} parameter(0)
  %p1 = f32[8,16]{1,0} parameter(1)
  %all-gather = f32[32,16]{1,0} all-gather(%p1), replica_groups=[2,4]<=[8], dimensions={0}, metadata={op_name="jit(step)/jvp()/dot_general" stack_frame_id=1}
  %all-reduce = f32[8,16]{1,0} all-reduce(%p1), replica_groups={{0,1},{2,3},{4,5},{6,7}}, to_apply=%add, metadata={op_name="jit(step)/jvp()/dot_general" stack_frame_id=1}
  %dot.1 = f32[8,16]{1,0} dot(%p0, %all-gather), lhs_contracting_dims={1}, rhs_contracting_dims={0}, metadata={op_name="jit(step)/jvp()/dot_general" stack_frame_id=1}
  %dot.2 = f32[8,32]{1,0} dot(%p1, %p0), lhs_contracting_dims={1}, rhs_contracting_dims={1}, metadata={op_name="jit(step)/transpose(jvp())/dot_general" stack_frame_id=1}
  %dot.3 = f32[64,16]{1,0} dot(%p0, %p1), lhs_contracting_dims={1}, rhs_contracting_dims={0}, metadata={op_name="jit(step)/jvp()/dot_general" source_file="/home/user/model.py" source_line=44}
  %slice = f32[1,16]{1,0} slice(%dot.1), slice={[0:1], [0:16]}, metadata={op_name="jit(step)/jvp()/tanh" source_file="/home/user/model.py" source_line=43}
  ROOT %tanh = f32[8,16]{1,0} tanh(%dot.1), metadata={op_name="jit(step)/jvp()/tanh" source_file="/home/user/model.py" source_line=43}
}
"""


def test_hlo_parser_shapes_groups_and_collectives():
    index = shard.parse_hlo([HLO])
    assert index.num_partitions == 8
    m = shard.match_equation(
        index,
        "dot_general",
        ("model.py", 42),
        (16, 64),
        ((16, 32), (32, 64)),
        {"dimension_numbers": (((1,), (0,)), ((), ()))},
    )
    # Output [8, 16] of a global [16, 64]: 16*64 / (8*16) = 8. The transposed (backward)
    # dot of the same line is ignored; its [8, 32] would have given a divisor of 4.
    assert m.divisor == 8 and not m.ambiguous
    # Per-device work: 8*16 outputs * 32 contraction vs 16*64 * 32 globally.
    assert m.flop_divisor == 8
    # Operands at the dot: x is [8, 32] of [16, 32] (2); w1 gathered to [32, 16] of [32, 64] (4).
    assert m.operand_divisors == (2, 4)
    # all-gather over groups of 4 (iota form): 3/4 of 32*16*4 bytes; all-reduce over groups of
    # 2 (list form): 2 * 1/2 * 8*16*4 bytes.
    assert m.collective_bytes == pytest.approx(3 / 4 * 32 * 16 * 4 + 2 * 1 / 2 * 8 * 16 * 4)
    t = shard.match_equation(index, "tanh", ("model.py", 43), (16, 64), ((16, 64),), {})
    assert t.divisor == 8 and t.collective_bytes == 0
    assert (
        shard.match_equation(index, "tanh", ("other.py", 43), (16, 64), ((16, 64),), {}).divisor
        is None
    )
    # (The [1, 16] slice on line 43 would be a divisor of 64 > 8 devices: not a shard.)
    # A batched [8, 16, 64] dot that XLA collapsed to a [64, 16] one: 8*16*64 / (64*16) = 8.
    r = shard.match_equation(
        index, "dot_general", ("model.py", 44), (8, 16, 64), ((8, 16, 32), (32, 64)), {}
    )
    assert r.divisor == 8 and r.reshaped


def test_fused_constants_take_the_partitioning_of_their_readers():
    """Broadcasts of literals (masks, zeros) have no instruction of their own in the
    partitioned HLO (XLA builds them inside the fusion that reads them): a constant of the
    same shape as a value with a known divisor takes it (``same-shape``), one feeding a
    bigger value takes its reader's (``reader-sharding``); a replicated (S, S) mask built from
    an iota is not one of them and stays conservative."""
    mesh = Mesh(np.array(jax.devices()[:8]).reshape(8), ("data",))
    S = 4  # sequence length, unlike B = 16 so that shapes tell them apart

    def layer(x, w):
        h = x @ w  # [B, S, D], sharded over B
        causal = jnp.arange(S)[:, None] >= jnp.arange(S)[None, :]  # [S, S] from iotas
        scores = jnp.einsum("bsd,btd->bst", h, h)  # [B, S, S]
        scores = jnp.where(causal, scores, -1e9)  # literal broadcast, [B, S, S]
        h = jnp.where(h > 0, h, 0.0)  # literal broadcast, [B, S, D]
        return jax.nn.softmax(scores) @ h, None

    def loss(w, x):
        y, _ = jax.lax.scan(jax.checkpoint(layer), x, w)
        return jnp.sum(y**2)

    args = (
        jax.ShapeDtypeStruct((2, D, D), jnp.float32, sharding=NamedSharding(mesh, P())),
        jax.ShapeDtypeStruct(
            (B, S, D), jnp.float32, sharding=NamedSharding(mesh, P("data", None, None))
        ),
    )
    tr = trace_step(jax.grad(loss), args)
    (r,) = tr.regions
    consts = [
        c
        for c in r.candidates
        if c.primitive == "broadcast_in_dim" and not c.inputs and not c.input_reads
    ]
    big = [c for c in consts if c.shape and c.shape[0] == B]
    assert big, [(c.shape, c.shard_source) for c in consts]
    for c in big:  # batch-sized constants: 1/8 per device, 4 bytes x elements / 8
        assert c.shard_source in (
            "hlo",
            "hlo (reshaped)",
            "input-sharding",
            "reader-sharding",
            "same-shape",
        ), (c.shape, c.shard_source)
        assert c.shard_divisor == 8 and _per_device(c) == F32 * int(np.prod(c.shape)) // 8
        assert c.nbytes in (0, _per_device(c))  # 0: no output of it can be a residual
    masks = [c for c in r.candidates if tuple(c.shape) == (S, S) and c.primitive != "iota"]
    assert masks and all(c.shard_divisor == 1 for c in masks)  # replicated: all of it
