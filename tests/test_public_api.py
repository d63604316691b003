"""The public API's shape: the flat names of ``planner`` (verbs, result types, options,
errors), its namespaces (``planner.state``, ``planner.plots``, ``planner.hardware``) with
exactly the names they declare, the moved flat names still answering for one release with a
DeprecationWarning, and no use of a moved flat name left in the project's own code."""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import pytest

import planner

ROOT = Path(__file__).resolve().parents[1]

VERBS = {
    "Planner",
    "solve",
    "pareto",
    "maximize_throughput",
    "plan_maxtext",
    "MaxTextPlanner",
    "load_plan",
    "check_numerics",
    "profile",
    "paste_snippets",
}
RESULTS = {
    "Plan",
    "SavedPlan",
    "PlannerPolicy",
    "ThroughputResult",
    "MaxTextPlan",
    "NumericsResult",
    "ProfileResult",
    "Assignment",
    "Prediction",
    "Verification",
}
OPTIONS = {"PlanOptions"}
ERRORS = {
    "PlannerError",
    "InvalidArgumentError",
    "TraceError",
    "NoCheckpointRegionError",
    "InfeasibleBudgetError",
    "SolverError",
    "PlanFileError",
    "UnsupportedError",
    "LayerGroupsError",
    "PlanWarning",
}
NAMESPACES = {"state", "plots", "hardware"}


def test_dir_lists_the_verbs_results_options_errors_and_namespaces_only():
    assert set(dir(planner)) == VERBS | RESULTS | OPTIONS | ERRORS | NAMESPACES | {"__version__"}
    assert set(planner.__all__) == set(dir(planner))
    assert not set(planner.__all__) & set(planner._MOVED)


def test_every_flat_name_resolves_without_a_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for name in planner.__all__:
            assert getattr(planner, name) is not None, name


@pytest.mark.parametrize("namespace", sorted(NAMESPACES))
def test_a_namespace_holds_exactly_its_declared_names(namespace):
    module = getattr(planner, namespace)
    assert module.__name__ == f"planner.{namespace}"
    public = {n for n in vars(module) if not n.startswith("_")}
    assert public == set(module.__all__)
    assert module.__all__ == sorted(module.__all__)
    # What moved there from the flat namespace is what it declares.
    assert set(module.__all__) == {n for n, ns in planner._MOVED.items() if ns == namespace}
    for name in module.__all__:  # re-exports, each under its own name
        obj = getattr(module, name)
        assert obj.__module__.startswith(("planner._src.", "cost_models.")), name
        assert obj.__name__ == name


@pytest.mark.parametrize("name", sorted(planner._MOVED))
def test_a_moved_flat_name_warns_and_is_the_same_object(name):
    namespace = planner._MOVED[name]
    new = f"planner.{namespace}.{name}"
    with pytest.warns(DeprecationWarning, match=re.escape(f"planner.{name} moved to {new}")) as w:
        obj = getattr(planner, name)
    assert obj is getattr(getattr(planner, namespace), name)
    text = str(w[0].message)
    assert "Why:" in text and f"Fix: use {new}" in text
    assert w[0].filename == __file__  # points at the user's line
    with pytest.warns(DeprecationWarning):  # every use warns, not only the first
        getattr(planner, name)


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'no_such_name'"):
        planner.no_such_name  # noqa: B018


# -------------------------------------------------------------- our code uses the new names

# The project's own code and docs: the moved names are written with their namespace.
WHERE = ("README.md", "planner", "cost_models", "tests", "benchmarks", "examples", "docs")
SUFFIXES = {".py", ".md", ".ipynb", ".txt"}
EXCEPT = {"planner/__init__.py", "tests/test_public_api.py"}  # the shim and its test


def flat_uses(root: Path) -> list[str]:
    """``file:line name`` for each ``planner.<moved name>`` or ``from planner import <moved
    name>`` in the project's code and docs (benchmark results records are kept verbatim)."""
    moved = "|".join(sorted(planner._MOVED))
    pattern = re.compile(rf"\bplanner\.({moved})\b|\bfrom planner import [^\n]*\b({moved})\b")
    paths = []
    for place in WHERE:
        p = root / place
        paths += [p] if p.is_file() else sorted(q for q in p.rglob("*") if q.suffix in SUFFIXES)
    bad = []
    for p in paths:
        rel = p.relative_to(root)
        if str(rel) in EXCEPT or rel.parts[:2] == ("benchmarks", "results") or not p.is_file():
            continue
        for i, line in enumerate(p.read_text().splitlines(), 1):
            for m in pattern.finditer(line):
                bad.append(f"{rel}:{i} {m.group(0)}")
    return sorted(bad)


def test_the_project_uses_no_moved_flat_name():
    assert flat_uses(ROOT) == []


def test_the_check_finds_a_moved_flat_name(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "page.md").write_text(
        "planner.state.plan_state(s, 60)\nplanner.plan_state(s, 60)\n"
    )
    (tmp_path / "examples").mkdir()
    (tmp_path / "examples" / "x.py").write_text("from planner import solve, hbm_timeline\n")
    assert flat_uses(tmp_path) == [
        "docs/page.md:2 planner.plan_state",
        "examples/x.py:1 from planner import solve, hbm_timeline",
    ]
