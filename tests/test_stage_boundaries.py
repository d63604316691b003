"""No stage reaches into the Planner's private members: state_plan.py plans with a session
through the Planner's public, documented members (session.py)."""

import ast
from pathlib import Path

import planner

SRC = Path(__file__).resolve().parents[1] / "planner" / "_src"


def _private_uses(path: Path, name: str) -> list[str]:
    """``name._x`` attribute uses in ``path`` (``name``: how the module calls the Planner)."""
    tree = ast.parse(path.read_text())
    return [
        f"{path.name}:{n.lineno} {name}.{n.attr}"
        for n in ast.walk(tree)
        if isinstance(n, ast.Attribute)
        and isinstance(n.value, ast.Name)
        and n.value.id == name
        and n.attr.startswith("_")
    ]


def test_state_plan_uses_only_the_planners_public_members():
    uses = _private_uses(SRC / "state_plan.py", "session")
    assert uses == [], uses
    # and what it uses instead is public and documented
    tree = ast.parse((SRC / "state_plan.py").read_text())
    used = {
        n.attr
        for n in ast.walk(tree)
        if isinstance(n, ast.Attribute)
        and isinstance(n.value, ast.Name)
        and n.value.id == "session"
    }
    for attr in used:
        member = getattr(planner.Planner, attr, None)
        if member is not None:  # (instance attributes: trace, graph, options, ...)
            assert (member.__doc__ or "").strip(), f"Planner.{attr} has no docstring"
    assert {"example_args", "backend", "plan_activations", "judge_run"} <= used
