"""The argument parser of ``python -m planner``: every command, its flags and their help
(docs/cli.md's reference is generated from it). Builds without importing JAX."""

from __future__ import annotations

import argparse

from planner._src import cli
from planner._src.cli.common import LAYER_GROUPS, parse_gb, profile_names
from planner._src.cli.maxtext import cmd_maxtext
from planner._src.cli.measure import cmd_calibrate, cmd_profile
from planner._src.cli.pareto import cmd_pareto
from planner._src.cli.solve import cmd_report, cmd_solve
from planner._src.cli.throughput import cmd_throughput


def _hardware_help() -> str:
    names = ", ".join(profile_names()) or "see cost_models/profiles"
    return (
        f"hardware profile: one of {names} (cpu: this machine, calibrated once and cached; "
        "cpu-made-up: the made-up test figures); or a profile JSON file (calibrate --out)"
    )


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
            choices=tuple(LAYER_GROUPS),
            default="auto",
            help="decide each checkpoint call site (layer group) separately: auto "
            "(when the model predicts a gain), on, off",
        )


def _version() -> str:
    from planner._version import __version__  # deferred: the package's own line, no JAX import

    return __version__


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m planner",
        description=cli.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = ap.add_subparsers(dest="cmd", required=True)

    s = sub.add_parser("solve", help="plan a train step under an HBM budget")
    _common(s, planning=True)
    s.add_argument(
        "--hbm-gb", type=parse_gb, required=True, help="budget per device, GB (1e9 bytes)"
    )
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
        "--opt-state",
        metavar="PATH",
        help="where the optimizer state is in the step's arguments: 'auto' (a Flax "
        "TrainState, an nnx.Optimizer's state, an optax state in a tuple) or a path such as "
        "'args[0].opt_state'; the plan also decides which of its leaves live in pinned host "
        "memory (the report shows the budget split and how plan.apply applies it)",
    )
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
        help="with --opt-state(-argnum): the step's argument N is the parameters (budget "
        "split; found beside the optimizer state where not given)",
    )
    s.add_argument(
        "--stream-params",
        action="store_true",
        help="with --params-argnum: your step streams its stacked layer parameters "
        "(plan.state.stream_layer_params), so the plan may put them in pinned host memory",
    )
    s.set_defaults(run=cmd_solve)

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
    r.set_defaults(run=cmd_report)

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
    p.set_defaults(run=cmd_pareto)

    t = sub.add_parser(
        "throughput",
        help="choose the batch size (or micro-batches) and the plan for the most tokens/s",
    )
    _common(t, planning=True)
    t.add_argument(
        "--hbm-gb", type=parse_gb, required=True, help="budget per device, GB (1e9 bytes)"
    )
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
    t.set_defaults(run=cmd_throughput)

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
        type=parse_gb,
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
    m.set_defaults(run=cmd_maxtext)

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
    c.set_defaults(run=cmd_calibrate)
    q = sub.add_parser(
        "profile",
        help="run a plan under the profiler on a GPU; measure exposed host-copy time "
        "(no GPU: exit 4)",
    )
    _profile_arguments(q)
    q.set_defaults(run=cmd_profile)
    return ap


def _profile_arguments(p) -> None:
    """Arguments of the ``profile`` subcommand."""
    p.add_argument(
        "factory",
        help="MODULE:FACTORY; FACTORY(policy) returns (step_fn, args) "
        "with the step built with that policy and concrete args, e.g. "
        "examples.llama:profile_quickstart",
    )
    p.add_argument("--hbm-gb", type=parse_gb, help="plan at this budget (or give --plan)")
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
