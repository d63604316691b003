"""What a new user does that nobody here thought of (issue 45): the CLI's exit codes follow
the README's table for every failure of the user's module (an import error, a SyntaxError, a
missing dependency, SystemExit(0) from a factory, a non-callable step, arguments as a dict,
a backend JAX cannot start); Ctrl-C restores the cursor; a stdout that cannot be written is
said so; ``maximize_throughput`` checks its arguments before its first compile and keeps
the other batch sizes' results when one raises MemoryError."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import jax
import numpy as np
import pytest

import planner
from examples.accumulate import make_tiny_step
from planner._src.cli.main import main

ROOT = Path(__file__).resolve().parents[1]


def _module(tmp_path, monkeypatch, name: str, source: str) -> str:
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop(name, None)
    return name


def _solve(capsys, spec):
    code = main(["solve", spec, "--hbm-gb", "0.05", "--hardware", "cpu"])
    out, err = capsys.readouterr()
    return code, out, err


MAKE = "def make():\n    return step, (jnp.ones((8, 8)), jnp.ones((4, 8)))\n"
GOOD = """
import jax, jax.numpy as jnp
def step(w, x):
    return jax.grad(lambda w: jnp.mean(jax.checkpoint(lambda w, x: jnp.tanh(x @ w))(w, x)))(w)
"""


@pytest.mark.parametrize(
    "name, source, code, words",
    [
        ("raises_at_import", "raise RuntimeError('no config')\n", 3, "Importing raises_at_import"),
        ("bad_syntax", "def make(:\n", 3, "SyntaxError"),
        ("needs_dep", "import no_such_dependency_xyz\n", 3, "pip install no_such_dependency_xyz"),
        ("exits_zero", GOOD + "def make():\n    raise SystemExit(0)\n", 3, "SystemExit(0)"),
        ("exits_at_import", "import sys\nsys.exit(0)\n", 3, "SystemExit(0)"),
        (
            "not_callable",
            GOOD + "def make():\n    return 3, (jnp.ones((8, 8)), jnp.ones((4, 8)))\n",
            2,
            "its first item is not callable",
        ),
        (
            "dict_args",
            GOOD + "def make():\n    return step, {'w': jnp.ones((8, 8)), 'x': jnp.ones((4, 8))}\n",
            2,
            "as a dict",
        ),
        ("one_thing", GOOD + "def make():\n    return step\n", 2, "must return (step_fn"),
    ],
)
def test_every_failure_of_the_users_module_exits_as_documented(
    capsys, tmp_path, monkeypatch, name, source, code, words
):
    mod = _module(tmp_path, monkeypatch, name, source)
    got, out, err = _solve(capsys, f"{mod}:make")
    assert got == code, err
    assert words in err and "Fix:" in err, err
    assert out == ""
    if code == 3:
        assert "Traceback" in err  # the user's traceback, then what to check


def test_a_module_that_is_not_there_is_still_a_usage_error(capsys):
    got, _, err = _solve(capsys, "no_such_module_abc:make")
    assert got == 2 and "run from the directory that holds it" in err


def test_a_backend_jax_cannot_start_is_not_blamed_on_the_factory():
    env = {"PYTHONPATH": str(ROOT), "JAX_PLATFORMS": "madeupplatform", "PATH": "/usr/bin:/bin"}
    r = subprocess.run(
        [sys.executable, "-m", "planner", "solve", "examples.llama:quickstart", "--hbm-gb", "1"],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=120,
    )
    assert r.returncode == 2, r.stderr
    assert "JAX_PLATFORMS='madeupplatform'" in r.stderr and "Fix: unset JAX_PLATFORMS" in r.stderr
    assert "quickstart raised" not in r.stderr


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full")
def test_json_to_a_full_stdout_says_so_and_keeps_the_plan(tmp_path):
    env = {"PYTHONPATH": str(ROOT), "JAX_PLATFORMS": "cpu", "PATH": "/usr/bin:/bin"}
    plan = tmp_path / "plan.json"
    (tmp_path / "tiny_full.py").write_text(
        GOOD + "def make():\n    return step, (jnp.ones((8, 8)), jnp.ones((4, 8)))\n"
    )
    with open("/dev/full", "w") as full:
        r = subprocess.run(
            [
                sys.executable,
                "-m",
                "planner",
                "solve",
                "tiny_full:make",
                "--hbm-gb",
                "1",
                "--hardware",
                "cpu",
                "--json",
                "--save",
                str(plan),
                "--quiet",
            ],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=tmp_path,
            timeout=300,
        )
    assert r.returncode == 2, r.stderr
    assert "standard output is /dev/full" in r.stderr and "Fix:" in r.stderr
    assert "tracing" not in r.stderr and not plan.exists()  # before any work
    assert ": None" not in r.stderr and "Exception ignored" not in r.stderr


def test_a_stdout_that_fails_after_the_solve_says_so_and_keeps_the_plan(
    capsys, tmp_path, monkeypatch
):
    """A disk that fills up during the run: the write fails after the solve."""
    import planner._src.cli.common as common

    mod = _module(tmp_path, monkeypatch, "tiny_later", GOOD + MAKE)

    def full(*a, **k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(common, "print", full, raising=False)
    plan = tmp_path / "plan.json"
    argv = ["solve", f"{mod}:make", "--hbm-gb", "1", "--hardware", "cpu", "--quiet"]
    code = main([*argv, "--save", str(plan)])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "cannot write the output to standard output: No space left on device" in err
    assert planner.load_plan(plan).budget_bytes == 10**9  # saved all the same


def test_ctrl_c_restores_the_cursor_and_exits_130(capsys, monkeypatch):
    import planner._src.cli.solve as solve_cmd

    def interrupted(a):
        raise KeyboardInterrupt

    monkeypatch.setattr(solve_cmd, "load_factory", lambda spec: interrupted(None))
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True, raising=False)
    code = main(["solve", "examples.llama:quickstart", "--hbm-gb", "1", "--hardware", "cpu"])
    err = capsys.readouterr().err
    assert code == 130 and "\x1b[?25h" in err and "interrupted" in err


# ------------------------------------------------------------------ maximize_throughput


def _fixed_batch_step(b):  # ignores its batch size
    return make_tiny_step(2)


def test_a_factory_that_ignores_the_batch_size_is_refused_before_a_compile():
    calls = []

    def make(b):
        calls.append(b)
        return _fixed_batch_step(b)

    with pytest.raises(planner.InvalidArgumentError, match="ignores its batch size"):
        planner.maximize_throughput(make, hbm_gb=1, hardware="cpu", tokens_per_example=32)
    assert len(calls) == 2  # two factory calls, no trace, no compile


def _float_step(b):
    x = jax.ShapeDtypeStruct((b, 8), np.float32)
    step = lambda w, x: jax.grad(lambda w: (jax.checkpoint(lambda x: x @ w)(x) ** 2).sum())(w)  # noqa: E731
    return step, (jax.ShapeDtypeStruct((8, 8), np.float32), x)


def test_tokens_that_cannot_be_read_are_refused_before_a_compile(monkeypatch):
    from planner._src.planning.throughput import search

    def no_session(*a, **k):
        raise AssertionError("a Planner was made before the arguments were checked")

    monkeypatch.setattr(search, "Planner", no_session)
    with pytest.raises(planner.InvalidArgumentError, match="tokens_per_example=SEQ_LEN"):
        planner.maximize_throughput(_float_step, hbm_gb=1, hardware="cpu", max_batch_size=4)


def test_memory_error_at_one_batch_size_keeps_the_others():
    def make(b):
        if b >= 4:
            raise MemoryError(f"cannot allocate the batch of {b}")
        return make_tiny_step(b)

    with warnings.catch_warnings(record=True) as ws:
        warnings.simplefilter("always")
        result = planner.maximize_throughput(
            make,
            hbm_gb=1,
            hardware="cpu",
            batch_sizes=(1, 2, 4),
            stock=("nothing_saveable",),
            refine=0,
        )
    assert result.batch_size in (1, 2)
    assert any("make_step(4) raised MemoryError" in str(w.message) for w in ws)
    assert {r.batch_size for r in result.table} == {1, 2}


def test_opt_state_argnum_that_cannot_be_the_optimizer_state_is_refused():
    """Equal to params_argnum, or pointing at the batch (token ids): accepted before and
    reported as "optimizer state"."""
    from examples import llama

    cfg = llama.LlamaConfig(
        n_layers=2, d_model=64, n_heads=4, n_kv_heads=2, d_ff=128, seq=16, vocab=64, batch=2
    )
    step, args = llama.make_adam_step(cfg)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", planner.PlanWarning)
        session = planner.Planner(step, *args, hardware="cpu")
        with pytest.raises(planner.InvalidArgumentError, match="is the parameters"):
            planner.state.plan_state(session, 0.02, opt_state_argnum=0, params_argnum=0)
        with pytest.raises(planner.InvalidArgumentError, match="has no float arrays"):
            planner.state.plan_state(session, 0.02, opt_state_argnum=2, params_argnum=0)
