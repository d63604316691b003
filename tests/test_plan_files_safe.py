"""Saving and loading a plan file never surprises (issue 45): a symlink is written through
(its target gets the plan, the link stays), a FIFO or device node is never replaced, threads
saving one path do not collide, what is not a path is refused teaching what is, and a
malformed file (nested too deep, a string version) gets a plan-file error."""

from __future__ import annotations

import json
import os
import threading

import jax
import jax.numpy as jnp
import pytest

import planner


def _step(w, x):
    return jax.grad(lambda w: jnp.mean(jax.checkpoint(lambda w, x: jnp.tanh(x @ w))(w, x)))(w)


@pytest.fixture(scope="module")
def plan():
    args = (jnp.ones((32, 32)), jnp.ones((16, 32)))
    return planner.solve(
        _step, *args, hbm_gb=1.0, hardware="cpu", verify_compile=False, compare_stock=False
    )


def test_a_symlink_is_written_through_and_kept(plan, tmp_path):
    target = tmp_path / "real.json"
    target.write_text("old")
    link = tmp_path / "plan.json"
    link.symlink_to(target)
    plan.save(link)
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert json.loads(target.read_text())["format"] == "jax-offload-planner/plan"
    assert planner.load_plan(link).budget_bytes == plan.budget_bytes
    # a dangling link: its target is created
    dangling = tmp_path / "dangling.json"
    dangling.symlink_to(tmp_path / "new.json")
    plan.save(dangling)
    assert dangling.is_symlink() and (tmp_path / "new.json").is_file()


def test_an_existing_file_keeps_its_mode(plan, tmp_path):
    path = tmp_path / "plan.json"
    path.write_text("")
    path.chmod(0o640)
    plan.save(path)
    assert path.stat().st_mode & 0o777 == 0o640


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_fifo_is_never_replaced_nor_read(plan, tmp_path):
    fifo = tmp_path / "plan.json"
    os.mkfifo(fifo)
    with pytest.raises(planner.PlanFileError, match="a FIFO") as e:
        plan.save(fifo)
    assert "nothing was written" in str(e.value)
    assert fifo.is_fifo()
    with pytest.raises(planner.PlanFileError, match="not a regular file"):
        planner.load_plan(fifo)  # would block forever on read
    link = tmp_path / "to-fifo.json"
    link.symlink_to(fifo)
    with pytest.raises(planner.PlanFileError, match="points to"):
        plan.save(link)


def test_a_device_node_is_never_replaced(plan):
    if not os.path.exists("/dev/null") or os.access("/dev", os.W_OK) is False:
        pytest.skip("no /dev/null")
    with pytest.raises(planner.PlanFileError, match="a character device"):
        plan.save("/dev/null")
    assert os.path.exists("/dev/null") and not os.path.isfile("/dev/null")


def test_threads_saving_one_path_do_not_collide(plan, tmp_path):
    path = tmp_path / "plan.json"
    errors = []

    def save():
        try:
            for _ in range(5):
                plan.save(path)
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=save) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert planner.load_plan(path).budget_bytes == plan.budget_bytes
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plan.json"]  # no temporary left


@pytest.mark.parametrize(
    "bad, match",
    [
        (1, "takes a file path for the plan file, not int"),
        (None, "not NoneType"),
        ("plan\x00.json", "NUL byte"),
        ("", "is empty"),
    ],
)
def test_what_is_not_a_path_is_refused_teaching(plan, tmp_path, bad, match):
    with pytest.raises(planner.PlanFileError, match=match) as e:
        plan.save(bad)
    assert "Fix:" in str(e.value)
    with pytest.raises(planner.PlanFileError, match=match.replace("plan.save", "load_plan")):
        planner.load_plan(bad)


def test_deeply_nested_json_is_a_plan_file_error(tmp_path):
    path = tmp_path / "deep.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(planner.PlanFileError, match="nested deeper"):
        planner.load_plan(path)


def test_a_string_version_is_named_as_such(plan, tmp_path):
    path = tmp_path / "plan.json"
    plan.save(path)
    data = json.loads(path.read_text())
    data["version"] = "1"
    path.write_text(json.dumps(data))
    with pytest.raises(planner.PlanFileError) as e:
        planner.load_plan(path)
    msg = str(e.value)
    assert "'version' is '1' (str), not a version number" in msg
    assert "reads version 1" not in msg
