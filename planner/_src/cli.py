"""The command line of jax-offload-planner, all of it (``python -m planner``, also installed
as ``jax-offload-planner``).

    python -m planner solve MODULE:FACTORY --hbm-gb 80 [--hardware h200] [--save plan.json]
    python -m planner report plan.json [--format text|markdown|json]
    python -m planner pareto MODULE:FACTORY --hbm-gb 60,80,100 [--png pareto.png]
    python -m planner calibrate [--out my-gpu.json] [--base h200]
    python -m planner profile examples.llama:profile_quickstart --hbm-gb 0.42 [--png t.png]
    python -m planner throughput examples.accumulate:make_tiny_step --hbm-gb 0.003 --hardware cpu
    python -m planner maxtext [CONFIG.yml] key=value ... --hbm-gb 80 [--hardware h200]

The factory is a function of no arguments returning ``(step_fn, example_args)``, for
example ``examples.llama:quickstart`` (throughput: of the batch size, ``make_step(b)``). Every command takes ``--json`` for machine-readable
output on stdout; progress messages go to stderr, so stdout stays clean for pipes.
Exit status: 0 success; 1 a plan that failed its checks (pareto: no budget was feasible;
profile: nothing was measured); 2 an error the planner found (bad input, an infeasible
budget, a file that cannot be read or written: the message on stderr says what happened,
why, and the fix), also argparse's usage errors; 3 your MODULE:FACTORY raised (its traceback,
then what to check); 4 profile on a machine without a GPU (nothing to measure; the message
says where to run it instead).
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import sys
from pathlib import Path

from planner._src.units import GB

# ------------------------------------------------------------------------------ helpers


def import_factory(spec: str, contract: str):
    """The callable named by ``MODULE:FACTORY`` (the current directory importable too).

    ``contract`` says what the factory must return, for the error messages.
    """
    from planner._src.errors import (
        InvalidArgumentError,
    )  # deferred: --help answers without importing JAX

    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise InvalidArgumentError(
            f"{spec!r} is not MODULE:FACTORY.\nFix: name a module and a function in it that "
            f"returns {contract}, e.g. examples.llama:quickstart."
        )
    cwd = str(Path.cwd())
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise InvalidArgumentError(
            f"Cannot import {module_name!r}: {e}.\nFix: run from the "
            "directory that holds it, or install it."
        ) from e
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise InvalidArgumentError(f"{module_name} has no function {attr!r}.")
    return factory


EXIT_FACTORY = 3  # the user's MODULE:FACTORY raised
EXIT_NO_GPU = 4  # profile: JAX sees no GPU here, so there is nothing to measure


class FactoryError(Exception):
    """The user's factory raised: the CLI prints its traceback and exits EXIT_FACTORY."""

    def __init__(self, spec: str, error: BaseException):
        self.spec, self.error = spec, error
        super().__init__(
            f"{spec} raised {type(error).__name__}: {error}\nWhy: the command calls your "
            "factory to build the step and its example arguments, and it failed (its traceback "
            "is above; nothing was planned).\nFix: run it on its own, e.g. python -c "
            f'"import {spec.partition(":")[0]} as m; m.{spec.partition(":")[2]}()", and fix it.'
        )


def call_factory(spec: str, factory, *args):
    """``factory(*args)``; any exception of the user's code becomes a FactoryError."""
    try:
        return factory(*args)
    except Exception as e:  # noqa: BLE001  (the user's code)
        raise FactoryError(spec, e) from e


def _load_factory(spec: str):
    """Import ``MODULE:FACTORY`` and call it; check it returned ``(step_fn, example_args)``."""
    from planner._src.errors import (
        InvalidArgumentError,
    )  # deferred: --help answers without importing JAX

    made = call_factory(spec, import_factory(spec, "(step_fn, example_args)"))
    if not (isinstance(made, tuple) and len(made) == 2 and callable(made[0])):
        raise InvalidArgumentError(
            f"{spec} returned {type(made).__name__}; it must return (step_fn, example_args) "
            "with example_args a tuple of the step's arguments."
        )
    step, args = made
    return step, tuple(args)


def _gb(text: str) -> float:
    """One ``--hbm-gb`` figure: a number of GB. ``80GB``, ``80 GiB``, ``auto`` and the like
    get an argparse error that says what to write instead."""
    t = text.strip()
    try:
        return float(t)
    except ValueError:
        pass
    num = t.rstrip("BbIiGgMmTtKk ")
    unit = t[len(num) :].strip()
    if t.lower() == "auto":
        fix = (
            "solve plans one budget: give it in GB, e.g. --hbm-gb 80; "
            "'pareto --hbm-gb auto' spans the budgets from full remat to saving everything"
        )
    elif num and unit:
        try:
            value = float(num)
        except ValueError:
            fix = "give a number of GB, e.g. --hbm-gb 80"
        else:
            if unit.lower() == "gb":
                fix = f"--hbm-gb is in GB already: write --hbm-gb {value:g}"
            else:
                fix = (
                    f"--hbm-gb takes GB (10^9 bytes), without a unit: convert {t} to GB "
                    "(e.g. 80GiB is --hbm-gb 85.9, 500MB is --hbm-gb 0.5)"
                )
    else:
        fix = "give a number of GB per device, e.g. --hbm-gb 80"
    raise argparse.ArgumentTypeError(f"{text!r} is not a number of GB.\nFix: {fix}.")


def _budgets(text: str) -> list[float]:
    """``"10,20,30"`` -> ``[10.0, 20.0, 30.0]``; ``"auto"`` -> None (the planner spans the
    range); a teaching error for anything else."""
    from planner._src.errors import (
        InvalidArgumentError,
    )  # deferred: --help answers without importing JAX

    if text.strip().lower() == "auto":
        return None
    try:
        out = [_gb(x) for x in text.split(",") if x.strip()]
    except argparse.ArgumentTypeError as e:
        if any(c.isdigit() for c in text):  # "80GB,100GB": say what to write
            raise InvalidArgumentError(f"--hbm-gb {e}") from None
        out = []
    if not out:
        raise InvalidArgumentError(
            f"--hbm-gb {text!r} is not a comma-separated list of budgets in GB.\n"
            "Fix: e.g. --hbm-gb 60,80,100, or --hbm-gb auto for five budgets from full remat "
            "to saving everything."
        )
    return out


def _image_path(path: str | None, suffixes: tuple[str, ...], flag: str) -> str | None:
    """Check an image path before any slow work, so a typo fails in a second, not a minute."""
    from planner._src.errors import (
        InvalidArgumentError,
    )  # deferred: --help answers without importing JAX

    if path is not None and not path.lower().endswith(suffixes):
        raise InvalidArgumentError(
            f"{flag} {path!r} must end with {' or '.join(suffixes)}: "
            "the suffix picks the image format.\n"
            f"Fix: e.g. {flag} plot{suffixes[0]}."
        )
    return path


class _Progress:
    """Progress messages on stderr: a rich spinner on a terminal, plain lines otherwise."""

    def __init__(self, quiet: bool):
        self.quiet = quiet
        self._status = None

    def __enter__(self):
        if not self.quiet and sys.stderr.isatty():
            from rich.console import Console

            self._status = Console(stderr=True).status("starting ...")
            self._status.__enter__()
        return self

    def __exit__(self, *exc):
        if self._status is not None:
            self._status.__exit__(*exc)
        return False

    def __call__(self, message: str) -> None:
        if self.quiet:
            return
        if self._status is not None:
            self._status.update(message + " ...")
        else:
            print(f"[planner] {message} ...", file=sys.stderr, flush=True)


def _emit(text: str, out: str | None = None) -> None:
    """Print ``text`` on stdout and, with ``--out``, also write it to that file."""
    print(text if text.endswith("\n") else text + "\n", end="")
    if out:
        Path(out).write_text(text)


# ------------------------------------------------------------------------------ commands


def _cmd_solve(a) -> int:
    import planner  # deferred: --help answers without importing JAX
    from planner._src.results.planfile import (
        check_writable,
    )  # deferred: --help answers without importing JAX

    _image_path(a.timeline, (".png", ".svg"), "--timeline")
    # Every output path is checked before the solve, so a typo costs a second, not a solve.
    if a.save:
        check_writable(a.save)
    if a.out:
        check_writable(a.out, "the report file")
    if a.timeline:
        check_writable(a.timeline, "the timeline")
    step, args = _load_factory(a.factory)
    with _Progress(a.quiet) as progress:
        progress(f"planning {a.factory} for {a.hardware} under {a.hbm_gb:g} GB")
        plan = planner.solve(
            step,
            *args,
            hbm_gb=a.hbm_gb,
            hardware=a.hardware,
            allow_offload=False if a.no_offload else None,
            solver_time_limit_s=a.time_limit,
            progress=progress,
            layer_groups=_LAYER_GROUPS[a.layer_groups],
            opt_state_argnum=a.opt_state_argnum,
            params_argnum=a.params_argnum,
            stream_params=a.stream_params,
        )
        if a.timeline:
            from planner._src.results.plots import (
                hbm_timeline,
            )  # deferred: --help answers without importing JAX

            progress(f"drawing the memory timeline to {a.timeline}")
            hbm_timeline(plan, a.timeline)
    # the report first: never lost; its snippets load the plan from --save's path
    _emit(plan.report("json" if a.json else a.format, plan_file=a.save), a.out)
    if a.save:
        plan.save(a.save)  # a PlanFileError here still leaves the report printed (exit 2)
        print(
            f"[planner] plan saved to {a.save}; load it with planner.load_plan({a.save!r})",
            file=sys.stderr,
        )
    return 0 if plan.verification.ok else 1


def _cmd_maxtext(a) -> int:
    import os

    from planner._src.errors import (
        InvalidArgumentError,
    )  # deferred: --help answers without importing JAX

    config, overrides = None, []
    for i, item in enumerate(a.args):
        if i == 0 and "=" not in item:
            config = item
        elif "=" in item:
            overrides.append(item)
        else:
            raise InvalidArgumentError(
                f"{item!r} is neither the config file (first, without '=') nor key=value.\n"
                "Fix: python -m planner maxtext [CONFIG.yml] key=value ... --hbm-gb N"
            )
    if a.host_devices:
        # XLA reads it when the CPU backend starts, which has not happened yet in this process.
        flag = f"--xla_force_host_platform_device_count={a.host_devices}"
        os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {flag}".strip()
    import contextlib

    from planner._src.maxtext import plan_maxtext  # deferred: --help answers without importing JAX

    # MaxText prints to stdout as it imports and configures; stdout is the report's.
    with _Progress(a.quiet) as progress, contextlib.redirect_stdout(sys.stderr):
        progress(f"planning MaxText {config or 'base.yml'} for {a.hardware}")
        mt = plan_maxtext(
            config,
            overrides,
            hbm_gb=a.hbm_gb,
            hardware=a.hardware,
            verify=not a.no_verify,
            progress=progress,
            allow_offload=False if a.no_offload else None,
            solver_time_limit_s=a.time_limit,
        )
    _emit(mt.report("json" if a.json else a.format), a.out)
    return 0 if (mt.ok or a.no_verify) and mt.plan.verification.ok else 1


def _cmd_report(a) -> int:
    import planner  # deferred: --help answers without importing JAX

    saved = planner.load_plan(a.plan)
    _emit(saved.report("json" if a.json else a.format), a.out)
    return 0


def _pareto_rows(results, budgets) -> list[dict]:
    """One row per budget: the plan's predicted figures, or why no plan fits."""
    rows = []
    for b, r in zip(budgets, results):
        if isinstance(r, Exception):
            rows.append(
                {"budget_gb": b, "feasible": False, "status": type(r).__name__, "error": str(r)}
            )
            continue
        v = r.verification
        rows.append(
            {
                "budget_gb": b,
                "feasible": True,
                "status": v.status,
                "choice": r.choice,
                "predicted_peak_gb": r.prediction.peak_bytes / GB,
                "host_gb": r.prediction.host_bytes / GB,
                "step_ms": r.prediction.step_s * 1e3,
                "compiled_gb": None
                if v.compiled_device_bytes is None
                else v.compiled_device_bytes / GB,
                "decisions": dict(sorted(r.decisions().items())),
            }
        )
    return rows


def _stock_rows(results) -> list[dict]:
    plan = next((r for r in results if not isinstance(r, Exception)), None)
    if plan is None:
        return []
    return [
        {
            "name": b.name,
            "predicted_peak_gb": b.prediction.peak_bytes / GB,
            "host_gb": b.prediction.host_bytes / GB,
            "step_ms": b.prediction.step_s * 1e3,
            "applicable": b.applicable,
        }
        for b in plan.baselines
    ]


def _gbcol(gb: float) -> str:
    """A figure of a GB column: three decimals, three significant digits below 0.1 GB, so a
    small model does not read 0.000."""
    return f"{gb:.3f}" if gb >= 0.1 or not gb else f"{gb:.3g}"


def _pareto_table(rows, stock) -> str:
    """The pareto rows and stock policies as two rich tables, plain text."""
    from rich.table import Table

    from planner._src.results.report.text import (
        text_console,
    )  # deferred: --help answers without importing JAX

    con = text_console(120)
    t = Table(title="Planner: predicted peak and step time per budget")
    for col in ("budget GB", "predicted peak GB", "host GB", "step ms", "compiled GB", "status"):
        t.add_column(col, overflow="fold")
    for r in rows:
        if not r["feasible"]:
            t.add_row(
                f"{r['budget_gb']:g}",
                "-",
                "-",
                "-",
                "-",
                "INFEASIBLE: " + r["error"].splitlines()[0],
            )
            continue
        comp = "-" if r["compiled_gb"] is None else _gbcol(r["compiled_gb"])
        t.add_row(
            f"{r['budget_gb']:g}",
            _gbcol(r["predicted_peak_gb"]),
            _gbcol(r["host_gb"]),
            f"{r['step_ms']:.2f}",
            comp,
            r["status"],
        )
    con.print(t)
    if stock:
        s = Table(title="Same model, stock policies (predicted)")
        for col in ("policy", "peak GB", "host GB", "step ms"):
            s.add_column(col)
        for x in stock:
            if x["applicable"]:
                s.add_row(
                    x["name"],
                    _gbcol(x["predicted_peak_gb"]),
                    _gbcol(x["host_gb"]),
                    f"{x['step_ms']:.2f}",
                )
        con.print(s)
    return con.file.getvalue()


def _cmd_pareto(a) -> int:
    import planner  # deferred: --help answers without importing JAX

    budgets = _budgets(a.hbm_gb)
    _image_path(a.png, (".png",), "--png")
    _image_path(a.svg, (".svg",), "--svg")
    from planner._src.results.planfile import (
        check_writable,
    )  # deferred: --help answers without importing JAX

    for path, what in ((a.png, "the curve"), (a.svg, "the curve"), (a.out, "the table file")):
        if path:
            check_writable(path, what)  # before the solves, as for solve's outputs
    step, args = _load_factory(a.factory)
    with _Progress(a.quiet) as progress:
        progress(
            f"planning {a.factory} for {a.hardware} under "
            + (f"{len(budgets)} budgets" if budgets else "budgets spanning the range")
        )
        results = planner.pareto(
            step,
            *args,
            hbm_gb=budgets,
            hardware=a.hardware,
            allow_offload=False if a.no_offload else None,
            solver_time_limit_s=a.time_limit,
            verify_compile=not a.no_verify,
            progress=progress,
            layer_groups=_LAYER_GROUPS[a.layer_groups],
        )
        if budgets is None:  # auto: every budget is above full remat's, so each is a plan
            budgets = [getattr(r, "budget_bytes", math.nan) / 1e9 for r in results]
        for path in (a.png, a.svg):
            if path:
                from planner._src.results.plots import (
                    pareto_curve,
                )  # deferred: --help answers without importing JAX

                progress(f"drawing the curve to {path}")
                pareto_curve(results, path, budgets_gb=budgets)
    rows, stock = _pareto_rows(results, budgets), _stock_rows(results)
    verified = not a.no_verify
    if a.json:
        data = {"budgets": rows, "stock_policies": stock, "verified": verified}
        _emit(json.dumps(data, indent=2), a.out)
    else:
        note = (
            ""
            if verified
            else "not verified (--no-verify): no plan was compiled; every figure is the cost "
            "model's\n"
        )
        _emit(_pareto_table(rows, stock) + note, a.out)
    return 0 if any(r["feasible"] for r in rows) else 1


def _profile_summary(profile, out: str | None) -> str:
    """The figures calibrate measures, one per line, in the units of datasheets."""
    link = profile.link
    rates = ", ".join(f"{k} {v / 1e12:.3g} TFLOP/s" for k, v in profile.matmul_flops_per_s)
    lines = [
        f"profile {profile.name}: {profile.description}",
        f"  matmul: {rates}",
        f"  vector: {profile.vector_flops_per_s / 1e12:.3g} TFLOP/s",
        f"  HBM: {profile.hbm_bytes_per_s / 1e9:.3g} GB/s",
        f"  kernel launch: {profile.kernel_launch_s * 1e6:.3g} us",
        f"  host link: d2h {link.d2h_bytes_per_s / 1e9:.3g} GB/s, h2d "
        f"{link.h2d_bytes_per_s / 1e9:.3g} GB/s",
        f"  overlap efficiency: {profile.overlap_efficiency:.2f}",
    ]
    for d in ("d2h", "h2d"):  # the calibrated per-direction hiding models, where measured
        h = getattr(link, f"{d}_hiding", None)
        if h is not None:
            cap = "none" if h.capacity_s == float("inf") else f"{h.capacity_s * 1e3:.3g} ms"
            lines.append(
                f"  {d} hiding ({h.form}): eta {h.eta:.3f}, capacity {cap} per trip, "
                f"floor {h.floor:.2f}"
            )
    if out:
        lines.append(f"written to {out}; plan with it: --hardware {out}")
    return "\n".join(lines) + "\n"


def _cmd_calibrate(a) -> int:
    import cost_models as cm  # deferred: --help answers without importing JAX

    with _Progress(a.quiet) as progress:
        progress("measuring the default JAX device (matmuls, memory, host link)")
        profile = cm.calibrate(
            out_path=a.out,
            base=a.base,
            sizes_mb=tuple(a.sizes_mb),
            repeats=a.repeats,
            matmul_n=a.matmul_n,
        )
    if a.json:
        print(json.dumps(profile.to_json(), indent=2))
    else:
        print(_profile_summary(profile, a.out), end="")
    return 0


# ------------------------------------------------------------------------------ throughput


def _ints(text: str, flag: str) -> tuple[int, ...] | None:
    from planner._src.errors import (
        InvalidArgumentError,
    )  # deferred: --help answers without importing JAX

    if text is None:
        return None
    try:
        out = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        out = ()
    if not out or min(out) < 1:
        raise InvalidArgumentError(
            f"{flag} {text!r} is not a comma-separated list of positive ints.\nFix: e.g. "
            f"{flag} 1,2,4,8."
        )
    return out


def _cmd_throughput(a) -> int:
    from planner._src.results.planfile import (
        check_writable,
    )  # deferred: --help answers without importing JAX
    from planner._src.throughput import (
        maximize_throughput,
    )  # deferred: --help answers without importing JAX

    for path, suffixes, flag in ((a.png, (".png",), "--png"), (a.svg, (".svg",), "--svg")):
        _image_path(path, suffixes, flag)
    for path, what in ((a.png, "the plot"), (a.svg, "the plot"), (a.out, "the report file")):
        if path:
            check_writable(path, what)  # before the compiles
    if a.save:
        check_writable(a.save, "the plan file")
    factory = import_factory(a.factory, "(step_fn, example_args) for a batch size")

    def make_step(batch_size):
        return call_factory(a.factory, factory, batch_size)

    fmt = "json" if a.json else a.format
    with _Progress(a.quiet) as progress:
        progress(
            f"planning {a.factory} for throughput on {a.hardware} under {a.hbm_gb:g} GB "
            "(one trace per batch size)"
        )
        result = maximize_throughput(
            make_step,
            hbm_gb=a.hbm_gb,
            hardware=a.hardware,
            batch_sizes=_ints(a.batch_sizes, "--batch-sizes"),
            global_batch=a.global_batch,
            microbatches=_ints(a.microbatches, "--microbatches"),
            tokens_per_example=a.tokens_per_example,
            stock=tuple(x for x in a.stock.split(",") if x) if a.stock else None,
            max_batch_size=a.max_batch_size,
            allow_offload=False if a.no_offload else None,
            solver_time_limit_s=a.time_limit,
            layer_groups=_LAYER_GROUPS[a.layer_groups],
            progress=progress,
        )
        for path in (a.png, a.svg):
            if path:
                progress(f"drawing tokens/s against batch size to {path}")
                result.plot(path)
        if a.save:
            progress(f"writing the chosen plan to {a.save}")
            result.plan.save(a.save)
    _emit(result.report(fmt), a.out)
    return 0 if result.plan.verification.ok else 1


# ------------------------------------------------------------------------------ parser

# ------------------------------------------------------------------------------ profile


def _profile_arguments(p) -> None:
    """Arguments of the ``profile`` subcommand."""
    p.add_argument(
        "factory",
        help="MODULE:FACTORY; FACTORY(policy) returns (step_fn, args) "
        "with the step built with that policy and concrete args, e.g. "
        "examples.llama:profile_quickstart",
    )
    p.add_argument("--hbm-gb", type=_gb, help="plan at this budget (or give --plan)")
    p.add_argument("--plan", help="a plan file written by plan.save() instead of planning")
    p.add_argument("--hardware", default="h200", help=_hardware_help() + " (default h200)")
    p.add_argument("--steps", type=int, default=5, help="steps to profile (default 5)")
    p.add_argument(
        "--warmup",
        type=int,
        default=1,
        help="steps run before profiling, not measured (compile, caches; default 1)",
    )
    p.add_argument("--logdir", help="trace directory (default: a new temporary one)")
    p.add_argument("--png", help="write the timeline of step 0 here")
    p.add_argument("--json", action="store_true", help="the result as JSON on stdout")
    p.add_argument("--out", help="also write the result as JSON to this file")
    p.add_argument(
        "--measured-profile",
        help="write the hardware profile with the measured "
        "overlap_efficiency here (cost_models.overlap_from_trace)",
    )


def _cmd_profile(a) -> int:
    """Run the ``profile`` subcommand: 0 measured, 1 nothing measured (no host copies in
    the trace), EXIT_NO_GPU where JAX sees no GPU (checked before planning).

    Planner errors propagate (``python -m planner`` prints them and exits 2)."""
    import json
    import sys

    import planner  # deferred: --help answers without importing JAX
    from planner._src.errors import (
        InvalidArgumentError,
    )  # deferred: --help answers without importing JAX

    if (a.hbm_gb is None) == (a.plan is None):
        raise InvalidArgumentError(
            "give exactly one of --hbm-gb N (plan now) or --plan FILE "
            "(a saved plan).\nFix: e.g. --hbm-gb 0.42."
        )
    no_gpu = _no_gpu(a)
    if no_gpu:  # before planning: minutes of work whose profile would measure nothing
        print(no_gpu, file=sys.stderr)
        return EXIT_NO_GPU
    factory = import_factory(
        a.factory, "FACTORY(policy) -> (step_fn, args), e.g. examples.llama:profile_quickstart"
    )
    if a.plan:
        plan = planner.load_plan(a.plan)
    else:
        step0, args0 = call_factory(a.factory, factory, None)
        print(f"planning {a.factory} for {a.hardware} under {a.hbm_gb} GB ...", file=sys.stderr)
        plan = planner.solve(step0, *args0, hbm_gb=a.hbm_gb, hardware=a.hardware)
    step, args = call_factory(a.factory, factory, plan.policy)
    print(f"profiling {a.steps} steps ...", file=sys.stderr)
    result = planner.profile(plan, step, *args, steps=a.steps, warmup=a.warmup, logdir=a.logdir)
    data = result.to_json()
    print(json.dumps(data, indent=2) if a.json else result.summary())
    if a.out:
        with open(a.out, "w") as f:
            json.dump(data, f, indent=2)
    if result.measured and a.png:
        result.timeline_png(a.png)
    if result.measured and a.measured_profile:
        from cost_models._trace_overlap import (
            overlap_from_trace,
        )  # deferred: --help answers without importing JAX

        hw = getattr(plan, "hardware", None)
        hw = overlap_from_trace(result, hw if hw is not None else a.hardware)
        with open(a.measured_profile, "w") as f:
            json.dump(hw.to_json(), f, indent=2)
    return 0 if result.measured else 1


def _no_gpu(a) -> str:
    """The error ``profile`` prints where JAX sees no GPU ("" where it sees one)."""
    import jax

    backend = jax.default_backend()
    if backend != "cpu":
        return ""
    devices = ", ".join(str(d) for d in jax.devices()[:4])
    hardware = a.hardware if a.hardware != "cpu" else "h200"  # a GPU's profile
    return (
        f"error: nothing to profile here: JAX on this machine runs on the {backend} backend "
        f"({devices}), with no GPU; nothing was planned or run.\n"
        "Why: profile measures a GPU: how long the plan's device<->host copies take and how "
        "much of them the GPU's compute hides. The CPU backend has no separate host memory or "
        "copy engines, so there is nothing to measure.\n"
        "Fix: run the same command on the GPU machine (python -c 'import jax; "
        "print(jax.devices())' should list the GPUs; if it lists only CPUs there, install "
        'JAX\'s CUDA plugin: pip install -U "jax[cuda13]"); or, to plan here without '
        f"measuring, use a shipped profile of that GPU: python -m planner solve {a.factory} "
        f"--hbm-gb {'N' if a.hbm_gb is None else f'{a.hbm_gb:g}'} --hardware {hardware} "
        f"(profiles: {', '.join(profile_names())})."
    )


def profile_names() -> tuple[str, ...]:
    """The bundled hardware profiles (cost_models/profiles/*.json), found without importing
    cost_models (which imports JAX): ``--help`` stays fast."""
    import importlib.util

    spec = importlib.util.find_spec("cost_models")
    dirs = list(spec.submodule_search_locations or []) if spec else []
    return tuple(sorted(p.stem for d in dirs for p in (Path(d) / "profiles").glob("*.json")))


def _hardware_help() -> str:
    names = ", ".join(profile_names()) or "see cost_models/profiles"
    return f"hardware profile: one of {names}; or a profile JSON file (calibrate --out)"


def _common(p, planning: bool = False) -> None:
    p.add_argument("--json", action="store_true", help="machine-readable JSON on stdout")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress messages on stderr")
    if planning:
        p.add_argument("factory", help="MODULE:FACTORY returning (step_fn, example_args)")
        p.add_argument("--hardware", default="h200", help=_hardware_help() + " (default h200)")
        p.add_argument("--no-offload", action="store_true", help="never offload to host memory")
        p.add_argument(
            "--time-limit",
            type=float,
            default=30.0,
            help="CP-SAT deterministic seconds per solver phase (4 phases per solve)",
        )
        p.add_argument(
            "--layer-groups",
            choices=tuple(_LAYER_GROUPS),
            default="auto",
            help="decide each checkpoint call site (layer group) separately: auto "
            "(when the model predicts a gain), on, off",
        )


_LAYER_GROUPS = {"auto": None, "on": True, "off": False}


def _version() -> str:
    from planner._version import __version__  # deferred: the package's own line, no JAX import

    return __version__


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m planner",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = ap.add_subparsers(dest="cmd", required=True)

    s = sub.add_parser("solve", help="plan a train step under an HBM budget")
    _common(s, planning=True)
    s.add_argument("--hbm-gb", type=_gb, required=True, help="budget per device, GB (1e9 bytes)")
    s.add_argument(
        "--format",
        choices=("text", "markdown", "json"),
        default="text",
        help="the report as text (as printed; default), markdown or json",
    )
    s.add_argument("--out", help="also write the report to this file")
    s.add_argument("--save", metavar="PLAN.json", help="write the plan file (planner.load_plan)")
    s.add_argument("--timeline", metavar="FILE", help="draw the HBM timeline (.png or .svg)")
    s.add_argument(
        "--opt-state-argnum",
        type=int,
        metavar="N",
        help="the step's argument N is the optimizer state: also decide which of its leaves "
        "live in pinned host memory (the report shows the budget split and what to apply)",
    )
    s.add_argument(
        "--params-argnum",
        type=int,
        metavar="N",
        help="with --opt-state-argnum: the step's argument N is the parameters (budget split)",
    )
    s.add_argument(
        "--stream-params",
        action="store_true",
        help="with --params-argnum: your step streams its stacked layer parameters "
        "(plan.state.stream_layer_params), so the plan may put them in pinned host memory",
    )
    s.set_defaults(run=_cmd_solve)

    r = sub.add_parser("report", help="print the report of a saved plan file")
    _common(r)
    r.add_argument("plan", help="a plan file written by solve --save or plan.save()")
    r.add_argument(
        "--format",
        choices=("text", "markdown", "json"),
        default="text",
        help="the report as text (as printed; default), markdown or json",
    )
    r.add_argument("--out", help="also write the report to this file")
    r.set_defaults(run=_cmd_report)

    p = sub.add_parser("pareto", help="plan several budgets from one trace; table and plot")
    _common(p, planning=True)
    p.add_argument(
        "--hbm-gb",
        required=True,
        help="budgets in GB, comma-separated: 60,80,100; or 'auto': five budgets from "
        "just above full remat's predicted peak to saving everything's",
    )
    p.add_argument(
        "--no-verify",
        action="store_true",
        help="skip compiling each plan (faster; every status then says 'not "
        "compiled' and the stock policies are compared by the model only)",
    )
    p.add_argument("--png", metavar="FILE", help="draw step time against budget as PNG")
    p.add_argument("--svg", metavar="FILE", help="draw step time against budget as SVG")
    p.add_argument("--out", help="also write the table (or JSON) to this file")
    p.set_defaults(run=_cmd_pareto)

    t = sub.add_parser(
        "throughput",
        help="choose the batch size (or micro-batches) and the plan for the most tokens/s",
    )
    _common(t, planning=True)
    t.add_argument("--hbm-gb", type=_gb, required=True, help="budget per device, GB (1e9 bytes)")
    t.add_argument(
        "--batch-sizes",
        help="the batch sizes to plan, comma-separated (default: searched from 1 up to where "
        "nothing fits: doubling, then bisection, per policy)",
    )
    t.add_argument(
        "--global-batch", type=int, help="a fixed global batch to split into micro-batches"
    )
    t.add_argument(
        "--microbatches",
        help="micro-batch counts to try with --global-batch, comma-separated (default "
        "1,2,4,8,16); FACTORY(m) then builds the step of one micro-batch of m examples",
    )
    t.add_argument(
        "--tokens-per-example",
        type=int,
        help="tokens per example (default: the sequence length of the example batch, when "
        "there is exactly one)",
    )
    t.add_argument("--stock", help="stock policies to compare, comma-separated (default: all)")
    t.add_argument("--max-batch-size", type=int, default=1 << 16, help="the search's ceiling")
    t.add_argument(
        "--format",
        choices=("text", "markdown", "json"),
        default="text",
        help="the report as text (default), markdown or json",
    )
    t.add_argument("--png", metavar="FILE", help="draw tokens/s against batch size as PNG")
    t.add_argument("--svg", metavar="FILE", help="draw tokens/s against batch size as SVG")
    t.add_argument("--save", metavar="PLAN.json", help="write the chosen plan file")
    t.add_argument("--out", help="also write the report to this file")
    t.set_defaults(run=_cmd_throughput)

    m = sub.add_parser(
        "maxtext",
        help="plan MaxText's own train step from its config; print the remat_policy=custom "
        "overrides, verified through MaxText's config (needs .[maxtext])",
    )
    m.add_argument("--json", action="store_true", help="machine-readable JSON on stdout")
    m.add_argument("-q", "--quiet", action="store_true", help="no progress messages on stderr")
    m.add_argument(
        "args",
        nargs="*",
        metavar="[CONFIG.yml] key=value",
        help="a MaxText config (default: its configs/base.yml), then MaxText overrides",
    )
    m.add_argument(
        "--hbm-gb",
        type=_gb,
        default=None,
        help="budget per device, GB; on a GPU capped by XLA_PYTHON_CLIENT_MEM_FRACTION x HBM "
        "(default: that share)",
    )
    m.add_argument("--hardware", default="h200", help=_hardware_help() + " (default h200)")
    m.add_argument("--no-offload", action="store_true", help="never offload to host memory")
    m.add_argument(
        "--time-limit", type=float, default=30.0, help="CP-SAT deterministic seconds per phase"
    )
    m.add_argument(
        "--host-devices",
        type=int,
        default=0,
        help="CPU devices for MaxText's mesh (XLA_FLAGS=--xla_force_host_platform_device_count)",
    )
    m.add_argument(
        "--no-verify", action="store_true", help="skip MaxText's own compile of the overrides"
    )
    m.add_argument(
        "--format", choices=("text", "markdown", "json"), default="text", help="report format"
    )
    m.add_argument("--out", help="also write the report to this file")
    m.set_defaults(run=_cmd_maxtext)

    c = sub.add_parser("calibrate", help="measure this machine's device into a hardware profile")
    _common(c)
    c.add_argument("--out", help="write the measured profile JSON here (use it as --hardware)")
    c.add_argument("--base", help="profile to start from (default: matched to the device)")
    c.add_argument(
        "--sizes-mb",
        type=float,
        nargs="+",
        default=[256, 1024],
        help="host-copy sizes in MiB (bandwidth from the largest)",
    )
    c.add_argument("--repeats", type=int, default=5, help="timings per figure (median)")
    c.add_argument("--matmul-n", type=int, help="matmul size (default 8192 on GPU, 512 on CPU)")
    c.set_defaults(run=_cmd_calibrate)
    q = sub.add_parser(
        "profile",
        help="run a plan under the profiler on a GPU; measure exposed host-copy time "
        "(no GPU: exit 4)",
    )
    _profile_arguments(q)
    q.set_defaults(run=_cmd_profile)
    return ap


def main(argv=None) -> int:
    """Run one command; return the exit status (0 ok, 1 plan failed checks, 2 error, 3 the
    factory raised: the module docstring says which is which)."""
    try:
        a = _parser().parse_args(argv)
    except SystemExit as e:  # --help, --version, or a usage error argparse already printed
        return e.code if isinstance(e.code, int) else 2
    import cost_models as cm  # deferred: JAX only now, --help and --version answer without it
    import planner  # deferred: --help answers without importing JAX

    try:
        return a.run(a)
    except FactoryError as e:  # the user's code: its traceback, then what to check
        import traceback

        traceback.print_exception(e.error, file=sys.stderr)
        print(f"error: {e}", file=sys.stderr)
        return EXIT_FACTORY
    except (planner.PlannerError, cm.ProfileError, cm.CalibrationError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except ImportError as e:  # an optional dependency (matplotlib for plots); says the fix
        print(f"error: {e}", file=sys.stderr)
        return 2
    except OSError as e:  # a file that cannot be written or read
        print(
            f"error: {e.strerror or e}: {e.filename}.\nFix: check the path and its "
            "directory's permissions.",
            file=sys.stderr,
        )
        return 2


if __name__ == "__main__":
    sys.exit(main())
