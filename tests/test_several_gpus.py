"""Several GPUs: the host link shared by the devices of a sharded step, the partitioner's
collectives in the step's time, and benchmarks/multi_gpu.py's dry run.

conftest.py gives the process 8 fake CPU devices. The sharded steps are test_sharding.py's
scanned MLP (FSDP 4 x tensor 2, and one device), planned on the H200 profile, whose
``link.shared`` rows say a GPU copies at half its lone rate when 2 or more copy at once.
"""

import dataclasses
import json
import os
import subprocess
import sys

import jax
import pytest

import cost_models as cm
from cost_models._sharing import LinkSharing
from planner._src.cost import Assignment, build_cost_model, evaluate
from planner._src.graph import build_graph
from planner._src.trace import shard, trace_step
from tests.test_sharding import make_step

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _unshared(hw):
    """``hw`` without its link.shared rows: every device count sees one GPU's link."""
    sources = {k: v for k, v in hw.sources if k != "link.shared"}
    return dataclasses.replace(hw, link=dataclasses.replace(hw.link, shared=None), sources=sources)


# ------------------------------------------------------------------ the profile's rows


def test_h200_rows_and_lookup():
    hw = cm.load_profile("h200")
    shared = hw.link.shared
    assert shared is not None and [n for n, _, _ in shared.rows] == [1, 2, 4, 8]
    # The 1-GPU row is the link's own (measured alone); the others are marked not measured.
    assert shared.per_gpu("d2h", 1) == hw.link.d2h_bytes_per_s
    assert shared.per_gpu("h2d", 1) == hw.link.h2d_bytes_per_s
    assert "NOT MEASURED" in hw.source("link.shared")
    # Between rows: the next larger count (3 -> the 4-GPU row); beyond: the largest row's.
    table = LinkSharing(rows=((1, 50e9, 50e9), (2, 40e9, 41e9), (4, 30e9, 31e9)))
    assert table.per_gpu("d2h", 3) == 30e9 and table.per_gpu("h2d", 2) == 41e9
    assert table.per_gpu("d2h", 512) == 30e9


def test_for_devices_changes_only_sharded_profiles():
    hw = cm.load_profile("h200")
    assert hw.for_devices(1) is hw
    h8 = hw.for_devices(8)
    assert h8.link.d2h_bytes_per_s == hw.link.shared.per_gpu("d2h", 8) < hw.link.d2h_bytes_per_s
    assert h8.link.copying_gpus == 8
    assert h8.source("link.d2h_bytes_per_s").startswith("link.shared at 8 GPU(s)")
    assert h8.for_devices(1).link == hw.link  # back to one GPU alone
    # Round trip through the profile file format, with and without sharing applied.
    for p in (hw, h8):
        assert cm.HardwareProfile.from_json(json.loads(json.dumps(p.to_json()))) == p
    # A profile without rows: every device count sees one GPU's link.
    h100 = cm.load_profile("h100-sxm")
    assert h100.link.shared is None and h100.for_devices(8) is h100


def test_bad_rows_teach():
    d = cm.load_profile("h200").to_json()
    d["link"]["shared"]["value"].pop("1")
    with pytest.raises(cm.ProfileError, match="needs a row for 1 GPU"):
        cm.HardwareProfile.from_json(d, where="my.json")
    d = cm.load_profile("h200").to_json()
    d["link"]["shared"]["value"]["1"]["d2h"] = "40 GB/s"
    with pytest.raises(cm.ProfileError, match="1-GPU row is one GPU copying alone"):
        cm.HardwareProfile.from_json(d, where="my.json")
    d = cm.load_profile("h200").to_json()
    d["link"]["shared"]["value"]["8"] = {"d2h": "26 GB"}
    with pytest.raises(cm.ProfileError, match="give both directions"):
        cm.HardwareProfile.from_json(d, where="my.json")
    d = cm.load_profile("h200").to_json()
    d["link"]["collective_contention"]["value"] = 1.5
    with pytest.raises(cm.ProfileError, match="collective_contention"):
        cm.HardwareProfile.from_json(d, where="my.json")


# ------------------------------------------------------------------ the cost model


@pytest.fixture(scope="module")
def fsdp():
    tr = trace_step(*make_step("fsdp4_tensor2", batch=64, layers=4))
    return tr, build_graph(tr)


@pytest.fixture(scope="module")
def one_device():
    """test_sharding.py's layer without a mesh: one device."""
    import jax.numpy as jnp
    from jax.ad_checkpoint import checkpoint_name

    def layer(x, w):
        w1, w2 = w
        h = checkpoint_name(x @ w1, "hidden")
        return x + jnp.tanh(h) @ w2, None

    def step(params, x):
        def loss(params, x):
            y, _ = jax.lax.scan(jax.checkpoint(layer), x, params)
            return jnp.sum(y**2)

        return jax.grad(loss)(params, x)

    args = (
        (
            jax.ShapeDtypeStruct((4, 32, 64), jnp.float32),
            jax.ShapeDtypeStruct((4, 64, 32), jnp.float32),
        ),
        jax.ShapeDtypeStruct((64, 32), jnp.float32),
    )
    tr = trace_step(step, args)
    assert tr.num_partitions == 1
    return tr, build_graph(tr)


def _offload_everything(graph, cost):
    return Assignment.of(
        {c.key: "offload" for c in graph.classes if c.key not in cost.no_offload_classes}
    )


def test_shared_link_slows_a_sharded_plans_offload(fsdp):
    tr, g = fsdp
    assert tr.num_partitions == 8
    hw = cm.load_profile("h200")
    shared = build_cost_model(tr, g, hw, allow_offload=True)
    alone = build_cost_model(tr, g, _unshared(hw), allow_offload=True)
    assert shared.hardware.link.copying_gpus == 8
    r_s, r_a = shared.regions[0], alone.regions[0]
    copied = [i for i, s in enumerate(r_a.d2h_s) if s > 0]
    assert copied
    lat = hw.link.latency_s
    ratio = hw.link.d2h_bytes_per_s / hw.link.shared.per_gpu("d2h", 8)
    for i in copied:
        assert r_s.d2h_s[i] - lat == pytest.approx(ratio * (r_a.d2h_s[i] - lat))
    plan = _offload_everything(g, shared)
    p_s, p_a = evaluate(shared, g, plan), evaluate(alone, g, plan)
    assert p_s.transfer_s > p_a.transfer_s  # (each copy's latency does not grow)
    assert p_s.step_s >= p_a.step_s
    # Nothing offloaded: the shared link changes nothing.
    remat = Assignment.of({})
    assert evaluate(shared, g, remat).step_s == evaluate(alone, g, remat).step_s


def test_one_device_plans_are_unchanged(one_device):
    tr, g = one_device
    hw = cm.load_profile("h200")
    with_rows = build_cost_model(tr, g, hw, allow_offload=True)
    without = build_cost_model(tr, g, _unshared(hw), allow_offload=True)
    assert with_rows.hardware is hw
    assert with_rows.regions == without.regions
    assert with_rows.base_step_s == without.base_step_s
    plan = _offload_everything(g, with_rows)
    assert evaluate(with_rows, g, plan) == evaluate(without, g, plan)


def test_partitioner_collectives_are_in_the_step_time(fsdp, one_device):
    tr, g = fsdp
    # FSDP gathers every weight in the forward and backward loops and reduce-scatters the
    # gradients: per device per step, at least the gathered weights once.
    weights = 2 * 4 * 32 * 64 * 4  # w1 and w2, 4 layers, f32: global bytes
    assert tr.step_collective_bytes >= 3 / 4 * weights / 2  # tensor=2 keeps half
    assert one_device[0].step_collective_bytes == 0
    hw = cm.load_profile("h200")
    slow = hw.replace(ici_bytes_per_s=hw.ici_bytes_per_s / 10)
    base = build_cost_model(tr, g, hw, allow_offload=False).base_step_s
    base_slow = build_cost_model(tr, g, slow, allow_offload=False).base_step_s
    coll_s = tr.step_collective_bytes / hw.ici_bytes_per_s
    # T0 = roofline + loop copies + collectives: ten times slower links add 9x their time
    # (the candidates' own forward collectives are in their recompute, not in T0).
    assert base_slow - base == pytest.approx(9 * coll_s, rel=1e-6)


def test_collective_contention_shrinks_the_windows(fsdp):
    tr, g = fsdp
    hw = cm.load_profile("h200")
    assert hw.link.collective_contention == 0.0  # the documented assumption
    blocking = hw.replace(
        link=dataclasses.replace(hw.link, collective_contention=1.0),
        sources={"link.collective_contention": "test: collectives hide no host copy"},
    )
    free = build_cost_model(tr, g, hw, allow_offload=True).regions[0]
    blocked = build_cost_model(tr, g, blocking, allow_offload=True).regions[0]
    cands = tr.regions[0].candidates
    assert any(c.collective_bytes for c in cands)
    assert blocked.fwd_s == free.fwd_s  # the step's time is the same...
    # ...but the compute that hides a copy loses the collective time after each value.
    assert all(b <= f for b, f in zip(blocked.fwd_after_s, free.fwd_after_s))
    assert sum(blocked.fwd_after_s) < sum(free.fwd_after_s)
    assert sum(blocked.bwd_before_s) < sum(free.bwd_before_s)


HLO_LOOP = """\
HloModule jit_step, num_partitions=4

%body (p: (s32[], f32[8,16])) -> (s32[], f32[8,16]) {
  %p = (s32[], f32[8,16]{1,0}) parameter(0)
  %x = f32[8,16]{1,0} get-tuple-element(%p), index=1
  %ag = (f32[2,16]{1,0}, f32[8,16]{1,0}) all-gather-start(%x), replica_groups=[1,4]<=[4], dimensions={0}
  %rs = f32[2,16]{1,0} reduce-scatter(%x), replica_groups=[1,4]<=[4], dimensions={0}, to_apply=%add
  ROOT %t = (s32[], f32[8,16]{1,0}) tuple(%i, %x)
}

ENTRY %main (a: f32[8,16]) -> f32[8,16] {
  %a = f32[8,16]{1,0} parameter(0)
  %ar = f32[8,16]{1,0} all-reduce(%a), replica_groups={{0,1},{2,3}}, to_apply=%add
  %w = (s32[], f32[8,16]{1,0}) while(%t0), condition=%cond, body=%body, backend_config={"known_trip_count":{"n":"3"}}
  ROOT %r = f32[8,16]{1,0} get-tuple-element(%w), index=1
}
"""


def test_program_collective_bytes_counts_loop_trips():
    size = 8 * 16 * 4
    # all-reduce over 2: 2 * 1/2 * size, once; in the 3-trip loop an all-gather over 4
    # (3/4 of its 8x16 result) and a reduce-scatter over 4 ((4-1) x its 2x16 result).
    want = size + 3 * (3 / 4 * size + 3 * (size / 4))
    assert shard.program_collective_bytes(HLO_LOOP) == pytest.approx(want)
    assert shard.program_collective_bytes(HLO_LOOP.replace("num_partitions=4", "")) == 0


# ------------------------------------------------------------------ the device benchmark


def _dry(out, *extra):
    env = dict(os.environ, PYTHONPATH=ROOT, JAX_PLATFORMS="cpu")
    env["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
    cmd = [sys.executable, os.path.join(ROOT, "benchmarks", "multi_gpu.py"), "run", "--dry-run"]
    cmd += ["--out", str(out), "--budget-s", "3000", *extra]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=3000)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    recs = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    return recs, done.stdout


def test_multi_gpu_dry_run_link_and_hiding(tmp_path):
    """benchmarks/multi_gpu.py's link and hiding sections on 8 fake CPU devices, then again
    (resumed: nothing is measured twice)."""
    recs, _ = _dry(tmp_path, "--sections", "link,hiding", "--hiding-gpus", "8")
    link = [r for r in recs if r["section"] == "link"]
    assert sorted(r["gpus"] for r in link) == [1, 2, 4, 8]
    assert all(r["d2h_bytes_per_s"] > 0 and r["h2d_bytes_per_s"] > 0 for r in link)
    assert all(r["dry_run"] and r["host_memory_kind"] == "pinned_host" for r in link)
    hiding = {r["policy"]: r for r in recs if r["section"] == "hiding"}
    assert hiding["save"]["status"] == hiding["offload"]["status"] == "ok"
    # Per device, each way: the layer input of both layers, 1 sequence x 32 tokens x 64 bf16.
    assert hiding["result"]["bytes_per_gpu_each_way"] == 2 * 32 * 64 * 2
    assert hiding["result"]["copy_s"] > 0 and "hidden_share" in hiding["result"]
    again, out = _dry(tmp_path, "--sections", "link,hiding", "--hiding-gpus", "8")
    assert len(again) == len(recs) and "already in" in out
    assert (tmp_path / "summary.md").read_text().startswith("# Several GPUs")


@pytest.mark.slow
def test_multi_gpu_dry_run_plans(tmp_path):
    """The plans section: the FSDP step planned per device at 2 budgets, each run beside
    full remat (several minutes on a loaded 2-core machine: the slow tier)."""
    recs, _ = _dry(tmp_path, "--sections", "plans", "--points", "2", "--stocks", "nothing_saveable")
    made = next(r for r in recs if r["section"] == "plans-made")
    assert len(made["plans"]) == 2 and all("file" in p for p in made["plans"])
    runs = {r["policy"]: r for r in recs if r["section"] == "plans"}
    assert set(runs) == {"plan 1", "plan 2", "full remat"}
    assert all(r["status"] == "ok" and r["devices"] == 8 for r in runs.values())
    assert all(r["predicted_step_s"] > 0 for k, r in runs.items() if k.startswith("plan"))
