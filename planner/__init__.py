"""jax-offload-planner: choose save / remat / offload for every activation of a JAX train step.

    import planner
    plan = planner.solve(train_step, state, batch, hbm_gb=80, hardware="h200")
    print(plan.report())
    layer = jax.checkpoint(layer, policy=plan.policy)

    session = planner.Planner(train_step, state, batch, hardware="h200")   # trace once
    plans = session.pareto(hbm_gb=[60, 80, 100])                           # plan many
    best = planner.maximize_throughput(make_step, hbm_gb=80, hardware="h200")  # batch + plan

The flat names are the verbs, the result types, the options and the errors; the rest of
the public API is in namespaces, imported on first use:

* ``planner.state``: the train state (``plan_state``, ``PlanState``, the shardings and the
  streamed update a step runs to apply a placement);
* ``planner.plots``: pictures of plans (``hbm_timeline``, ``pareto_curve``,
  ``throughput_curve``);
* ``planner.hardware``: hardware profiles (``load_profile``, ``list_profiles``,
  ``HardwareProfile``).

Everything else is private: the modules under ``planner._src`` may move.
"""

import importlib
import warnings

from planner._version import __version__ as __version__

# The flat names (verbs, result types, options, errors) -> (module, attribute). Imported on
# first use (PEP 562), so that ``python -m planner --help`` and ``--version`` answer without
# importing JAX.
_PUBLIC = {
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
    "ProfileResult": ("planner._src.profiling", "ProfileResult"),
    "profile": ("planner._src.profiling", "profile"),
    "Planner": ("planner._src.planning.planner", "Planner"),
    "pareto": ("planner._src.planning.planner", "pareto"),
    "solve": ("planner._src.planning.planner", "solve"),
    "ThroughputResult": ("planner._src.planning.throughput", "ThroughputResult"),
    "maximize_throughput": ("planner._src.planning.throughput", "maximize_throughput"),
    "Assignment": ("planner._src.types", "Assignment"),
    "Prediction": ("planner._src.types", "Prediction"),
    "Verification": ("planner._src.types", "Verification"),
}

# The namespaces (planner/state.py, plots.py, hardware.py), imported on first use too.
_NAMESPACES = ("hardware", "plots", "state")

# Flat names that moved into a namespace -> the namespace. Each still answers for one
# release, with a DeprecationWarning naming its new place; removing them is deleting this
# table (and its branch in __getattr__).
_MOVED = {
    **dict.fromkeys(("HardwareProfile", "list_profiles", "load_profile"), "hardware"),
    **dict.fromkeys(("hbm_timeline", "pareto_curve", "throughput_curve"), "plots"),
    **dict.fromkeys(
        (
            "PlanState",
            "StatePlacement",
            "StatePlan",
            "budget_split",
            "check_compiled",
            "param_shardings",
            "placement_of",
            "plan_state",
            "state_leaves",
            "state_shardings",
            "stream_layer_params",
            "streamed_apply",
            "streamed_apply_updates",
            "streamed_update",
            "with_state",
        ),
        "state",
    ),
}

__all__ = sorted([*_PUBLIC, *_NAMESPACES, "__version__"])


def __getattr__(name: str):
    if name in _NAMESPACES:
        return importlib.import_module(f"planner.{name}")  # the import binds it here too
    if name in _MOVED:
        new = f"planner.{_MOVED[name]}.{name}"
        warnings.warn(
            f"planner.{name} moved to {new}.\n"
            "Why: the flat names of planner are its verbs, result types, options and errors; "
            f"the rest is in namespaces (planner.{_MOVED[name]}), and the flat name goes in "
            "the next release.\n"
            f"Fix: use {new}.",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(importlib.import_module(f"planner.{_MOVED[name]}"), name)
    try:
        module, attr = _PUBLIC[name]
    except KeyError:
        raise AttributeError(f"module 'planner' has no attribute {name!r}") from None
    value = getattr(importlib.import_module(module), attr)
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__():
    return __all__
