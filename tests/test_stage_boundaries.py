"""The driver's boundaries: the planning steps take a typed context, never the Planner (the
train-state placement among them); the modules that plan with a Planner (``plan_state``,
throughput, MaxText, the CLI) use only its public, documented members."""

import ast
from pathlib import Path

import planner

SRC = Path(__file__).resolve().parents[1] / "planner" / "_src"
PLANNING = SRC / "planning"
# The steps of one budget and the services they use (planning/one_budget.py says the order).
STEPS = (
    "attempt",
    "choose",
    "context",
    "groups",
    "numerics_check",
    "one_budget",
    "probes",
    "refusal",
    "stock",
    "train_state",
    "walk",
)


def _package(name: str) -> list[Path]:
    """Every module of the planning package ``name`` (there are some)."""
    found = sorted((PLANNING / name).glob("*.py"))
    assert len(found) > 1, f"planning/{name}/ has no modules"
    return found


# Modules that plan with a Planner through its public members: every module of the
# throughput and MaxText packages.
USERS = (
    [PLANNING / "state_placement.py"]
    + _package("throughput")
    + _package("maxtext")
    + sorted((SRC / "cli").glob("*.py") if (SRC / "cli").is_dir() else [SRC / "cli.py"])
)


def _private_uses(path: Path) -> list[str]:
    """``x._y`` attribute uses in ``path`` where ``x`` is a name other than self / cls (a
    private member of another object), dunders aside."""
    tree = ast.parse(path.read_text())
    return [
        f"{path.name}:{n.lineno} {n.value.id}.{n.attr}"
        for n in ast.walk(tree)
        if isinstance(n, ast.Attribute)
        and isinstance(n.value, ast.Name)
        and n.value.id not in ("self", "cls")
        and n.attr.startswith("_")
        and not n.attr.startswith("__")
    ]


def test_no_planning_step_takes_the_planner():
    for name in STEPS:
        tree = ast.parse((PLANNING / f"{name}.py").read_text())
        imports = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)} | {
            f"{node.module}.{a.name}"
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom)
            for a in node.names
        }
        assert "planner._src.planning.planner" not in imports, name
        assert "planner._src.planning.Planner" not in imports, name
        params = {
            a.arg
            for f in ast.walk(tree)
            if isinstance(f, ast.FunctionDef)
            for a in f.args.args + f.args.kwonlyargs
        }
        assert not params & {"session", "planner", "planning_session"}, (name, params)


def test_planner_users_touch_only_its_public_members():
    assert len(USERS) >= 4
    for path in USERS:
        assert _private_uses(path) == [], _private_uses(path)


def test_the_public_members_they_use_are_documented():
    used = set()
    for path in USERS:
        tree = ast.parse(path.read_text())
        used |= {
            n.attr
            for n in ast.walk(tree)
            if isinstance(n, ast.Attribute)
            and isinstance(n.value, ast.Name)
            and n.value.id in ("session", "s")
        }
    documented = 0
    for attr in used:
        member = getattr(planner.Planner, attr, None)
        if callable(member) or isinstance(member, property):
            assert (member.__doc__ or "").strip(), f"Planner.{attr} has no docstring"
            documented += 1
    assert documented >= 5
    # (train-state placement is a step over the Context now, train_state.py: the public
    # plan_state only calls Planner.plan)
    assert {"plan", "compiler", "stock", "usable", "hardware"} <= used


def test_the_boundary_check_sees_a_private_use(tmp_path):
    f = tmp_path / "user.py"
    f.write_text("def f(session):\n    return session._stock_bytes\n")
    assert _private_uses(f) == ["user.py:2 session._stock_bytes"]
