"""Stock policies' verify compiles run at once (``PlanOptions.parallel_compiles``;
verify.precompile): traced and lowered one after another on the planning thread, compiled on
threads. The answer, every stock policy's compiled bytes and the checks are those of the
one-at-a-time path, and the concurrent path really ran (issue 14, requirement 6: on the
H200 the four stock verify compiles were 12.7 of the first budget's 22.1 s)."""

import warnings

import pytest

import planner
from examples import llama


def _session(workers):
    step, args = llama.make_train_step(llama.LlamaConfig(n_layers=2))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", planner.PlanWarning)
        return planner.Planner(
            step, *args, hardware="cpu", parallel_compiles=workers, check_numerics=False
        )


def test_concurrent_stock_compiles_give_the_same_answer(monkeypatch):
    from planner._src.planning import attempt as S

    batches = []  # the programs of each precompile call, in order

    def spy(step, args, graph, programs, pool):
        batches.append(len(programs))
        return real(step, args, graph, programs, pool)

    real = S.precompile
    monkeypatch.setattr(S, "precompile", spy)
    one, many = _session(0), _session(3)
    assert one.compile_workers() == 0 and many.compile_workers() == 3
    lo, hi = one.trace.anchor.device_bytes, one.trace.anchor_saved.device_bytes
    assert (lo, hi) == (many.trace.anchor.device_bytes, many.trace.anchor_saved.device_bytes)
    budget = (lo + 0.1 * (hi - lo)) / 1e9  # low: the stock policies predicted faster compile
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", planner.PlanWarning)
        a, b = one.plan(budget), many.plan(budget)
    names = [n for n, _ in b.timings]
    started = [
        i for i, n in enumerate(names) if n.endswith("compiled in the background, 3 at once")
    ]
    # The stock compiles start after the first solve, before the plan's own verify compile
    # (they run beside it), and the verify of each takes its compile from there.
    assert started and started[0] < names.index("verify (plan)"), names
    assert sum(n.startswith("verify (stock ") for n in names) >= 2, names
    assert not any("at once" in n for n, _ in a.timings)
    # The plan's first verify compile started before the stock policies were lowered: one
    # program, then the stock batch (the one-at-a-time session started none).
    assert batches[:1] == [1] and len(batches) >= 2 and batches[1] >= 2, batches
    # The trace stage compiled both anchors at once (and says so), one after the other in a.
    parts = [n for n, _ in many.trace.timings]
    assert "compile the full-remat anchor" in parts and "the 2 jobs above, 2 at once" in parts
    assert not any("at once" in n for n, _ in one.trace.timings)
    assert a.choice == b.choice and a.assignment == b.assignment
    assert a.verification.compiled_device_bytes == b.verification.compiled_device_bytes
    got = {x.name: x.compiled_device_bytes for x in b.baselines}
    want = {x.name: x.compiled_device_bytes for x in a.baselines}
    assert got == want and sum(v is not None for v in got.values()) >= 4, got
    assert a.verification.checks == b.verification.checks


@pytest.mark.parametrize("bad", [-1, 1.5, True, "4"])
def test_parallel_compiles_is_validated(bad):
    with pytest.raises(planner.InvalidArgumentError, match="parallel_compiles"):
        planner.PlanOptions(parallel_compiles=bad)


def test_concurrent_compiles_run_in_the_deviceless_target_scope():
    """The compiles run on threads: each gets a copy of the planning thread's context, so a
    deviceless H200 target's scope holds there too (without it the compile would be for this
    CPU and its bytes XLA:CPU's)."""
    import os

    from planner._src.cost import build_cost_model
    from planner._src.planning.context import Timings
    from planner._src.xla import targets as T

    if T.cuda_plugin() is None or T.resolve("h200").kind != "deviceless":
        if os.environ.get("PLANNER_REQUIRE_DEVICELESS") == "1":
            pytest.fail("PLANNER_REQUIRE_DEVICELESS=1 but no deviceless H200 target")
        pytest.skip("no deviceless H200 target here (the CUDA PJRT plugin: .[cuda])")
    names = ["dots_saveable", "dots_with_no_batch_dims_saveable"]
    got = {}
    for workers in (2, 0):
        step, args = llama.make_train_step(llama.LlamaConfig(n_layers=2))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", planner.PlanWarning)
            s = planner.Planner(
                step, *args, hardware="h200", parallel_compiles=workers, check_numerics=False
            )
        cost = build_cost_model(s.trace, s.graph, s.hardware, allow_offload=s.offload)
        s.stock.prefetch(names, Timings(), s.graph, cost)
        assert (len(s.stock.started) == 2) == (workers == 2)
        got[workers] = [s.stock.fit_bytes(n, Timings(), s.trace, s.graph, cost) for n in names]
    assert got[2] == got[0] and all(b and b > s.trace.anchor.device_bytes for b in got[0]), got


class _Lowered:
    """Stands for a jax ``Lowered``: records the compiler options of each compile."""

    def __init__(self):
        self.options = []

    def compile(self, compiler_options=None):
        self.options.append(compiler_options)
        return object()


def test_autotune_cache_dir_reaches_live_gpu_compiles_on_every_thread(monkeypatch, tmp_path):
    """Within target.autotune_cache, a compile for a live GPU (this machine's backend is
    "gpu") gets XLA's per-fusion autotune cache directory, created, on the calling thread
    and on the threads of at_once; a flag the caller passes wins; outside it, and for this
    CPU's own compiles, nothing is added."""
    import jax

    from planner._src.xla import compile as xla_compile
    from planner._src.xla import compile_options
    from planner._src.xla.jobs import at_once

    low = _Lowered()
    d = tmp_path / "xla-autotune"
    xla_compile.compile_lowered(low)
    with compile_options.autotune_cache(str(d)):
        xla_compile.compile_lowered(low)  # this CPU: no autotuner, nothing added
        monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
        xla_compile.compile_lowered(low, {"xla_gpu_autotune_level": 4})
        at_once(
            [lambda: xla_compile.compile_lowered(low), lambda: xla_compile.compile_lowered(low)], 2
        )
        xla_compile.compile_lowered(low, {compile_options.AUTOTUNE_CACHE_FLAG: "/elsewhere"})
    xla_compile.compile_lowered(low)
    flag = compile_options.AUTOTUNE_CACHE_FLAG
    assert low.options == [
        None,
        None,
        {"xla_gpu_autotune_level": 4, flag: str(d)},
        {flag: str(d)},
        {flag: str(d)},
        {flag: "/elsewhere"},
        None,
    ]
    assert d.is_dir()


def test_the_session_compiles_inside_its_autotune_cache(monkeypatch, tmp_path):
    """Every compile of a session with ``autotune_cache_dir`` (the anchors, the plan's verify
    compiles, the stock policies' on the compile threads) runs where the directory is in
    force."""
    from planner._src.xla import compile as xla_compile
    from planner._src.xla import compile_options

    seen = []
    real = xla_compile.compile_lowered

    def spy(lowered, options=None):
        seen.append(compile_options._autotune_cache.get())
        return real(lowered, options)

    monkeypatch.setattr(xla_compile, "compile_lowered", spy)
    step, args = llama.make_train_step(llama.LlamaConfig(n_layers=2))
    d = str(tmp_path / "at")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", planner.PlanWarning)
        s = planner.Planner(
            step,
            *args,
            hardware="cpu",
            parallel_compiles=2,
            check_numerics=False,
            autotune_cache_dir=d,
        )
        lo, hi = s.trace.anchor.device_bytes, s.trace.anchor_saved.device_bytes
        plan = s.plan((lo + 0.1 * (hi - lo)) / 1e9)
    assert any(n.endswith("in the background, 2 at once") for n, _ in plan.timings)
    assert len(seen) >= 5 and set(seen) == {d}, seen


@pytest.mark.parametrize("bad", [3, True, ["/tmp"]])
def test_autotune_cache_dir_is_validated(bad):
    with pytest.raises(planner.InvalidArgumentError, match="autotune_cache_dir"):
        planner.PlanOptions(autotune_cache_dir=bad)


def test_compiler_probes_compile_without_autotuning_on_a_live_gpu(monkeypatch):
    """The compiler probes (trace.holds_rereads_twice, trace.hoists_recompute) compare
    temporary bytes that differ by one tensor: on a live GPU they compile with the autotuner
    off and cuBLAS matmuls (compile_options.PROBE_COMPILE_OPTIONS: no timing decides their kernels,
    so no timing decides the answer); this CPU's and a deviceless target's compiles get
    nothing more (a deviceless target adds its own options)."""
    import jax

    from planner._src.trace import probes as TR
    from planner._src.xla import compile as xla_compile
    from planner._src.xla import compile_options

    seen = []

    def record(lowered, options=None):
        seen.append(dict(options or {}))
        raise RuntimeError("stop here")

    monkeypatch.setattr(xla_compile, "compile_lowered", record)
    with pytest.raises(RuntimeError, match="stop here"):
        TR._probe_temp_bytes(TR._nothing_saveable, layers=2)
    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    with pytest.raises(RuntimeError, match="stop here"):
        TR._probe_temp_bytes(TR._nothing_saveable, layers=2)
    assert seen == [
        {},
        {
            "xla_gpu_autotune_level": 0,
            "xla_gpu_enable_triton_gemm": False,
            "xla_gpu_experimental_enable_fusion_autotuner": False,
        },
    ]
    assert compile_options.PROBE_COMPILE_OPTIONS == {
        **compile_options.AUTOTUNE_OFF,
        **compile_options.DEVICELESS_COMPILE_OPTIONS,
    }


def test_the_trace_stage_compiles_two_at_once_by_default_from_two_cores(monkeypatch):
    """The anchors (and the compiler probes) compile two at once on a 2-core machine by
    default, where verify compiles run one at a time; parallel_compiles, where given, rules
    both."""
    import dataclasses
    import os

    one = _session(0)
    default = dataclasses.replace(one.subject, options=planner.PlanOptions())
    for cores, verify, anchors in ((1, 0, 1), (2, 0, 2), (3, 0, 2), (8, 2, 2), (16, 4, 4)):
        monkeypatch.setattr(os, "cpu_count", lambda c=cores: c)
        assert (default.compile_workers(), default.anchor_workers()) == (verify, anchors), cores
        assert one.subject.anchor_workers() == 0
