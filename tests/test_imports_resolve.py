"""Every import of the project's modules resolves, wherever it is written: the library, the
tests, the benchmarks, the examples, the docs' build hooks. An ``import`` of a moved module,
or ``module.name`` of a name that moved out of it, fails here (not on a GPU, later)."""

from __future__ import annotations

import ast
import importlib
import tomllib
from fnmatch import fnmatch
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WHERE = ("planner", "cost_models", "tests", "benchmarks", "examples", "docs")
PROJECT = ("planner", "cost_models")


def _files(root: Path):
    for place in WHERE:
        for p in sorted((root / place).rglob("*.py")):
            if "results" not in p.relative_to(root).parts:  # records are kept verbatim
                yield p


def _module(name: str):
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def unresolved(root: Path) -> list[str]:
    """``file:line what`` for each project import or ``module.attribute`` use that does not
    resolve."""
    bad = []
    for p in _files(root):
        tree = ast.parse(p.read_text())
        where = p.relative_to(root)
        modules = {}  # local name -> module, for the module.attribute check
        for n in ast.walk(tree):
            if isinstance(n, ast.ImportFrom) and (n.module or "").startswith(PROJECT):
                m = _module(n.module)
                if m is None:
                    bad.append(f"{where}:{n.lineno} no module {n.module}")
                    continue
                for a in n.names:
                    sub = _module(f"{n.module}.{a.name}")
                    if sub is not None:
                        modules[a.asname or a.name] = sub
                    elif not hasattr(m, a.name):
                        bad.append(f"{where}:{n.lineno} {n.module} has no {a.name}")
            elif isinstance(n, ast.Import):
                for a in n.names:
                    if a.name.startswith(PROJECT) and _module(a.name) is None:
                        bad.append(f"{where}:{n.lineno} no module {a.name}")
                    elif a.name.startswith(PROJECT) and a.asname:
                        modules[a.asname] = _module(a.name)
        for n in ast.walk(tree):
            if (
                isinstance(n, ast.Attribute)
                and isinstance(n.value, ast.Name)
                and n.value.id in modules
                and not hasattr(modules[n.value.id], n.attr)
                and _module(f"{modules[n.value.id].__name__}.{n.attr}") is None
            ):
                bad.append(f"{where}:{n.lineno} {n.value.id}.{n.attr} does not exist")
    return sorted(set(bad))


def test_every_project_import_resolves():
    assert unresolved(ROOT) == []


def test_the_check_finds_a_moved_module_and_a_moved_name(tmp_path):
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "stale.py").write_text(
        "from planner._src import session\n"
        "from planner._src.budget import no_such_name\n"
        "from planner._src.xla import targets\n"
        "targets.args_for\n"
    )
    assert unresolved(tmp_path) == [
        "tests/stale.py:1 planner._src has no session",
        "tests/stale.py:2 planner._src.budget has no no_such_name",
        "tests/stale.py:4 targets.args_for does not exist",
    ]


def packaged(root: Path) -> set[str]:
    """The packages a wheel built from pyproject.toml holds: the explicit list, or the
    packages on disk that setuptools' finder keeps (its include patterns are fnmatch's)."""
    config = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]
    if isinstance(config["packages"], list):
        return set(config["packages"])
    include = config["packages"]["find"]["include"]
    return {p for p in _packages_on_disk(root) if any(fnmatch(p, pat) for pat in include)}


def _packages_on_disk(root: Path) -> set[str]:
    return {
        ".".join(p.parent.relative_to(root).parts)
        for place in PROJECT
        for p in (root / place).rglob("__init__.py")
    }


def test_every_package_is_in_the_wheel():
    # A package left out of the wheel imports in the editable install the tests use and fails
    # only in a user's `pip install`.
    assert _packages_on_disk(ROOT) - packaged(ROOT) == set()
