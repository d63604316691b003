"""The XLA options of the planner's compiles (planner/_src/xla/compile_options.py) that make
a compile faster and must not change what it measures: on XLA:CPU, programs compiled for
their figures only (LLVM at level 0) have the memory figures of XLA's default compile; a
Planner compiles so exactly where nothing it compiles is run here (no numerics check); an
option the installed XLA does not know is dropped, not fatal. (The deviceless XLA:GPU one,
the fusion autotuner off: tests/test_target.py.)"""

import warnings

import jax
import jax.numpy as jnp
import pytest

import planner
from examples import llama
from planner._src.policies import STOCK
from planner._src.xla import compile as xla_compile
from planner._src.xla import compile_options

FIELDS = ("argument", "output", "alias", "temp")


def _figures(compiled) -> tuple[int, ...]:
    m = compiled.memory_analysis()
    return tuple(getattr(m, f"{f}_size_in_bytes") for f in FIELDS)


def _spy_compile(monkeypatch):
    """The options every ``Lowered.compile`` receives, in order."""
    seen = []
    real = jax.stages.Lowered.compile

    def compile(self, compiler_options=None, **kw):
        seen.append(dict(compiler_options or {}))
        return real(self, compiler_options=compiler_options, **kw)

    monkeypatch.setattr(jax.stages.Lowered, "compile", compile)
    return seen


@pytest.mark.parametrize(
    "policy",
    [None, jax.checkpoint_policies.nothing_saveable, jax.checkpoint_policies.dots_saveable],
    ids=["save-everything", "full-remat", "dots"],
)
def test_a_compile_for_its_figures_only_measures_what_xla_default_compile_does(monkeypatch, policy):
    """The quickstart model's step under three policies (a scanned decoder, cross-entropy,
    SGD with momentum), compiled by XLA:CPU with its defaults and within compile_only: the
    same argument, output, alias and temporary bytes; the option reached the second compile
    only."""
    step, args = llama.make_train_step(llama.LlamaConfig(n_layers=2, remat_policy=policy))
    seen = _spy_compile(monkeypatch)
    default = xla_compile.compile_lowered(jax.jit(step).lower(*args))
    with compile_options.compile_only():
        fast = xla_compile.compile_lowered(jax.jit(step).lower(*args))
    assert seen == [{}, compile_options.COMPILE_ONLY_CPU_OPTIONS]
    assert _figures(fast) == _figures(default)
    assert _figures(default)[3] > 0


def test_the_caller_options_win_and_compile_only_off_changes_nothing(monkeypatch):
    seen = _spy_compile(monkeypatch)
    f = jax.jit(lambda x: jnp.sin(x) @ x.T)
    x = jnp.ones((64, 64))
    with compile_options.compile_only(False):
        xla_compile.compile_lowered(f.lower(x))
    with compile_options.compile_only():
        xla_compile.compile_lowered(f.lower(x), {"xla_backend_optimization_level": 2})
    assert seen == [{}, {"xla_backend_optimization_level": 2}]


def _planner(args, **kw):
    step, _ = llama.make_train_step(llama.LlamaConfig(n_layers=2))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", planner.PlanWarning)
        return planner.Planner(step, *args, hardware="cpu", **kw)


@pytest.fixture(scope="module")
def concrete_args():
    return llama.make_train_step(llama.LlamaConfig(n_layers=2), concrete=True)[1]


def test_a_planner_compiles_for_figures_only_where_nothing_is_run_here(monkeypatch, concrete_args):
    """Abstract arguments or check_numerics=False: every compile of the Planner (anchors,
    probes, verify) is made for its figures only. Concrete arguments with the numerics check
    on: none of the trace stage's is, since the check runs the full-remat anchor."""
    abstract = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype), concrete_args)
    seen = _spy_compile(monkeypatch)
    p = _planner(abstract)
    assert p.subject.compile_only and seen
    assert all(compile_options.COMPILE_ONLY_CPU_OPTIONS.items() <= o.items() for o in seen)
    lo, hi = p.trace.anchor.device_bytes, p.trace.anchor_saved.device_bytes
    seen.clear()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", planner.PlanWarning)
        plan = p.plan((lo + 0.5 * (hi - lo)) / 1e9)
    assert plan.verification is not None and seen
    assert all("xla_backend_optimization_level" in o for o in seen)

    assert _planner(concrete_args, check_numerics=False).subject.compile_only
    seen.clear()
    checked = _planner(concrete_args)
    assert not checked.subject.compile_only and seen
    assert not any("xla_backend_optimization_level" in o for o in seen)


def test_with_the_numerics_check_on_only_stock_policies_compile_for_figures_only(
    monkeypatch, concrete_args
):
    """Where the numerics check runs the step, the stock policies (run only where one is the
    answer, most compiled to be found over the budget) are compiled for their figures only
    and every other compile keeps XLA's default; a stock answer's check runs its program
    compiled again at XLA's default, and passes."""
    from planner._src.planning.stock import StockCompiles

    seen, in_stock = [], []
    real_compile, real_attempt = jax.stages.Lowered.compile, StockCompiles.attempt

    def compile(self, compiler_options=None, **kw):
        seen.append((bool(in_stock), "xla_backend_optimization_level" in (compiler_options or {})))
        return real_compile(self, compiler_options=compiler_options, **kw)

    def attempt(self, *a, **kw):
        in_stock.append(1)
        try:
            return real_attempt(self, *a, **kw)
        finally:
            in_stock.pop()

    monkeypatch.setattr(jax.stages.Lowered, "compile", compile)
    monkeypatch.setattr(StockCompiles, "attempt", attempt)
    p = _planner(concrete_args)
    assert not p.subject.compile_only
    lo, hi = p.trace.anchor.device_bytes, p.trace.anchor_saved.device_bytes
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", planner.PlanWarning)
        stock, own = (p.plan((lo + f * (hi - lo)) / 1e9) for f in (0.1, 0.5))
    assert stock.choice in STOCK and own.choice == "planner"
    for plan in (stock, own):
        assert plan.numerics.checked and plan.numerics.ok, plan.numerics
    assert any(stock_compile for stock_compile, _ in seen)
    assert all(stock_compile == figures_only for stock_compile, figures_only in seen), seen


def test_a_plan_made_for_figures_only_is_the_plan_of_default_compiles(monkeypatch):
    """The same budget planned with compile_only's options and without them: the same
    decisions and the same compiled bytes."""
    step, args = llama.make_train_step(llama.LlamaConfig(n_layers=2))

    def plan():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", planner.PlanWarning)
            p = planner.Planner(step, *args, hardware="cpu")
            lo, hi = p.trace.anchor.device_bytes, p.trace.anchor_saved.device_bytes
            return p.plan((lo + 0.4 * (hi - lo)) / 1e9)

    fast = plan()
    monkeypatch.setattr(compile_options, "COMPILE_ONLY_CPU_OPTIONS", {})
    default = plan()
    assert fast.assignment == default.assignment and fast.choice == default.choice
    assert fast.verification.compiled_device_bytes == default.verification.compiled_device_bytes


class _Lowered:
    """A stand-in for jax.stages.Lowered whose XLA knows no option named in ``unknown``."""

    def __init__(self, unknown):
        self.unknown, self.calls = unknown, []

    def compile(self, compiler_options=None):
        self.calls.append(dict(compiler_options or {}))
        for name in compiler_options or {}:
            if name in self.unknown:
                raise RuntimeError(f"INVALID_ARGUMENT: No such compile option: '{name}'")
        return "compiled"


def test_a_speed_option_the_installed_xla_does_not_know_is_dropped():
    low = _Lowered({"xla_backend_optimization_level"})
    with compile_options.compile_only():
        assert xla_compile.compile_lowered(low, {"xla_cpu_x": 1}) == "compiled"
    assert low.calls == [
        {"xla_backend_optimization_level": 0, "xla_cpu_x": 1},
        {"xla_cpu_x": 1},
    ]
    other = _Lowered({"xla_cpu_x"})  # not ours to drop: the caller asked for it
    with pytest.raises(RuntimeError, match="No such compile option: 'xla_cpu_x'"):
        xla_compile.compile_lowered(other, {"xla_cpu_x": 1})


def test_a_compile_for_its_figures_only_and_a_default_one_share_the_memo():
    """One program compiled for its figures only and requested at XLA's default (or the other
    way) is compiled once: the figures are the same; an executable compiled for its figures
    only stays marked so, for the numerics check to compile it again before running it."""
    from planner._src.xla.memo import CompileMemo, compile_memo

    lowered = jax.jit(lambda x: jnp.sin(x) * 2).lower(jnp.ones(4))
    with compile_memo(CompileMemo()):
        with compile_options.compile_only():
            fast = xla_compile.compile_lowered(lowered)
        assert xla_compile.compile_lowered(lowered) is fast
    assert compile_options.is_figures_only(fast)
    with compile_memo(CompileMemo()):
        default = xla_compile.compile_lowered(lowered)
        with compile_options.compile_only():
            assert xla_compile.compile_lowered(lowered) is default
    assert not compile_options.is_figures_only(default)


def test_compile_only_reaches_compile_threads():
    """The session's pool and xla.jobs.at_once copy the context: a compile on another thread
    started within compile_only is made for its figures only."""
    from planner._src.xla.jobs import at_once

    low = _Lowered(set())
    with compile_options.compile_only():
        at_once([lambda: xla_compile.compile_lowered(low)] * 2, 2)
    assert low.calls == [compile_options.COMPILE_ONLY_CPU_OPTIONS] * 2
