"""Per-direction hiding models (issue 18): the profile fields, the fit, and the plan they make."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest

import cost_models as cm
from planner._src.cost import evaluate
from planner._src.cost.predict import hiding_models
from planner._src.cost.simulate import simulate
from planner._src.solve import SolverOptions, solve_assignment

ROOT = Path(__file__).resolve().parents[1]


def test_h200_profile_carries_calibrated_models_with_their_source():
    hw = cm.load_profile("h200")
    for d in ("d2h", "h2d"):
        model = getattr(hw.link, f"{d}_hiding")
        assert isinstance(model, cm.HidingModel) and model.form in cm.HIDING_FORMS
        src = hw.source(f"link.{d}_hiding")
        assert "h200-2026-12-03-sweep.md" in src and "offload-windows-2026-12-04.md" in src
        assert "leave-one-out" in src
    # Round trip through the file format, hiding models included.
    assert cm.HardwareProfile.from_json(hw.to_json()) == hw


def test_profile_without_hiding_models_falls_back_to_overlap_efficiency(tmp_path):
    data = json.loads((ROOT / "cost_models/profiles/h200.json").read_text())
    for d in ("d2h", "h2d"):
        del data["link"][f"{d}_hiding"]
    path = tmp_path / "old.json"
    path.write_text(json.dumps(data))
    old = cm.load_profile(path)
    assert old.link.d2h_hiding is None and old.link.h2d_hiding is None
    got = old.link.hiding("h2d", old.overlap_efficiency)
    assert (got.eta, got.capacity_s, got.floor) == (old.overlap_efficiency, math.inf, 0.0)
    assert "link.d2h_hiding" not in dict(old.sources)
    assert "d2h_hiding" not in old.to_json()["link"]  # written back as it was read


def test_bad_hiding_model_in_a_profile_teaches(tmp_path):
    data = json.loads((ROOT / "cost_models/profiles/h200.json").read_text())
    data["link"]["d2h_hiding"]["value"]["floor"] = 1.5
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    with pytest.raises(cm.ProfileError, match=r"d2h_hiding.*floor is 1.5.*from 0 to 1"):
        cm.load_profile(path)
    data["link"]["d2h_hiding"] = {"value": {"eta": 0.2}}
    path.write_text(json.dumps(data))
    with pytest.raises(cm.ProfileError, match=r"d2h_hiding.*exactly a value and its source"):
        cm.load_profile(path)


def test_hiding_model_formula_terms():
    q = [(2.0, 10.0), (3.0, 1.0)]  # (copy, window) in production order
    assert cm.HidingModel(eta=0.5).exposed(q) == pytest.approx(max(5 - 5, 3 - 0.5))
    assert cm.HidingModel(eta=1.0, capacity_s=1.0).exposed(q) == pytest.approx(4.0)
    assert cm.HidingModel(eta=1.0, floor=0.8).exposed(q) == pytest.approx(4.0)
    assert cm.HidingModel(eta=0.0).exposed([]) == 0.0


def test_fit_recovers_the_form_that_made_the_points():
    true = cm.HidingModel(eta=0.3, capacity_s=3.0, floor=0.0)  # on the 20-step grid
    queues = [[(c, w)] for c, w in ((1, 20), (2, 5), (4, 30), (6, 8), (9, 12), (3, 2), (12, 40))]
    queues += [[(2.0, 15.0), (5.0, 6.0)], [(12.0, 5.0)]]  # two of 12: the same grid left out
    pts = [cm.HidingPoint(copies=tuple(q), exposed_s=true.exposed(q)) for q in queues]
    fit = cm.fit_hiding(pts, steps=20)
    model, rms, loo, within = fit.forms[fit.best]
    assert rms < 1e-9 and loo < 1e-9 and within == len(pts)
    assert model.exposed([(7.0, 10.0)]) == pytest.approx(true.exposed([(7.0, 10.0)]))
    with pytest.raises(cm.HidingError, match="at least 3"):
        cm.fit_hiding(pts[:2])


def test_hiding_from_sweep_writes_cited_models():
    pts = [cm.HidingPoint(copies=((c, 10.0),), exposed_s=max(0.0, c - 2.0)) for c in range(1, 8)]
    hw, fits = cm.hiding_from_sweep("h100-sxm", pts, pts, source="my sweep", steps=20)
    assert hw.link.d2h_hiding == fits["d2h"].model
    assert hw.source("link.h2d_hiding").startswith("my sweep; 7 measured trips; kept form")
    assert cm.HardwareProfile.from_json(hw.to_json()) == hw


def test_attention_output_offload_beats_remat_with_the_h200_models():
    """Issue 18's example on a small synthetic layer: the long-context model's attention output
    (examples/llama.py LONG_CONTEXT, deviceless cost model on the CPU: 268 MB per trip, 5.10
    ms each way; forward compute after it 18.24 ms, backward compute before its reader 27.61
    ms). With the old single eta (0.0895) the model exposes 3.47 + 2.66 ms of it per trip,
    with the h200 profile's calibrated models 2.44 + 2.52 ms. Its recompute is set between
    the two (5.5 ms per trip) so that the decision turns on the hiding model: remat under the
    old eta, offload under the calibrated models (the H200 measured the offload faster than
    recomputing: 947.1 vs 995.2 ms, h200-2026-12-02.md)."""
    from synthetic import one_tensor_layer

    hw = cm.load_profile("h200")
    copy = 268_435_456 / hw.link.d2h_bytes_per_s
    after, before = 18.24e-3, 27.61e-3
    graph, cost = one_tensor_layer(
        nbytes=268_435_456, recompute_s=5.5e-3, copy_s=copy, after_s=after, before_s=before
    )
    key = graph.classes[0].key
    budget = evaluate(cost, graph, _of(key, "offload")).peak_bytes
    assert evaluate(cost, graph, _of(key, "save")).peak_bytes > budget  # saving does not fit
    old = dataclasses.replace(cost, overlap_efficiency=hw.overlap_efficiency)
    new = dataclasses.replace(old, d2h_hiding=hw.link.d2h_hiding, h2d_hiding=hw.link.h2d_hiding)
    opts = SolverOptions(time_limit_s=5)
    old_x = evaluate(old, graph, _of(key, "offload")).regions[0]
    assert old_x.exposed_fwd_s + old_x.exposed_bwd_s > 5.5e-3  # the old eta: remat pays
    assert solve_assignment(graph, old, budget, opts).assignment.as_dict()[key] == "remat"
    got = solve_assignment(graph, new, budget, opts).assignment
    assert got.as_dict()[key] == "offload"
    p = evaluate(new, graph, got)
    d2h, h2d = hiding_models(new)
    # By hand from the profile's figures: stores past the capacity, reloads at the floor.
    assert p.regions[0].exposed_fwd_s == pytest.approx(
        max(copy - d2h.capacity_s, copy - d2h.eta * after, d2h.floor * copy)
    )
    assert p.regions[0].exposed_bwd_s == pytest.approx(
        max(h2d.floor * copy, copy - h2d.capacity_s, copy - h2d.eta * before, 0.0)
    )
    assert p.regions[0].exposed_fwd_s + p.regions[0].exposed_bwd_s < 5.5e-3
    assert simulate(graph, new, got, usable_bytes=budget).step_s == pytest.approx(p.step_s)


def _of(key, d):
    from planner._src.types import Assignment

    return Assignment.of({key: d})


def test_sweep_windows_and_calibration_on_a_traced_step():
    """The calibration mode on the CPU: per offload set the cost model's (copy, window) per
    tensor, the prediction through the profile's models, and a fit of measured trips made by
    a known model, written into a profile with its source."""
    from examples import llama
    from planner._src.profiling import calibrate_hiding, measured_per_trip, sweep_windows

    step, args = llama.make_train_step(llama.LlamaConfig(n_layers=1, seq=64))
    sets = [("query_proj",), ("mlpwi_0",), ("query_proj", "mlpwi_0")]
    hw = cm.load_profile("h200")
    got = sweep_windows(step, args, sets, hw)
    assert [g["names"] for g in got] == [list(s) for s in sets]
    one = got[0]
    assert len(one["d2h"]) == len(one["h2d"]) == 1
    (copy, after), (_, before) = one["d2h"][0], one["h2d"][0]
    assert copy == pytest.approx(cm.transfer_seconds(2 * 64 * 256 * 4, hw, "d2h"))
    assert after > 0 and before > 0
    assert one["predicted_d2h_s"] == pytest.approx(hw.link.d2h_hiding.exposed(one["d2h"]))
    assert one["predicted_h2d_s"] == pytest.approx(hw.link.h2d_hiding.exposed(one["h2d"]))
    assert len(got[2]["d2h"]) == 2  # both tensors, in production order
    true = cm.HidingModel(eta=0.5, floor=0.4)
    measured = [(true.exposed(g["d2h"]), true.exposed(g["h2d"])) for g in got]
    prof, fits = calibrate_hiding(got, measured, "h100-sxm", source="a test sweep", steps=10)
    assert prof.source("link.d2h_hiding").startswith("a test sweep; 3 measured trips")
    for d, k in (("d2h", 0), ("h2d", 1)):
        fit = fits[d]
        assert getattr(prof.link, f"{d}_hiding") == fit.model
        assert fit.forms[fit.best][2] == min(f[2] for f in fit.forms.values())  # kept: min LOO
        exact, rms, _, _ = fit.forms["eta+floor"]  # the form that made the points, refitted
        assert rms < 1e-12
        for g, m in zip(got, measured):
            assert exact.exposed(g[d]) == pytest.approx(m[k], rel=1e-6, abs=1e-15)
    trips = {
        "steps": [{"per_trip": [{"d2h_exposed_s": x, "h2d_exposed_s": 2 * x}]} for x in (1, 3)]
    }
    assert measured_per_trip(trips) == (2.0, 4.0)
    with pytest.raises(ValueError, match="one measurement per offload set"):
        calibrate_hiding(got, measured[:2], "h100-sxm", source="x")
