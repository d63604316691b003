"""planner.plan_maxtext: MaxText's own train step planned from its config, the overrides
verified by compiling MaxText's step with them applied through MaxText's config.

The MaxText tests need ``pip install -e ".[maxtext]"`` (Python >= 3.12; CI run 2) and skip
with the reason elsewhere; the rest (option handling, settings, the teaching errors) run
everywhere.
"""

from __future__ import annotations

import dataclasses
import sys

import pytest

from planner._src.errors import InvalidArgumentError, UnsupportedError
from planner._src.planning.maxtext import MaxTextPlanner
from planner._src.planning.maxtext.config import custom_keys, import_maxtext, parse_overrides
from planner._src.planning.maxtext.settings import (
    DEFAULT_MEM_FRACTION,
    budget_gb,
    read_settings_env,
)
from planner._src.planning.maxtext.step import build, synthetic_batch
from planner._src.units import GB


def _maxtext_skip() -> str | None:
    try:
        import_maxtext()
    except UnsupportedError as e:
        return str(e).splitlines()[0]
    return None


SKIP = _maxtext_skip()
needs_maxtext = pytest.mark.skipif(SKIP is not None, reason=f"{SKIP}")

# Small configs of the two families MaxText ships (a Llama-2 decoder; DeepSeek-V3's MLA and
# MoE decoder with one dense and two MoE layers), float32 so XLA:CPU compiles them quickly.
COMMON = dict(
    per_device_batch_size=2,
    max_target_length=64,
    vocab_size=256,
    attention="dot_product",
    dtype="float32",
    weight_dtype="float32",
    steps=1,
)
LLAMA = dict(
    model_name="llama2-7b",
    override_model_config=True,
    base_emb_dim=64,
    base_num_query_heads=4,
    base_num_kv_heads=4,
    base_mlp_dim=192,
    base_num_decoder_layers=3,
    head_dim=16,
    **COMMON,
)
DEEPSEEK = dict(
    model_name="deepseek3-tiny",
    override_model_config=True,
    base_num_decoder_layers=3,
    first_num_dense_layers=1,
    qk_nope_head_dim=16,
    qk_rope_head_dim=8,
    v_head_dim=16,
    num_experts=4,
    num_experts_per_tok=2,
    sparse_matmul=False,  # the dense MoE path (megablox is a TPU/GPU kernel)
    **COMMON,
)
CONFIGS = {
    "llama-scan": {**LLAMA, "scan_layers": True},
    "llama-unscanned": {**LLAMA, "scan_layers": False},
    "deepseek-scan": {**DEEPSEEK, "scan_layers": True},
    "deepseek-unscanned": {**DEEPSEEK, "scan_layers": False},
}
# CI's Python 3.12 run runs the fast tier of this file: one config of each family, one scanned
# and one not (1.5-4 min each on 2 cores); the other two are in the slow tier.
SLOW = {"llama-unscanned", "deepseek-scan"}
# Where the three budgets fall along [full remat, save everything] of the compiled anchors (the
# last one above saving everything: the memory model is conservative, and without fill rounds
# the plan at save-everything's own figure may keep little more than the first).
FRACTIONS = (0.15, 0.6, 2.0)


@pytest.fixture(
    scope="module",
    params=[pytest.param(n, marks=[pytest.mark.slow] if n in SLOW else []) for n in CONFIGS],
)
def planned(request):
    if SKIP is not None:
        pytest.skip(SKIP)
    name = request.param
    session = MaxTextPlanner(
        None,
        CONFIGS[name],
        hardware="cpu",
        allow_offload=False,  # XLA:CPU keeps host arrays in device memory (no exact figure)
        compare_stock=False,  # (test time: the stock comparison has its own tests)
        fill_rounds=0,
    )
    from planner._src.budget import io_bytes, requested_for

    s = session.session
    tr = s.trace
    lo, hi = tr.anchor.device_bytes, tr.anchor_saved.device_bytes
    assert hi > lo, "saving everything must cost memory over full remat"
    plans = []
    for f in FRACTIONS:
        # the budget whose usable part (allocator headroom off) is that far along
        usable = lo + f * (hi - lo)
        budget = requested_for(usable, s.hardware, io_bytes(tr), s.margin) / GB
        plans.append(session.plan(budget))
    return name, session, plans


@needs_maxtext
def test_overrides_compile_within_budget_through_maxtext(planned):
    name, session, plans = planned
    keys = set(session.keys)
    assert {"query_proj", "mlpwo", "decoder_layer_input"} <= keys
    if name.startswith("deepseek"):
        assert {"mla_q", "mla_kv", "moe_mlpwi_0"} <= keys
    for mt in plans:
        v = mt.verification
        assert v is not None and v.compiler == session.session.compiler.description
        # the compiled figure of MaxText's own step, with the overrides through its config
        assert 0 < v.device_bytes <= v.usable_bytes, mt.maxtext_section()
        assert mt.ok
        # every key, MaxText's words, decoder_layer_input never remat
        custom = dict(mt.custom)
        assert set(custom) == keys
        assert set(custom.values()) <= {"remat", "device"}
        assert custom["decoder_layer_input"] != "remat"
        args = mt.override_args()
        assert args[0] == "remat_policy=custom" and len(args) == len(keys) + 1
        assert mt.yaml().startswith("remat_policy: custom\n")
        # decisions only on what MaxText can express: nothing outside its keys is kept
        for c in mt.plan.graph.classes:
            if c.name not in keys:
                assert mt.plan.assignment.get(c.key) == "remat", c.label
        assert "MaxText saves nothing it does not list" in mt.maxtext_section()
    # the budgets matter where the model says saving pays: a larger budget is never predicted
    # slower, and where the overrides differ MaxText's compiles of them differ (the names
    # are attached: MaxText #4990)
    steps = [mt.plan.prediction.step_s for mt in plans]
    assert all(a >= b * (1 - 1e-9) for a, b in zip(steps, steps[1:])), steps
    for a, b in zip(plans, plans[1:]):
        if a.custom != b.custom:
            assert a.verification.device_bytes != b.verification.device_bytes
    if name.startswith("llama"):  # saving pays here: the top budget keeps more than the first
        saved = [sum(v == "device" for _, v in mt.custom) for mt in plans]
        assert saved[-1] > saved[0], [mt.command_line() for mt in plans]


@needs_maxtext
def test_overrides_the_plan_decides_are_refused():
    with pytest.raises(InvalidArgumentError, match="which the plan decides"):
        MaxTextPlanner(None, {**CONFIGS["llama-scan"], "mlpwo": "device"}, hardware="cpu")


@needs_maxtext
def test_built_step_runs_from_its_init():
    """build(...).init() gives the concrete state the step takes (benchmarks/maxtext_step.py
    runs MaxText's step with it): two remat settings, the same losses, and the loss falls."""
    import jax
    import numpy as np

    losses = {}
    for policy in ("full", "minimal"):
        built = build(None, {**CONFIGS["llama-scan"], "remat_policy": policy})
        state = built.init()
        assert jax.tree.structure(state) == jax.tree.structure(built.args[0])
        batch = synthetic_batch(built.args[1], int(built.config.vocab_size))
        got = []
        for _ in range(2):
            state, metrics = built.step(state, batch)
            got.append(float(metrics["scalar"]["learning/loss"]))
        losses[policy] = got
    assert np.isfinite(losses["full"]).all() and losses["full"][1] < losses["full"][0]
    np.testing.assert_allclose(losses["full"], losses["minimal"], rtol=1e-5)


@needs_maxtext
def test_custom_keys_follow_the_config():
    """A key MaxText refuses for a config is not offered (indexer_cutoff_threshold needs
    use_indexer)."""
    keys = custom_keys(None, CONFIGS["llama-scan"])
    assert "indexer_cutoff_threshold" not in keys and "out_proj" in keys


# ------------------------------------------------------------------ without MaxText


def test_import_error_teaches(monkeypatch):
    monkeypatch.setitem(sys.modules, "maxtext", None)  # "import maxtext" raises ImportError
    if sys.version_info >= (3, 12):
        with pytest.raises(UnsupportedError, match=r"\[maxtext\]"):
            import_maxtext()
    else:
        with pytest.raises(UnsupportedError, match="Python >= 3.12"):
            import_maxtext()


def test_parse_overrides():
    assert parse_overrides(["a=1", "b = x"]) == {"a": "1", "b": "x"}
    assert parse_overrides("a=1 b=2") == {"a": "1", "b": "2"}
    assert parse_overrides({"a": True}) == {"a": "True"}
    with pytest.raises(InvalidArgumentError, match="key=value"):
        parse_overrides(["scan_layers"])


def test_memory_fraction_caps_the_budget(monkeypatch):
    import cost_models as cm

    hw = cm.load_profile("h200")
    monkeypatch.setenv("XLA_PYTHON_CLIENT_MEM_FRACTION", "0.5")
    monkeypatch.setenv("XLA_FLAGS", "--xla_disable_hlo_passes=rematerialization")
    s = read_settings_env()
    assert s.mem_fraction == 0.5 and s.remat_pass_disabled
    cap = 0.5 * hw.hbm_bytes / GB
    assert budget_gb(None, hw, s)[0] == pytest.approx(cap)
    got, why = budget_gb(1000.0, hw, s)
    assert got == pytest.approx(cap) and "capped" in why
    assert budget_gb(10.0, hw, s)[0] == 10.0
    monkeypatch.delenv("XLA_PYTHON_CLIENT_MEM_FRACTION")
    monkeypatch.delenv("XLA_FLAGS")
    s = read_settings_env()
    assert s.mem_fraction is None and not s.remat_pass_disabled
    assert budget_gb(None, hw, s)[0] == pytest.approx(DEFAULT_MEM_FRACTION * hw.hbm_bytes / GB)
    monkeypatch.setenv("XLA_PYTHON_CLIENT_MEM_FRACTION", "1.5")
    with pytest.raises(InvalidArgumentError, match="outside"):
        read_settings_env()
    assert dataclasses.replace(
        s, compile_xla_flags="--xla_disable_hlo_passes=foo,rematerialization"
    ).remat_pass_disabled


def test_decide_names_keeps_only_the_names_and_compares_only_name_policies():
    """PlanOptions.decide_names on the MaxText-style example: at save-everything's budget the
    plan keeps no tensor outside the names (everything_saveable, which keeps unnamed ones, is
    not a comparison it may return), the policy is JAX's own name policy, and it compiles
    within the budget."""
    import planner
    from examples import maxtext_style as m

    names = ("query_proj", "key_proj", "value_proj", "mlpwo")
    step, args = m.make()
    session = planner.Planner(step, *args, hardware="cpu", allow_offload=False, decide_names=names)
    budget = session.trace.anchor_saved.device_bytes * 1.2 / GB
    plan = session.plan(hbm_gb=budget)
    assert plan.verification.ok
    assert plan.emitted.names_only
    kept = {c.name for c in plan.graph.classes if plan.assignment.get(c.key) != "remat"}
    assert kept and kept <= set(names)
    outside = [c for c in plan.graph.classes if c.name not in names]
    assert outside and all(c.forced == "remat" for c in outside)
    b = {x.name: x for x in plan.baselines}
    assert not b["everything_saveable"].applicable and b["nothing_saveable"].applicable


def test_decide_names_is_checked():
    import planner

    with pytest.raises(InvalidArgumentError, match="decide_names"):
        planner.PlanOptions(decide_names="query_proj")
    assert planner.PlanOptions(decide_names=["a"]).decide_names == ("a",)


def test_cli_maxtext_errors_teach(capsys):
    from planner._src.cli.main import main

    assert main(["maxtext", "my.yml", "scan_layers", "--hardware", "cpu"]) == 2
    assert "neither the config file" in capsys.readouterr().err
    if SKIP is not None:  # without MaxText: the install line, exit 2
        assert main(["maxtext", "per_device_batch_size=2", "--hardware", "cpu"]) == 2
        assert "maxtext" in capsys.readouterr().err


@needs_maxtext
@pytest.mark.slow
def test_cli_plans_a_sharded_config_per_device(tmp_path):
    """``python -m planner maxtext`` on MaxText's fsdp=2 mesh (two CPU devices from
    --host-devices, in a process of its own): the JSON on stdout says the mesh and the
    verified per-device figure, within budget, and halving the state's argument bytes
    against the one-device plan of the same config shows MaxText's sharding was used."""
    import json
    import os
    import subprocess

    base = [f"{k}={v}" for k, v in {**LLAMA, "base_num_decoder_layers": 2}.items()]

    def run(n):
        cmd = [sys.executable, "-m", "planner", "maxtext", *base, f"ici_fsdp_parallelism={n}"]
        cmd += ["--host-devices", str(n), "--hardware", "cpu", "--hbm-gb", "0.05", "--json"]
        cmd += ["--no-offload", "-q"]
        env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
        p = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path)
        assert p.returncode == 0, p.stderr[-3000:]
        return json.loads(p.stdout)["maxtext"]

    two, one = run(2), run(1)
    assert two["mesh"]["fsdp"] == 2 and one["mesh"]["fsdp"] == 1
    v2, v1 = two["verification"], one["verification"]
    assert v2["within_budget"] and v1["within_budget"]
    assert v2["argument_bytes"] < 0.6 * v1["argument_bytes"], (v2, v1)
