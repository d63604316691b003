"""jax-offload-planner: choose save / remat / offload for every activation of a JAX train step.

    import planner
    plan = planner.solve(train_step, state, batch, hbm_gb=80, hardware="h200")
    print(plan.report())
    layer = jax.checkpoint(layer, policy=plan.policy)

    session = planner.Planner(train_step, state, batch, hardware="h200")   # trace once
    plans = session.pareto(hbm_gb=[60, 80, 100])                           # plan many
    best = planner.maximize_throughput(make_step, hbm_gb=80, hardware="h200")  # batch + plan

Everything below is the public API; the modules under ``planner._src`` are private.
"""

import importlib

from planner._version import __version__ as __version__

# Public name -> (module, attribute). Imported on first use (PEP 562), so that
# ``python -m planner --help`` and ``--version`` answer without importing JAX.
_PUBLIC = {
    "HardwareProfile": ("cost_models", "HardwareProfile"),
    "list_profiles": ("cost_models", "list_profiles"),
    "load_profile": ("cost_models", "load_profile"),
    "PlannerPolicy": ("planner._src.emit.emit", "PlannerPolicy"),
    **{
        name: ("planner._src.errors", name)
        for name in (
            "InfeasibleBudgetError",
            "InvalidArgumentError",
            "LayerGroupsError",
            "NoCheckpointRegionError",
            "PlanFileError",
            "PlannerError",
            "SolverError",
            "TraceError",
            "UnsupportedError",
        )
    },
    "MaxTextPlan": ("planner._src.planning.maxtext", "MaxTextPlan"),
    "MaxTextPlanner": ("planner._src.planning.maxtext", "MaxTextPlanner"),
    "plan_maxtext": ("planner._src.planning.maxtext", "plan_maxtext"),
    "NumericsResult": ("planner._src.verify.numerics.check", "NumericsResult"),
    "check_numerics": ("planner._src.verify.numerics.check", "check_numerics"),
    "PlanOptions": ("planner._src.options", "PlanOptions"),
    "paste_snippets": ("planner._src.emit.paste", "paste_snippets"),
    "Plan": ("planner._src.results.plan", "Plan"),
    "PlanWarning": ("planner._src.errors", "PlanWarning"),
    "SavedPlan": ("planner._src.results.planfile", "SavedPlan"),
    "load_plan": ("planner._src.results.planfile", "load"),
    "hbm_timeline": ("planner._src.results.plots", "hbm_timeline"),
    "pareto_curve": ("planner._src.results.plots", "pareto_curve"),
    "ProfileResult": ("planner._src.profiling", "ProfileResult"),
    "profile": ("planner._src.profiling", "profile"),
    **{
        name: ("planner._src.trainstate", name)
        for name in ("param_shardings", "stream_layer_params", "streamed_apply_updates")
    },
    "Planner": ("planner._src.planning.planner", "Planner"),
    "pareto": ("planner._src.planning.planner", "pareto"),
    "solve": ("planner._src.planning.planner", "solve"),
    **{
        name: ("planner._src.trainstate", name)
        for name in (
            "PlanState",
            "StatePlacement",
            "budget_split",
            "check_compiled",
            "placement_of",
            "state_leaves",
            "state_shardings",
            "streamed_apply",
            "streamed_update",
        )
    },
    "with_state": ("planner._src.cost.state", "with_state"),
    "StatePlan": ("planner._src.planning.state_placement", "StatePlan"),
    "plan_state": ("planner._src.planning.state_placement", "plan_state"),
    "ThroughputResult": ("planner._src.planning.throughput", "ThroughputResult"),
    "maximize_throughput": ("planner._src.planning.throughput", "maximize_throughput"),
    "throughput_curve": ("planner._src.results.plots", "throughput_curve"),
    "Assignment": ("planner._src.types", "Assignment"),
    "Prediction": ("planner._src.types", "Prediction"),
    "Verification": ("planner._src.types", "Verification"),
}

__all__ = sorted([*_PUBLIC, "__version__"])


def __getattr__(name: str):
    try:
        module, attr = _PUBLIC[name]
    except KeyError:
        raise AttributeError(f"module 'planner' has no attribute {name!r}") from None
    value = getattr(importlib.import_module(module), attr)
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__():
    return __all__
