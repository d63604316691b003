"""A plan is applied to the step it was made for and to no other (issue 45): ``plan.apply``
and ``load_plan(path).apply`` compare the step, at its first call with that call's arguments,
with the plan's fingerprint and refuse another step naming what differs; a plan file's
decisions are its truth, shown by ``report()`` and ``decisions()`` as ``apply`` applies them."""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import pytest

import planner

D = 64


def _layer(w, x):
    return jnp.tanh(x @ w)


def _step(params, x):
    def loss(ps):
        h = x
        for w in ps:
            h = jax.checkpoint(_layer)(w, h)
        return jnp.mean(h**2)

    return jax.grad(loss)(params)


def _other_step(params, x):  # another model, the same arguments
    def loss(ps):
        h = x
        for w in ps:
            h = jax.checkpoint(lambda w, h: jnp.sin(h @ w))(w, h)
        return jnp.mean(h**2)

    return jax.grad(loss)(params)


def _args(batch=256, dtype=jnp.float32):
    params = [0.1 * jnp.ones((D, D), dtype) for _ in range(3)]
    return params, jnp.ones((batch, D), dtype)


@pytest.fixture(scope="module")
def plan():
    return planner.solve(
        _step, *_args(), hbm_gb=1.0, hardware="cpu", verify_compile=False, compare_stock=False
    )


@pytest.fixture()
def saved(plan, tmp_path):
    plan.save(tmp_path / "plan.json")
    return tmp_path / "plan.json"


def test_the_planned_step_applies_and_computes_as_before(plan, saved):
    for p in (plan, planner.load_plan(saved)):
        applied = p.apply(_step)
        got = applied(*_args())
        want = _step(*_args())
        assert all(jnp.allclose(a, b) for a, b in zip(got, want))
        # inside the user's own jit too (the call's arguments are tracers there)
        jax.jit(p.apply(_step))(*_args())
        p.apply(_step).__wrapped__  # noqa: B018  (functools.wraps keeps the step)


@pytest.mark.parametrize("where", ["plan", "file"])
def test_a_plan_for_batch_256_refuses_batch_1024_naming_the_argument(plan, saved, where):
    """The issue's case: a batch-256 plan called at batch 1024 matched nothing and the step
    ran as full remat with no word."""
    p = plan if where == "plan" else planner.load_plan(saved)
    applied = p.apply(_step)
    with pytest.raises(planner.PlanFileError) as e:
        applied(*_args(batch=1024))
    diffs = e.value.differences
    assert any("float32[1024,64] here, float32[256,64] for the plan" in d for d in diffs), diffs
    assert any(d.startswith("the program:") for d in diffs)
    msg = str(e.value)
    assert "made for another step" in msg and "Fix: plan again" in msg and "check=False" in msg
    # refused again on the next call (not a one-time word), via jit, .lower too
    with pytest.raises(planner.PlanFileError):
        jax.jit(applied)(*_args(batch=1024))
    with pytest.raises(planner.PlanFileError):
        p.apply(jax.jit(_step)).lower(*_args(batch=1024))


def test_another_model_and_another_dtype_are_refused(plan, saved):
    with pytest.raises(planner.PlanFileError) as e:
        plan.apply(_other_step)(*_args())
    assert [d.split(":")[0] for d in e.value.differences] == ["the program"]
    with pytest.raises(planner.PlanFileError) as e:
        planner.load_plan(saved).apply(_step)(*_args(dtype=jnp.bfloat16))
    assert any("bfloat16[64,64] here, float32[64,64]" in d for d in e.value.differences)


def test_check_false_is_the_opt_out(plan, saved):
    for p in (plan, planner.load_plan(saved)):
        out = p.apply(_step, check=False)(*_args(batch=1024))
        assert out[0].shape == (D, D)


def test_the_file_records_the_whole_fingerprint_and_old_files_still_check(plan, saved):
    data = json.loads(saved.read_text())
    assert data["step"] == plan.trace.fingerprint.to_json()
    assert data["fingerprint"] == plan.trace.fingerprint.program
    assert planner.load_plan(saved).step_fingerprint == plan.trace.fingerprint
    del data["step"]  # a file of an older planner: the program hash only
    saved.write_text(json.dumps(data))
    old = planner.load_plan(saved)
    assert old.step_fingerprint.program == plan.trace.fingerprint.program
    old.apply(_step)(*_args())
    with pytest.raises(planner.PlanFileError, match="the program"):
        old.apply(_step)(*_args(batch=1024))
    with pytest.raises(planner.PlanFileError, match="made for another step") as e:
        old.check(_step, *_args(batch=1024))
    assert e.value.differences


def test_a_step_record_disagreeing_with_the_program_hash_is_damaged(saved):
    data = json.loads(saved.read_text())
    data["step"]["program"] = "0" * 16
    saved.write_text(json.dumps(data))
    with pytest.raises(planner.PlanFileError, match="damaged plan file: 'step' records"):
        planner.load_plan(saved)


def test_keyword_arguments_are_applied_with_a_warning_not_silently(plan):
    with pytest.warns(planner.PlanWarning, match="keyword arguments"):
        plan.apply(_step)(*_args()[:1], x=_args()[1])


def test_a_decision_edited_by_hand_is_what_report_and_decisions_show(plan, saved):
    """The file's decisions are what apply applies, so they are what the report shows."""
    data = json.loads(saved.read_text())
    key, was = data["decisions"][0]
    new = "remat" if was != "remat" else "save"
    data["decisions"][0][1] = new
    saved.write_text(json.dumps(data))
    loaded = planner.load_plan(saved)
    label = next(r["label"] for r in data["report"]["rows"] if r["key"] == key)
    assert loaded.decisions()[label] == new
    assert plan.decisions()[label] == was
    text = loaded.report()
    assert "differ from the plan as it was made" in text and f"{was} -> {new}" in text
    assert "edited in the plan file" in loaded.report("json")
    # and an unedited file says nothing of edits
    plan.save(saved)
    assert "differ from the plan as it was made" not in planner.load_plan(saved).report()


def test_a_step_calling_the_planned_step_under_jit_is_the_same_step(plan):
    """xla.fingerprint.wrapped_bodies: a program that is one jit call of the planned step's
    body is that step (a plain function around a jitted step)."""
    jitted = jax.jit(_step)

    def around(params, x):
        return jitted(params, x)

    plan.apply(around)(*_args())
    with pytest.raises(planner.PlanFileError):
        plan.apply(around)(*_args(batch=1024))


def test_arrays_committed_to_a_mesh_are_the_same_step(plan, saved):
    """JAX traces arrays committed to a mesh's NamedSharding into another program text than
    the same shapes unsharded (a plan made from jax.eval_shape arguments, or from arrays
    not yet placed): the step is the same and is not refused; another step still is."""
    mesh = jax.sharding.Mesh(jax.devices()[:1], ("d",))
    on_mesh = jax.device_put(
        _args(), jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
    )
    want = jax.jit(_step)(*_args())
    for applied in (plan.apply(_step), planner.load_plan(saved).apply(_step)):
        got = jax.jit(applied)(*on_mesh)
        for x, y in zip(jax.tree.leaves(want), jax.tree.leaves(got), strict=True):
            assert jnp.allclose(x, y)
    planner.load_plan(saved).check(_step, *on_mesh)
    with pytest.raises(planner.PlanFileError):
        planner.load_plan(saved).check(_other_step, *on_mesh)
