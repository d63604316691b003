"""The cost stage's use of recompute prices from the compiled HLO (Region.hlo_recompute_s,
priced by the trace stage (trace/prices.py) from the full-remat anchor; cost/build.py build_cost_model), on a synthetic
scanned layer: no JAX tracing, no compile. The deviceless end-to-end test is in
tests/test_target.py."""

from __future__ import annotations

import dataclasses

import pytest

import cost_models as cm
from planner._src.cost import build_cost_model, evaluate
from planner._src.fingerprints import StepFingerprint
from planner._src.graph import build_graph
from planner._src.solve import solve_assignment
from planner._src.types import Assignment, Region, Trace
from tests.synthetic import candidate, graph_anchor

TRIPS = 8
N = 1024


def _cand(i, prim, shape, dtype, inputs, work):
    return candidate(
        i,
        prim,
        shape,
        dtype,
        source=f"layer.py:{10 + i}",
        inputs=inputs,
        read_by_kernel=prim == "dot_general",
        read_by_fusion=prim != "dot_general",
        work=cm.Work(kernels=(("bfloat16", work),)),
    )


def _matmul():  # 0.14 ms at the h200's 701 TFLOP/s (a contraction of 47,684: any will do)
    return cm.Cost(matmul_flops=1e11, hbm_bytes=3 * 2 * N * N, kernel_launches=1)


def _elementwise(n):
    return cm.Cost(vector_flops=float(n), hbm_bytes=8.0 * n)


def _trace(prices, priced_with="h200"):
    """A layer under lax.scan: a matmul, the row max of its output, exp(x - max), and a
    matmul of that; the backward reads all four."""
    cands = (
        _cand(0, "dot_general", (N, N), "bfloat16", (), _matmul()),
        _cand(1, "reduce_max", (N,), "float32", (0,), _elementwise(N * N)),
        _cand(2, "exp", (N, N), "float32", (0, 1), _elementwise(N * N)),
        _cand(3, "dot_general", (N, N), "bfloat16", (2,), _matmul()),
    )
    region = Region(
        id=0,
        source="layer.py:1",
        multiplicity=TRIPS,
        call_sites=1,
        candidates=cands,
        user_policy="none",
        prevent_cse=False,
        in_scan=True,
        hlo_recompute_s=prices,
    )
    return Trace(
        regions=(region,),
        anchor=graph_anchor(),
        argument_bytes=0,
        backend="cuda",
        fingerprint=StepFingerprint(program="synthetic"),
        undifferentiated_regions=0,
        # the step with nothing recomputed: 0.5 s of HBM traffic (T0 well above the shift)
        step_work=cm.Work(kernels=(("bfloat16", cm.Cost(hbm_bytes=0.5 * 4.8e12)),)),
        hlo_priced_with=priced_with if prices is not None else "",
        hlo_priced_from="XLA:GPU deviceless (synthetic)",
    )


# the matmul 0.1 ms, the row max 6 ms (the passes it adds to the backward fusion), exp no
# share (recomputed inside that fusion), the second matmul no share (not matched)
PRICES = (1e-4, 6e-3, None, None)


def _models(prices=PRICES, priced_with="h200"):
    trace = _trace(prices, priced_with)
    graph = build_graph(trace)
    lib = build_cost_model(_trace(None), graph, "h200", allow_offload=False)
    hlo = build_cost_model(trace, graph, "h200", allow_offload=False)
    return graph, lib, hlo


def _keys(graph):
    return {c.label.split("[")[0] + str(c.members[0][1]): c.key for c in graph.classes}


def test_hlo_prices_replace_the_library_where_the_region_has_them():
    graph, lib, hlo = _models()
    got, want = hlo.regions[0].recompute_s, lib.regions[0].recompute_s
    assert got[0] == pytest.approx(1e-4)  # the HLO's, not the library's matmul
    assert want[0] != pytest.approx(1e-4)
    assert got[1] == pytest.approx(6e-3) and want[1] < 1e-3  # the reduction's passes
    assert got[2] == 0.0  # fusible, no share: inside another kernel's
    # A matmul with no share is a kernel the HLO did not match, not a free one: the library's.
    assert want[3] > 1e-4 and got[3] == pytest.approx(want[3])
    assert "the compiled HLO (XLA:GPU deviceless (synthetic), 1 region)" in (
        hlo.recompute_priced_from
    )
    assert lib.recompute_priced_from.startswith("the cost library's roofline")


def test_full_remat_predicts_what_the_library_predicts_and_the_differences_move():
    """T0 shifts by the two prices' full-remat recompute, so full remat's step is the
    library's; a plan that saves the row max saves its HLO price every trip."""
    graph, lib, hlo = _models()
    remat = Assignment.of({})
    p_lib, p_hlo = evaluate(lib, graph, remat), evaluate(hlo, graph, remat)
    assert p_hlo.step_s == pytest.approx(p_lib.step_s, rel=1e-12)
    assert p_hlo.recompute_s != pytest.approx(p_lib.recompute_s)
    assert hlo.base_step_s - lib.base_step_s == pytest.approx(p_lib.recompute_s - p_hlo.recompute_s)
    k = _keys(graph)
    save_max = Assignment.of({k["reduce_max1"]: "save"})
    saved = p_hlo.step_s - evaluate(hlo, graph, save_max).step_s
    write = hlo.regions[0].materialize_s[1] * TRIPS
    assert saved == pytest.approx(TRIPS * 6e-3 - write)
    assert p_lib.step_s - evaluate(lib, graph, save_max).step_s < 1e-3


def test_no_share_never_makes_a_matmul_free_for_the_solver():
    """The second matmul got no HLO share: had it cost 0, saving it would gain nothing and
    the solver would keep the first matmul (0.1 ms a trip by the HLO) in its place. At a
    budget with room for the row max and one matmul, the solver saves the row max and the
    second matmul, whose recompute the prediction charges at the library's price."""
    graph, lib, hlo = _models()
    k = _keys(graph)
    best = Assignment.of({k["reduce_max1"]: "save", k["dot_general3"]: "save"})
    budget = evaluate(hlo, graph, best).peak_bytes
    sol = solve_assignment(graph, hlo, budget)
    assert sol.assignment.get(k["dot_general3"]) == "save"
    assert sol.assignment.get(k["reduce_max1"]) == "save"
    assert sol.assignment.get(k["dot_general0"]) == "remat"
    other = Assignment.of({k["reduce_max1"]: "save", k["dot_general0"]: "save"})
    assert evaluate(hlo, graph, other).step_s - evaluate(hlo, graph, best).step_s == (
        pytest.approx(TRIPS * (lib.regions[0].recompute_s[3] - 1e-4))
    )


def test_prices_of_another_profile_are_not_used():
    """The trace priced with the h200 profile; a cost model for another profile keeps the
    library's prices (its T0 unshifted)."""
    trace = _trace(PRICES, priced_with="b200")
    graph = build_graph(trace)
    other = build_cost_model(trace, graph, "h200", allow_offload=False)
    lib = build_cost_model(_trace(None), graph, "h200", allow_offload=False)
    assert other.regions[0].recompute_s == lib.regions[0].recompute_s
    assert other.base_step_s == lib.base_step_s


def test_merged_call_sites_average_their_prices_by_trips():
    from planner._src.trace import merge_regions

    a = dataclasses.replace(_trace(PRICES).regions[0], body="same", group=0)
    b = dataclasses.replace(
        a, id=1, multiplicity=24, group=1, hlo_recompute_s=(5e-4, 2e-3, None, 1e-3)
    )
    (m,) = merge_regions([a, b])
    assert m.multiplicity == 32
    assert m.hlo_recompute_s[:2] == pytest.approx((4e-4, 3e-3))
    assert m.hlo_recompute_s[2:] == (None, None)  # a price only where both sites have one
    (alone,) = merge_regions([a, dataclasses.replace(b, hlo_recompute_s=None)])
    assert alone.hlo_recompute_s is None


@pytest.mark.parametrize("profile", ["cpu", "h200"])
def test_an_xla_cpu_compile_prices_nothing_and_compiles_nothing_more(monkeypatch, profile):
    """On XLA:CPU (a CPU profile, or a GPU profile planned on this machine's backend) the
    trace stage makes no pricing compile: the two anchors only, and no HLO prices."""
    import jax

    from examples import llama
    from planner._src.trace import trace_step
    from planner._src.xla import compile as xla_compile

    if jax.default_backend() != "cpu":
        pytest.skip("an XLA:CPU test")
    compiles = []
    real = xla_compile.compile_lowered

    def counted(lowered, options=None):
        compiles.append(options)
        return real(lowered, options)

    monkeypatch.setattr(xla_compile, "compile_lowered", counted)
    step, args = llama.make_train_step(llama.LlamaConfig(n_layers=2))
    tr = trace_step(step, args, hardware=cm.load_profile(profile))
    assert len(compiles) == 2, compiles  # full remat and save-everything
    assert tr.hlo_priced_with == "" and all(r.hlo_recompute_s is None for r in tr.regions)
