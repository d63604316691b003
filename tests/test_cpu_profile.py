"""hardware="cpu" is this machine's calibration (cost_models/_cpu_profile.py): a measured
profile that loads like any other, cached per machine (a corrupt or foreign cache file is
measured again, an unwritable cache is warned about), named in the report's status; the
made-up profile stays reachable ("cpu-made-up", PLANNER_CPU_PROFILE=made-up, as the suite
pins it in conftest.py). Measurements here are tiny (2 shared cores)."""

from __future__ import annotations

import json
import warnings

import jax
import jax.numpy as jnp
import pytest

import cost_models as cm
import planner
from cost_models import _cpu_profile
from planner._src.results.report.build import made_up_times

TINY = dict(
    repeats=1,
    matmul_sizes={"fp32": (32, 64), "bf16": (32,)},
    bandwidth_mib=(1 / 16, 1 / 4),
    vector_mib=1 / 16,
)


@pytest.fixture(scope="module")
def measured():
    return cm.calibrate_cpu(**TINY)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A fresh cache directory, "cpu" meaning the calibration, and a tiny measurement that
    counts its calls."""
    monkeypatch.setenv(_cpu_profile.CACHE_ENV, str(tmp_path))
    monkeypatch.setenv(_cpu_profile.PROFILE_ENV, "calibrated")
    monkeypatch.setattr(_cpu_profile, "_loaded", {})
    calls = []
    real = _cpu_profile.calibrate_cpu

    def tiny():
        calls.append(1)
        return real(**TINY)

    monkeypatch.setattr(_cpu_profile, "calibrate_cpu", tiny)
    return tmp_path, calls


def test_the_calibration_is_a_valid_measured_profile(measured):
    p = measured
    assert p.name == "cpu-calibrated" and p.platform == "cpu"
    rates = dict(p.matmul_flops_per_s)
    assert set(rates) >= {"fp32", "bf16"} and all(r > 0 for r in rates.values())
    assert p.hbm_bytes_per_s > 0 and p.vector_flops_per_s > 0 and p.kernel_launch_s >= 0
    assert p.hbm_bytes > 0
    # Through the profile file format and back: the same figures, each source a measurement
    # or a derivation, none made up.
    again = cm.HardwareProfile.from_json(json.loads(json.dumps(p.to_json())), where="x")
    assert again.matmul_flops_per_s == p.matmul_flops_per_s
    assert again.hbm_bytes_per_s == p.hbm_bytes_per_s
    assert made_up_times(p) == ""
    assert not any(s.lower().startswith("made up") for _, s in p.sources)
    assert "32^3" in p.source("matmul_flops_per_s.fp32")  # every size's rate is cited
    assert "64^3" in p.source("matmul_flops_per_s.fp32")
    # No offload on XLA:CPU: the link is the same DRAM, and the source says offload is off.
    assert p.link.kind == "host-memory"
    assert "offload off" in p.source("link.d2h_bytes_per_s").replace(
        "turns offload off", "offload off"
    )
    assert cm.calibration_note(p).startswith("this machine's calibration (")
    assert cm.calibration_note(cm.load_profile("cpu-made-up")) == ""


def test_the_cache_round_trips_and_a_corrupt_file_is_measured_again(cache):
    tmp, calls = cache
    first = cm.load_profile("cpu")
    path = _cpu_profile.cache_path()
    assert calls == [1] and path.is_file() and str(path).startswith(str(tmp))
    assert f"cached at {path}" in cm.calibration_note(first)
    _cpu_profile._loaded.clear()  # a new process: read from the file
    second = cm.load_profile("cpu")
    assert calls == [1], "the cached calibration was measured again"
    assert second.matmul_flops_per_s == first.matmul_flops_per_s
    assert second.description == first.description
    # A truncated file: a warning, measured again, and the file replaced by a valid one.
    path.write_text(path.read_text()[:100])
    _cpu_profile._loaded.clear()
    with pytest.warns(RuntimeWarning, match="unusable"):
        cm.load_profile("cpu")
    assert calls == [1, 1]
    json.loads(path.read_text())
    # A file of another machine key (a collision, or one edited by hand): measured again.
    data = json.loads(path.read_text())
    data["machine"]["cpu"] = "another CPU"
    path.write_text(json.dumps(data))
    _cpu_profile._loaded.clear()
    with pytest.warns(RuntimeWarning, match="another machine key"):
        cm.load_profile("cpu")
    assert calls == [1, 1, 1]


def test_an_unwritable_cache_warns_and_still_plans(cache, monkeypatch, tmp_path):
    _, calls = cache
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    monkeypatch.setenv(_cpu_profile.CACHE_ENV, str(blocker))
    with pytest.warns(RuntimeWarning, match="could not be cached"):
        p = cm.load_profile("cpu")
    assert p.name == "cpu-calibrated" and calls == [1]


def test_which_cpu_profile_each_name_and_setting_gives(cache, monkeypatch):
    _, calls = cache
    assert cm.load_profile("cpu-made-up").name == "cpu"
    assert made_up_times(cm.load_profile("cpu-made-up"))  # its times are made up
    monkeypatch.setenv(_cpu_profile.PROFILE_ENV, "made-up")
    assert cm.load_profile("cpu").name == "cpu" and calls == []
    assert cm.load_profile("cpu-calibrated").name == "cpu-calibrated" and calls == [1]
    monkeypatch.setenv(_cpu_profile.PROFILE_ENV, "measured")
    with pytest.raises(cm.ProfileError, match="PLANNER_CPU_PROFILE='measured'"):
        cm.load_profile("cpu")
    monkeypatch.delenv(_cpu_profile.PROFILE_ENV)  # the default: the calibration
    assert cm.load_profile("cpu").name == "cpu-calibrated"


def test_the_cache_lives_in_the_users_cache_dir(monkeypatch, tmp_path):
    monkeypatch.delenv(_cpu_profile.CACHE_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert _cpu_profile.cache_dir() == tmp_path / "jax-offload-planner"
    monkeypatch.setenv(_cpu_profile.CACHE_ENV, str(tmp_path / "mine"))
    assert _cpu_profile.cache_path().parent == tmp_path / "mine" / "cpu-profiles"
    # The key changes with what the figures depend on.
    key = _cpu_profile.machine()
    assert _cpu_profile.cache_path({**key, "jax": "0.0.1"}) != _cpu_profile.cache_path(key)
    assert _cpu_profile.cache_path({**key, "xla_flags": "-x"}) != _cpu_profile.cache_path(key)


@jax.checkpoint
def _layer(h, w):
    return jnp.tanh(jnp.tanh(h @ w) @ w)


def _step(w, x):
    def loss(w):
        h = x
        for _ in range(3):
            h = _layer(h, w)
        return jnp.mean(h**2)

    value, grad = jax.value_and_grad(loss)(w)
    return w - 1e-3 * grad, value


def test_the_report_says_the_times_are_this_machines_calibration(cache):
    w = jnp.ones((64, 64), jnp.float32) * 0.01
    x = jnp.ones((128, 64), jnp.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", planner.PlanWarning)
        session = planner.Planner(_step, w, x, hardware="cpu")
        plan = session.plan(session.trace.anchor_saved.device_bytes * 1.5 / 1e9)
    assert plan.hardware.name == "cpu-calibrated"
    text = " ".join(plan.report("text").split())
    assert "times from this machine's calibration (" in text
    assert f"cached at {_cpu_profile.cache_path()}" in text
    assert "made-up" not in text and "not a measurement" not in plan.choice_why
    # The calibration makes the figures this machine's, not the model's form XLA:CPU's: no
    # "predicted faster" is a speed claim here either.
    assert "did not order the stock policies as measured" in text
    if "predicted faster" in plan.choice_why:
        assert "by this machine's CPU calibration: on XLA:CPU not a ranking" in plan.choice_why
    (line,) = [v for k, v in json.loads(plan.report("json"))["status_lines"] if k == "times"]
    assert line.startswith("from this machine's calibration (") and "measured 20" in line
