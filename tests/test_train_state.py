"""The optimizer state where users keep it (issue 42): selected by structure (a Flax linen
TrainState, an nnx.Optimizer's state, an Equinox (model, opt_state) step, a (params,
opt_state) tuple), refused before any trace where a selection cannot be optimizer state,
planned as a step of the one driver (fit rounds, the stock comparison, the numerics check),
applied with ``plan.apply(step)`` (and ``load_plan(...).apply(step)``), and named by a
refusal that leaves it in HBM.

Each idiom at a budget below its full-remat compile with the state in HBM: on XLA:CPU the
plan places state on the host and the applied step gives the unplanned step's loss and
update; deviceless XLA:GPU for the H200 (where the CUDA plugin is installed) compiles the
applied step within the budget with exactly the planned host bytes."""

from __future__ import annotations

import dataclasses
import warnings

import jax
import numpy as np
import pytest
from zoo import equinox_model, flax_linen, flax_nnx

import planner
from examples import llama
from planner._src.budget import io_bytes, requested_for
from planner._src.errors import InfeasibleBudgetError, InvalidArgumentError, PlanWarning
from planner._src.planning import planner as planner_mod
from planner._src.results.report.build import _status_lines
from planner._src.trainstate import select
from planner._src.units import GB, fmt_bytes
from planner._src.verify.numerics import coarsest_eps, compare, reference_runs
from planner._src.xla import compile as xla_compile
from planner._src.xla import targets as tg

SMALL = dict(n_layers=4, d_model=64, d_ff=128, seq=32, batch=2)
CFG = dataclasses.replace(llama.QUICKSTART, d_model=128, n_heads=4, d_ff=256, seq=32, batch=2)


def _tuple_step():
    """A NeoX-style step: ``train_step((params, opt_state), batch)``, optax closed over."""
    step, (params, opt, batch) = llama.make_adam_step(CFG)

    def train_step(state, batch):
        params, opt = state
        params, opt, loss = step(params, opt, batch)
        return (params, opt), loss

    return train_step, ((params, opt), batch)


IDIOMS = {
    "linen TrainState": lambda: flax_linen.make(**SMALL),
    "nnx.Optimizer": lambda: flax_nnx.make(**SMALL),
    "equinox (model, opt_state)": lambda: equinox_model.make(**SMALL),
    "(params, opt_state) tuple": _tuple_step,
}
FOUND = {
    "linen TrainState": ("[0].opt_state", "[0].params", "streamed"),
    "nnx.Optimizer": ("[0][1]['opt_state']", "[0][0]", "whole"),
    "equinox (model, opt_state)": ("[1]", "[0]", "whole"),
    "(params, opt_state) tuple": ("[0][1]", "[0][0]", "whole"),
}


# ------------------------------------------------------------------ selection, before any work


@pytest.mark.parametrize("idiom", IDIOMS)
def test_the_common_idioms_are_found(idiom):
    _, args = IDIOMS[idiom]()
    sel = select.detect(args)
    opt, params, _ = FOUND[idiom]
    assert (sel.opt_path, sel.params_path) == (opt, params)
    assert "of Adam moments, f32" in sel.line() and sel.line().startswith(
        f"optimizer state: `args{opt}`, 2 x "
    )


def test_a_selection_by_index_path_or_selector_is_the_same():
    _, args = flax_linen.make(**SMALL)
    by = [
        select.resolve(args, spec)
        for spec in ("args[0].opt_state", "[0].opt_state", lambda a: a[0].opt_state, "auto")
    ]
    assert {(s.opt_path, s.params_path, s.container) for s in by} == {
        ("[0].opt_state", "[0].params", "[0]")
    }
    _, args = flax_nnx.make(**SMALL)
    assert select.resolve(args, lambda a: a[0][1]["opt_state"]).opt_path == "[0][1]['opt_state']"
    _, args = llama.make_adam_step(CFG)
    assert select.resolve(args, 1).params_path == "[0]"  # the argnum shorthand


def test_a_bfloat16_state_is_float_state():
    """bfloat16 moments (numpy does not count ml_dtypes' floats as np.floating) are found
    and accepted, not refused as "no float arrays"."""
    import jax.numpy as jnp
    import optax

    params = {"w": jnp.zeros((4, 8), jnp.bfloat16)}
    args = ((params, optax.adam(1e-3).init(params)), {"tokens": jnp.zeros((2, 4), jnp.int32)})
    for spec in ("auto", "args[0][1]"):
        sel = select.resolve(args, spec)
        assert (sel.opt_path, sel.params_path) == ("[0][1]", "[0][0]")
        assert "of Adam moments, bf16" in sel.line()
    with pytest.raises(InvalidArgumentError, match="has no float arrays"):
        select.resolve(args, "args[1]")


@pytest.fixture
def no_trace(monkeypatch):
    """Fail the test if the planner traces the step (a refusal must come first)."""

    def trace_step(*a, **k):
        raise AssertionError("traced before refusing the selection")

    monkeypatch.setattr(planner_mod, "trace_step", trace_step)


@pytest.mark.parametrize(
    "spec, said",
    [
        (lambda a: a[0].params, "is the parameters"),
        (1, "has no float arrays"),  # the tokens
        (lambda a: a[0], "holds more than the optimizer state"),
        ("args[0].step", "has no float arrays"),
        ("args[0].opt", "names nothing in the step's arguments"),
        (lambda a: a[1] + 1, "not among the step's arguments"),
    ],
)
def test_wrong_selections_are_refused_before_any_trace(no_trace, spec, said):
    step, args = flax_linen.make(**SMALL)
    with pytest.raises(InvalidArgumentError, match=said) as e:
        planner.Planner(step, *args, hardware="cpu", opt_state=spec)
    assert "args[0].opt_state" in str(e.value)  # what was found, as the fix


def test_the_parameters_as_optimizer_state_are_refused(no_trace):
    step, args = llama.make_adam_step(CFG)
    with pytest.raises(InvalidArgumentError, match=r"`args\[1\]` is the parameters"):
        planner.Planner(step, *args, hardware="cpu", opt_state_argnum=1, params_argnum=1)
    with pytest.raises(InvalidArgumentError, match=r"`args\[0\]` is the parameters"):
        planner.Planner(step, *args, hardware="cpu", opt_state=0)
    with pytest.raises(InvalidArgumentError, match="opt_state_argnum=3 does not name"):
        planner.Planner(step, *args, hardware="cpu", opt_state_argnum=3)
    with pytest.raises(InvalidArgumentError, match="not an optax state"):
        planner.Planner(step, *args, hardware="cpu", opt_state=lambda a: a[0]["layers"])


# ------------------------------------------------------------------ the model of whole leaves


@pytest.mark.parametrize("seed", range(4))
def test_whole_leaves_equal_brute_force(seed):
    """Leaves brought in whole (an update the planner cannot stream): their update buffers
    combine by the largest (benchmarks/results/whole-state-deviceless-2026-12-06.md), in
    the solver as in cost.evaluate, which brute force checks."""
    from synthetic import check_state_solve, random_problem, state_options

    from planner._src.cost import state as cst
    from planner._src.trainstate import StateLeaf
    from planner._src.types import SolverOptions

    graph, cost = random_problem(seed, n_nodes=6, n_regions=1, n_classes=3)
    leaves = tuple(
        StateLeaf(
            path=f"m{i}",
            role="opt",
            nbytes=kib * 1024,
            layers=1,
            shape=(kib * 256,),
            dtype="float32",
        )
        for i, kib in enumerate((256, 384, 128))
    )
    cost = cst.with_state(cost, leaves, whole=True)
    t = cst.evaluate_state(cost.state, frozenset({"m0", "m1"}))
    assert t.update_buffer_bytes == 2 * 384 * 1024  # the largest, not the sum
    options = state_options(graph, cost)
    lo = min(p.peak_bytes for _, _, p in options)
    hi = min(p.peak_bytes for _, h, p in options if not h)
    for budget in sorted({lo, (lo + hi) // 2, hi}):
        check_state_solve(graph, cost, budget, options, SolverOptions(time_limit_s=5.0))


# ------------------------------------------------------------------ planned, applied


def _budget_below_full_remat(session, share: float = 0.5) -> float:
    """hbm_gb whose usable bytes are the full-remat compile (state in HBM) less ``share`` of
    the optimizer state's movable bytes."""
    sel = select.detect(session.example_args)
    movable = sum(
        x.size * x.dtype.itemsize for _, x in sel.opt_leaves(session.example_args) if x.ndim
    )
    usable = session.trace.anchor.device_bytes - share * movable
    req = requested_for(usable, session.hardware, io_bytes(session.trace), session.margin)
    return req / GB


def _donated(step, args):
    return jax.jit(step, donate_argnums=select.detect(args).argnums())


@pytest.mark.parametrize("idiom", IDIOMS)
def test_state_placed_applied_and_same_numbers_on_cpu(idiom):
    """XLA:CPU: below full remat with the state in HBM, the activations alone are refused
    (naming the state placement), ``opt_state="auto"`` plans it; ``plan.apply(step)`` is
    the step the plan was compiled as, and it gives the unplanned step's loss and update
    (the plan's own numerics check, and here again on fresh arguments)."""
    step, args = IDIOMS[idiom]()
    session = planner.Planner(_donated(step, args), *args, hardware="cpu")
    hbm_gb = _budget_below_full_remat(session)
    with pytest.raises(InfeasibleBudgetError, match="opt_state=") as refused:
        session.plan(hbm_gb)
    assert "Or place the optimizer state" in str(refused.value)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        plan = session.plan(hbm_gb, opt_state="auto")
    _assert_unverified_is_said(plan, caught)
    st = plan.state
    opt, params, mode = FOUND[idiom]
    assert st.selection.opt_path == opt and st.mode == mode
    assert st.placement.on_host, plan.report()
    assert plan.numerics is not None and plan.numerics.checked and plan.numerics.ok
    assert st.compiled is not None and st.compiled.estimated  # XLA:CPU: no host memory space
    text = plan.report()
    assert f"optimizer state: `args{opt}`" in text and "plan.apply(train_step)" in text
    fresh_step, fresh = IDIOMS[idiom]()
    want, rounding, differ = reference_runs(fresh_step, fresh, ())  # (on copies: fresh stays)
    assert differ == ""
    got = plan.apply(fresh_step)(*fresh)  # donated
    checks = compare(got, want, coarsest_eps(fresh, want), rounding)
    assert checks and all(c.ok for c in checks), [c for c in checks if not c.ok]
    kinds = {
        jax.tree_util.keystr(k): x.sharding.memory_kind
        for k, x in jax.tree_util.tree_flatten_with_path(got)[0]
    }
    host = {p for p, kind in kinds.items() if kind == "pinned_host"}
    assert len(host) == len(st.placement.opt_paths())


def _assert_unverified_is_said(plan, caught):
    """XLA:CPU cannot check a placement's host bytes: the status is "compiled, unverified",
    a PlanWarning says so (what, why, fix) at the user's line, the check says "unverified"
    (not "ok"), and the answer's row of the stock table shows the compile the status shows,
    unverified, not "not compiled"."""
    from planner._src.results.report import build_report

    assert plan.verification.status == "compiled, unverified"
    said = [w for w in caught if issubclass(w.category, PlanWarning)]
    unverified = [w for w in said if "not verified within its budget" in str(w.message)]
    assert len(unverified) == 1, [str(w.message) for w in said]
    text = str(unverified[0].message)
    assert "train state on the host: the compiler reports no host memory space" in text
    assert "\nWhy: " in text and "\nFix: " in text and unverified[0].filename == __file__
    (check,) = [c for c in plan.verification.checks if c.name == "train state on the host"]
    assert check.unverified
    checks = [text for what, text in build_report(plan).status_lines if what == "check"]
    assert any(t.startswith("unverified: train state on the host: the compiler") for t in checks)
    report = " ".join(plan.report().split())
    assert "check ok: train state on the host" not in report and "ok: unverified" not in report
    row = build_report(plan).stock_policies[0]
    assert row.name == "planner" and row.unverified
    compiled = plan.state.compiled.device_bytes  # the step as applied, XLA:CPU's one memory
    assert plan.verification.compiled.device_bytes == compiled
    assert round(row.compiled_gb * GB) == compiled and row.compiled_text != "not compiled"
    assert row.fits_text.endswith(", unverified (compiled by XLA:CPU)"), row.fits_text


def test_a_saved_state_plan_applies_from_its_file(tmp_path):
    step, args = flax_linen.make(**SMALL)
    session = planner.Planner(_donated(step, args), *args, hardware="cpu")
    plan = session.plan(_budget_below_full_remat(session), opt_state=lambda a: a[0].opt_state)
    assert plan.state.placement.on_host
    plan.save(tmp_path / "plan.json")
    saved = planner.load_plan(tmp_path / "plan.json")
    assert saved.state == plan.state.applies
    fresh_step, fresh = flax_linen.make(**SMALL)
    copy = jax.tree.map(lambda x: x.copy() if isinstance(x, jax.Array) else x, fresh)
    a = plan.apply(fresh_step)(*fresh)
    b = saved.apply(fresh_step)(*copy)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def test_the_applied_step_takes_state_already_on_the_host():
    """State created in pinned host memory (as a large model's must be, never whole in HBM)
    passes the applied step's first-call check, which traces the user's own step: with the
    same numbers as state that starts in HBM."""
    step, args = flax_linen.make(**SMALL)
    session = planner.Planner(_donated(step, args), *args, hardware="cpu")
    plan = session.plan(_budget_below_full_remat(session), opt_state=lambda a: a[0].opt_state)
    assert plan.state.placement.on_host
    fresh_step, fresh = flax_linen.make(**SMALL)
    copy = jax.tree.map(lambda x: x.copy() if isinstance(x, jax.Array) else x, fresh)
    from_device = plan.apply(fresh_step)(*fresh)
    applied = plan.apply(fresh_step)
    on_host = applied.placed(copy)
    kinds = {x.sharding.memory_kind for x in jax.tree.leaves(on_host[0].opt_state) if x.ndim}
    assert "pinned_host" in kinds
    from_host = applied(*on_host)
    for x, y in zip(jax.tree.leaves(from_device), jax.tree.leaves(from_host), strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def test_plans_of_steps_whose_state_fits_do_not_change():
    """Without opt_state the found state changes nothing: the same plan as before, no state
    part; with it at a roomy budget, nothing moves."""
    step, args = flax_linen.make(**SMALL)
    session = planner.Planner(_donated(step, args), *args, hardware="cpu")
    roomy = 2 * session.trace.anchor_saved.device_bytes / GB
    plain = session.plan(roomy)
    assert plain.state is None
    use = dict(_status_lines(plain))["budget use"]  # no "budget use uses"
    got, usable = plain.verification.compiled_device_bytes, plain.budget.usable
    assert use.startswith(f"{fmt_bytes(got)} of {fmt_bytes(usable)} (")
    assert "budget use uses" not in " ".join(plain.report().split())
    placed = session.plan(roomy, opt_state="auto")
    assert not placed.state.placement.on_host
    assert placed.assignment == plain.assignment


# ------------------------------------------------------------------ deviceless XLA:GPU, H200


def _h200():
    target = tg.resolve("h200", num_devices=1)
    if target.kind != "deviceless":
        pytest.skip(f"no deviceless XLA:GPU here: {target.description}")
    return target


# plan.apply's "whole" mode brings each host leaf to HBM at its first use and streams the
# update leaf by leaf, each leaf's update just after its gradient (xla/first_use.py): on nnx's
# and Equinox's Adam steps the compile is below the state-in-HBM one and the plan fits
# (Equinox, whole state on the host, nothing_saveable: 5.49 MB against 6.80 MB all in HBM;
# benchmarks/results/whole-streamed-2026-12-07.md).
@pytest.mark.slow
@pytest.mark.parametrize("idiom", list(IDIOMS))
def test_deviceless_h200_compiles_the_applied_step_within_budget(idiom):
    """Deviceless XLA:GPU for the H200: below full remat with the state in HBM, the plan
    puts optimizer state on the host, and the step ``plan.apply`` returns compiles within
    the budget with exactly the planned host bytes (the plan's own verify compile, and
    again here from ``plan.apply``), with no PlanWarning (the streamed update's host leaves
    written in place). MaxText's all-or-nothing flag rows: those predicted faster than the
    answer compiled (and none fits), and the one the answer is compared against (the
    fastest that fits by the model) compiled, its "fits" the compiler's."""
    target = _h200()
    step, args = IDIOMS[idiom]()
    session = planner.Planner(_donated(step, args), *args, hardware="h200")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        plan = session.plan(_budget_below_full_remat(session), opt_state="auto")
    assert not [str(w.message) for w in caught if issubclass(w.category, PlanWarning)]
    st = plan.state
    assert st.placement.on_host
    assert plan.verification.status == "compiled, within budget", plan.report()
    # the state's copies overlap compute only with the offloading flags (emit.py)
    assert "--xla_gpu_enable_command_buffer=" in plan.xla_flags.split()
    assert st.compiled.host_matches and not st.compiled.estimated
    flag = [b for b in plan.baselines if b.name.endswith(" + optimizer_memory_host_offload")]
    assert flag and plan.choice == "planner"
    faster = [b for b in flag if b.prediction.step_s < plan.prediction.step_s]
    assert all(b.compiled_device_bytes is not None and not b.fits for b in faster)
    by_model = [b for b in flag if b.prediction.peak_bytes <= plan.budget.usable]
    if by_model:
        compared = min(by_model, key=lambda b: b.prediction.step_s)
        assert compared.compiled_device_bytes is not None, compared.name
        assert compared.fits == (compared.compiled_device_bytes <= plan.budget.usable)
    applied = plan.apply(step)
    placed = applied.placed(_target_args(target, args))
    prog = xla_compile.compile_traced(target, applied.jitted(placed), placed)
    from planner._src.trainstate import check_compiled

    check = check_compiled(prog.compiled, st.placement)
    assert check.host_matches and check.host_argument_bytes == st.placement.host_bytes()
    assert check.device_bytes <= plan.budget.usable


def _target_args(target, args):
    from planner._src.xla import deviceless

    return deviceless.args_for(target, args)


def test_deviceless_streamed_update_writes_host_leaves_in_place():
    """Deviceless XLA:GPU for the H200 (skipped without the CUDA plugin): the step as
    applied (a linen TrainState: the streamed update) sees its host leaves in host memory,
    as the GPU's trace does, so it writes their slices into their own host buffers: no
    PlanWarning, no host temporaries, no whole-leaf host copy in the compiled program, and
    exactly the planned host argument and output bytes. (The target's devices drop a
    ``pinned_host`` kind: a leaf placed with JAX's own ``with_memory_kind`` traced in device
    memory, and the update warned that it copies 16 host leaves whole, 535,552 bytes of host
    temporaries and 16 ``S(5)`` copies here.)"""
    import re

    from planner._src.emit.apply import binding
    from planner._src.emit.apply_state import apply_state
    from planner._src.trainstate import StateApply
    from planner._src.trainstate.records import leaves_of
    from planner._src.xla import deviceless

    target = _h200()
    step, args = flax_linen.make(**SMALL)
    sel = select.detect(args)
    opt, params = (select.subtree(args, p) for p in (sel.opt_path, sel.params_path))
    leaves = leaves_of(opt, params, layers=SMALL["n_layers"])
    host = frozenset(x.key for x in leaves if x.movable and x.layers > 1 and ".mu[" in x.path)
    assert len(host) == 16
    sa = StateApply(
        opt_path=sel.opt_path,
        params_path=sel.params_path,
        container=sel.container,
        on_host=host,
        layers=SMALL["n_layers"],
        mode="streamed",
        mode_why="",
    )
    applied = apply_state(
        _donated(step, args), binding({}, jax.checkpoint_policies.nothing_saveable), sa
    )
    placed = applied.placed(deviceless.args_for(target, args))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        prog = xla_compile.compile_traced(target, applied.jitted(placed), placed)
    assert not [str(w.message) for w in caught if issubclass(w.category, PlanWarning)]
    m = prog.compiled.memory_analysis()
    planned = sum(x.nbytes for x in leaves if x.key in host)
    assert m.host_argument_size_in_bytes == m.host_output_size_in_bytes == planned
    assert m.host_temp_size_in_bytes == 0
    copies = re.findall(r"= \S+\{[^}]*S\(5\)\} copy\(", prog.compiled.as_text())
    assert not copies


def test_the_donation_warning_points_at_the_users_line(monkeypatch):
    """The warning for a step that does not donate its optimizer state names the user's
    line that called the planner, through ``Planner.plan`` and through ``planner.solve``
    (a fixed stacklevel pointed into planner.py for one of them)."""

    class Stop(Exception):
        pass

    def stop(self, requested, spec):  # after the state's spec (and its warning): no solve
        raise Stop

    monkeypatch.setattr(planner_mod.Planner, "_plan_with", stop)
    step, args = flax_linen.make(**SMALL)  # not donated
    session = planner.Planner(step, *args, hardware="cpu")
    calls = {
        "Planner.plan": lambda: session.plan(1.0, opt_state="auto"),
        "planner.solve": lambda: planner.solve(
            step, *args, hbm_gb=1.0, hardware="cpu", opt_state="auto"
        ),
    }
    for how, call in calls.items():
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with pytest.raises(Stop):
                call()
        (w,) = [w for w in caught if "does not donate its optimizer state" in str(w.message)]
        assert issubclass(w.category, PlanWarning)
        assert w.filename == __file__, (how, w.filename, w.lineno)
