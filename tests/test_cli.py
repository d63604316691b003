"""The command line, in process through ``planner._src.cli.main.main`` and once as ``python -m``."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from examples import llama
from planner._src.cli.main import main

pytestmark = pytest.mark.slow  # compiles whole models (the fast tier is -m "not slow")

ROOT = Path(__file__).resolve().parent.parent
FACTORY = "test_cli:tiny"  # this module, importable as pytest puts tests/ on sys.path
BUDGET = "0.012"


def tiny():
    """A two-layer Llama small enough that a CLI solve takes seconds."""
    return llama.make_train_step(
        llama.LlamaConfig(
            n_layers=2, d_model=128, n_heads=4, n_kv_heads=2, d_ff=384, seq=64, vocab=256
        )
    )


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """One CLI solve: plan file, markdown report written with --out."""
    d = tmp_path_factory.mktemp("cli")
    code = main(
        [
            "solve",
            FACTORY,
            "--hbm-gb",
            BUDGET,
            "--hardware",
            "cpu",
            "--format",
            "markdown",
            "--save",
            str(d / "plan.json"),
            "--out",
            str(d / "report.md"),
            "--timeline",
            str(d / "timeline.svg"),
            "--quiet",
        ]
    )
    assert code == 0
    return d


def test_help_and_usage_errors_return_codes(capsys):
    code, out, _ = run(capsys, "--help")
    assert code == 0 and "solve" in out and "pareto" in out and "calibrate" in out
    code, _, err = run(capsys, "frobnicate")
    assert code == 2 and "invalid choice" in err


def test_python_dash_m_planner_help_in_a_subprocess():
    r = subprocess.run(
        [sys.executable, "-m", "planner", "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    assert all(cmd in r.stdout for cmd in ("solve", "report", "pareto", "calibrate"))


def test_solve_writes_plan_report_and_timeline(saved):
    assert (saved / "report.md").read_text().startswith("# Plan: compiled, within budget")
    assert "<svg" in (saved / "timeline.svg").read_text()[:2000]
    assert json.loads((saved / "plan.json").read_text())["format"] == "jax-offload-planner/plan"


@pytest.mark.parametrize(
    "flags, check",
    [
        (["--format", "text"], lambda out: "PLAN STATUS: COMPILED, WITHIN BUDGET" in out),
        (["--json"], lambda out: json.loads(out)["status"] == "compiled, within budget"),
    ],
)
def test_solve_text_and_json_stdout_with_progress_on_stderr(capsys, flags, check):
    code, out, err = run(capsys, "solve", FACTORY, "--hbm-gb", BUDGET, "--hardware", "cpu", *flags)
    assert code == 0 and check(out)
    assert "[planner] tracing the step" in err and "[planner] solving" in err
    assert "[planner]" not in out  # stdout stays clean for pipes


@pytest.mark.parametrize(
    "flags, check",
    [
        ([], lambda out: out.startswith("PLAN STATUS: COMPILED, WITHIN BUDGET")),
        (["--format", "markdown"], lambda out: out.startswith("# Plan: compiled, within budget")),
        (["--format", "json"], lambda out: json.loads(out)["status"] == "compiled, within budget"),
        (["--json"], lambda out: json.loads(out)["budget_gb"] == float(BUDGET)),
    ],
)
def test_report_of_a_saved_plan_in_every_format(capsys, saved, flags, check):
    code, out, err = run(capsys, "report", str(saved / "plan.json"), *flags)
    assert code == 0 and check(out), out[:500]
    assert err == ""


def test_report_markdown_matches_what_solve_printed(capsys, saved):
    code, out, _ = run(capsys, "report", str(saved / "plan.json"), "--format", "markdown")
    assert code == 0 and out == (saved / "report.md").read_text()


def test_pareto_table_json_and_png(capsys, tmp_path):
    png = tmp_path / "pareto.png"
    code, out, err = run(
        capsys,
        "pareto",
        FACTORY,
        "--hbm-gb",
        "0.001,0.012,0.02",
        "--hardware",
        "cpu",
        "--png",
        str(png),
        "--svg",
        str(tmp_path / "p.svg"),
    )
    assert code == 0
    assert "INFEASIBLE" in out and "budget GB" in out and "nothing_saveable" in out
    assert png.read_bytes()[:4] == b"\x89PNG" and (tmp_path / "p.svg").exists()
    assert "drawing the curve" in err
    code, out, _ = run(
        capsys,
        "pareto",
        FACTORY,
        "--hbm-gb",
        "0.001,0.02",
        "--hardware",
        "cpu",
        "--json",
        "--quiet",
    )
    data = json.loads(out)
    assert code == 0
    assert [r["feasible"] for r in data["budgets"]] == [False, True]
    assert "InfeasibleBudgetError" == data["budgets"][0]["status"]
    assert data["budgets"][1]["predicted_peak_gb"] <= 0.02
    assert {s["name"] for s in data["stock_policies"]} >= {
        "nothing_saveable",
        "everything_saveable",
    }


def test_pareto_table_prints_an_error_as_written():
    from planner._src.cli.pareto import _pareto_table

    # An infeasible budget's message is printed as is: the table's console reads no rich
    # markup (it ate '[cuda]' and raised on a lone '[/x]' before report.text_console).
    rows = [dict(feasible=False, budget_gb=0.5, error="no plan: pip install .[cuda] [/x]")]
    assert "INFEASIBLE: no plan: pip install .[cuda] [/x]" in _pareto_table(rows, [])


def test_calibrate_with_tiny_sizes(capsys, tmp_path):
    out_path = tmp_path / "cal.json"
    code, out, err = run(
        capsys,
        "calibrate",
        "--base",
        "cpu",
        "--sizes-mb",
        "1",
        "--repeats",
        "1",
        "--matmul-n",
        "64",
        "--out",
        str(out_path),
        "--json",
    )
    assert code == 0, err
    assert json.loads(out)["name"] == "cpu-calibrated"
    assert json.loads(out_path.read_text())["name"] == "cpu-calibrated"
    code, out, _ = run(
        capsys,
        "calibrate",
        "--base",
        "cpu",
        "--sizes-mb",
        "1",
        "--repeats",
        "1",
        "--matmul-n",
        "64",
    )
    assert code == 0 and out.startswith("profile cpu-calibrated") and "host link" in out


@pytest.mark.parametrize(
    "argv, message",
    [
        (["solve", "examples.llama", "--hbm-gb", "1"], "is not MODULE:FACTORY"),
        (["solve", "no_such_module:make", "--hbm-gb", "1"], "Cannot import 'no_such_module'"),
        (["solve", FACTORY, "--hbm-gb", "1", "--hardware", "h300"], "h200"),
        (["solve", FACTORY, "--hbm-gb", "1", "--timeline", "t.jpg"], "must end with .png or .svg"),
        (["pareto", FACTORY, "--hbm-gb", "a,b"], "comma-separated list"),
        (["pareto", FACTORY, "--hbm-gb", "1", "--png", "p.svg"], "must end with .png"),
        (["report", "/nonexistent/plan.json"], "No plan file"),
        (["calibrate", "--base", "h300"], "h300"),
    ],
)
def test_errors_exit_2_with_the_message_on_stderr(capsys, argv, message):
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    assert "error: " in err and message in err, err


def test_infeasible_budget_exits_2_and_names_the_budget_that_works(capsys):
    code, out, err = run(capsys, "solve", FACTORY, "--hbm-gb", "0.001", "--hardware", "cpu", "-q")
    assert code == 2 and out == ""
    assert "No plan fits 1.000 MB" in err and "Fix: pass hbm_gb >=" in err


def test_profile_without_a_gpu_says_why_and_exits_4_before_planning(capsys):
    """profile measures a GPU's copies: on a machine where JAX sees none it stops at once
    (nothing planned: no 'planning' line) with what
    happened, why and the fix, and the documented exit status EXIT_NO_GPU."""
    import jax

    from planner._src.cli.common import EXIT_NO_GPU

    if jax.default_backend() != "cpu":
        pytest.skip("this machine has an accelerator: profile runs there")
    code, out, err = run(
        capsys,
        "profile",
        "examples.llama:profile_quickstart",
        "--hbm-gb",
        "0.42",
        "--hardware",
        "h200",
        "--json",
    )
    assert code == EXIT_NO_GPU == 4 and out == ""
    assert err.startswith("error: nothing to profile here") and "no GPU" in err
    assert (
        "\nWhy: profile measures a GPU" in err and "\nFix: run the same command on the GPU" in err
    )
    fix = "python -m planner solve examples.llama:profile_quickstart --hbm-gb 0.42 --hardware h200"
    assert fix in err and "planning" not in err
    from planner._src import cli

    assert "4 profile on a machine without a GPU" in " ".join(cli.__doc__.split())


def test_pareto_auto_spans_full_remat_to_save_everything(capsys):
    """--hbm-gb auto: five budgets above full remat's predicted peak, the last at saving
    everything's, each plan inside its budget; the same through planner.pareto."""
    code, out, _ = run(
        capsys, "pareto", FACTORY, "--hbm-gb", "auto", "--hardware", "cpu", "--json", "--quiet"
    )
    assert code == 0
    data = json.loads(out)
    stock = {s["name"]: s["predicted_peak_gb"] for s in data["stock_policies"]}
    budgets = [r["budget_gb"] for r in data["budgets"]]
    assert len(budgets) == 5 and budgets == sorted(budgets) and len(set(budgets)) == 5
    lo, hi = stock["nothing_saveable"], stock["everything_saveable"]
    assert lo < budgets[0] and abs(budgets[-1] - hi) <= 1e-6 * hi
    step = (hi - lo) / 5
    assert all(abs(b - (lo + step * (k + 1))) <= 1e-6 * hi for k, b in enumerate(budgets))
    # Each budget's answer compiled within it (or, for an offloading plan on the CPU, whose
    # host arrays share device memory, is an estimate within it: "unverified").
    assert all(
        r["feasible"]
        and r["compiled_gb"] <= r["budget_gb"] + 1e-9
        and r["status"] in ("compiled, within budget", "compiled, unverified")
        for r in data["budgets"]
    )


def test_pareto_auto_stops_at_the_devices_hbm():
    """Where saving everything does not fit the device, the span ends at its capacity."""
    import dataclasses

    import cost_models as cm
    import planner

    step, args = tiny()
    full = planner.pareto(step, *args, hbm_gb=None, points=2, hardware="cpu")
    top = full[-1].budget_bytes
    small = dataclasses.replace(cm.load_profile("cpu"), hbm_bytes=0.9 * top)
    capped = planner.pareto(step, *args, hbm_gb=None, points=2, hardware=small)
    assert capped[-1].budget_bytes == pytest.approx(0.9 * top, rel=1e-6)
    # lo + (hi - lo) / 2 with hi lowered by 0.1 * top: the first budget drops by 0.05 * top.
    assert capped[0].budget_bytes == pytest.approx(full[0].budget_bytes - 0.05 * top, rel=1e-6)


def test_pareto_auto_budgets_leave_the_allocator_headroom_on_top():
    """With a profile's allocator headroom h, the plans may use budget x (1 - h): the auto
    budgets are raised so that what the plans may use spans full remat .. save everything."""
    import dataclasses

    import cost_models as cm
    import planner

    step, args = tiny()
    plain = planner.pareto(step, *args, hbm_gb=None, points=2, hardware="cpu", verify_compile=False)
    roomy = dataclasses.replace(cm.load_profile("cpu"), allocator_headroom=0.1)
    spaced = planner.pareto(
        step, *args, hbm_gb=None, points=2, hardware=roomy, verify_compile=False
    )
    for a, b in zip(plain, spaced):
        assert b.budget_bytes == pytest.approx(a.budget_bytes / 0.9, rel=1e-6)
        assert b.budget_bytes - b.headroom_bytes == pytest.approx(a.budget_bytes, rel=1e-6)


def test_help_and_version_answer_without_importing_jax():
    """``--help`` parses before anything imports JAX (issue 19: it took 4-6 s)."""
    code = (
        "import sys, contextlib, io\n"
        "from planner._src.cli.main import main\n"
        "for argv in (['--help'], ['solve', '--help'], ['--version']):\n"
        "    with contextlib.redirect_stdout(io.StringIO()) as out:\n"
        "        assert main(argv) == 0, argv\n"
        "    print(out.getvalue())\n"
        "print('JAX IMPORTED' if 'jax' in sys.modules else 'NO JAX')\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.rstrip().endswith("NO JAX"), r.stdout[-500:]
    import planner

    assert f"python -m planner {planner.__version__}" in r.stdout


def test_every_option_has_help_and_the_profiles_are_listed():
    import argparse

    from planner._src.cli.common import profile_names
    from planner._src.cli.parser import build_parser

    assert {"h200", "cpu"} <= set(profile_names())
    ap = build_parser()
    sub = next(a for a in ap._actions if isinstance(a, argparse._SubParsersAction))
    for name, p in sub.choices.items():
        for action in p._actions:
            assert action.help and action.help != argparse.SUPPRESS, (name, action.dest)
        if any(a.dest == "hardware" for a in p._actions):
            assert "h200" in p.format_help() and "h100-sxm" in p.format_help(), name
