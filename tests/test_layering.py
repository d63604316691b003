"""The import house of planner/ and cost_models/: no import cycle, imports inside functions
counted; a project import inside a function only in the CLI (so that ``--help`` answers
without importing JAX), each with its reason on the line; and the sizes: every module at most
600 lines (the JAX adapter aside), the ``Planner`` class under 400."""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("planner", "cost_models")
# The one package allowed imports of the project inside functions (the command line's
# modules), and the reason each gives.
DEFERRED_OK = {
    str(p.relative_to(ROOT)): "# deferred:"
    for p in sorted((ROOT / "planner/_src/cli").glob("*.py"))
}
# Every module holds one job in at most MAX_MODULE_LINES lines, but the one adapter: the JAX
# internals the planner touches are all in planner/_src/xla/adapter.py, so that a JAX upgrade
# that moves one is fixed in one place (tests/test_adapter.py names it).
MAX_MODULE_LINES = 600
SIZE_EXCEPTIONS = {
    "planner/_src/xla/adapter.py": "the one adapter: every JAX internal in one place",
}
# The driver's class stays a driver: the steps of one budget live in planning/'s modules.
PLANNER_CLASS = ("planner/_src/planning/planner.py", "Planner")
PLANNER_CLASS_UNDER = 400


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _targets(node, current: str, is_package: bool, modules: set[str]) -> list[str]:
    """The project modules an import statement names (the longest known prefix of each)."""
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        base = current if is_package else current.rsplit(".", 1)[0]
        for _ in range(max(node.level - 1, 0)):
            base = base.rsplit(".", 1)[0]
        prefix = (base + "." + node.module if node.module else base) if node.level else node.module
        names = [prefix] + [f"{prefix}.{a.name}" for a in node.names]
    out = []
    for name in names:
        while name and name not in modules:
            name = name.rsplit(".", 1)[0] if "." in name else ""
        if name and name != current:
            out.append(name)
    return out


def import_graph(root: Path, packages=PACKAGES) -> tuple[nx.DiGraph, list[tuple[str, int, str]]]:
    """Module -> module edges of every import (module level and inside functions), and the
    project imports found inside functions as (file, line, source line)."""
    files = [p for pkg in packages for p in sorted((root / pkg).rglob("*.py"))]
    modules = {_module_name(p, root): p for p in files}
    graph = nx.DiGraph()
    graph.add_nodes_from(modules)
    deferred = []
    for name, path in modules.items():
        text = path.read_text()
        lines = text.splitlines()
        tree = ast.parse(text)
        in_function = {
            id(n)
            for f in ast.walk(tree)
            if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
            for n in ast.walk(f)
        }
        for node in ast.walk(tree):
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            targets = _targets(node, name, path.name == "__init__.py", set(modules))
            for target in targets:
                # a package importing its own children is not a cycle
                if not (path.name == "__init__.py" and target.startswith(name + ".")):
                    graph.add_edge(name, target)
            if targets and id(node) in in_function:
                rel = str(path.relative_to(root))
                deferred.append(
                    (rel, node.lineno, " ".join(lines[node.lineno - 1 : node.end_lineno]))
                )
    return graph, deferred


def cycles(graph: nx.DiGraph) -> list[list[str]]:
    return [sorted(c) for c in nx.strongly_connected_components(graph) if len(c) > 1]


def test_no_import_cycle_counting_imports_inside_functions():
    graph, _ = import_graph(ROOT)
    assert graph.number_of_nodes() > 30 and graph.number_of_edges() > 50  # it read the tree
    assert cycles(graph) == []


def test_imports_inside_functions_only_where_they_buy_a_fast_help():
    _, deferred = import_graph(ROOT)
    misplaced = [d for d in deferred if d[0] not in DEFERRED_OK]
    assert misplaced == [], "move these imports to module level: " + repr(misplaced)
    unexplained = [d for d in deferred if DEFERRED_OK[d[0]] not in d[2]]
    assert unexplained == [], "say why each import is deferred: " + repr(unexplained)


def test_the_checks_find_a_cycle_made_by_an_import_inside_a_function(tmp_path):
    pkg = tmp_path / "planner"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "low.py").write_text("def f():\n    from planner.high import g\n    return g\n")
    (pkg / "high.py").write_text("from planner import low\n")
    graph, deferred = import_graph(tmp_path, packages=("planner",))
    assert cycles(graph) == [["planner.high", "planner.low"]]
    assert [(f, line) for f, line, _ in deferred] == [("planner/low.py", 2)]


def oversized(root: Path, packages=PACKAGES, exceptions=SIZE_EXCEPTIONS) -> list[str]:
    """``path: N lines`` of each module over MAX_MODULE_LINES, the exceptions aside."""
    out = []
    for pkg in packages:
        for p in sorted((root / pkg).rglob("*.py")):
            rel = p.relative_to(root).as_posix()
            lines = len(p.read_text().splitlines())
            if lines > MAX_MODULE_LINES and rel not in exceptions:
                out.append(f"{rel}: {lines} lines")
    return out


def class_lines(path: Path, name: str) -> int:
    """Lines of the module-level class ``name`` in ``path``, its decorators included."""
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            return node.end_lineno - first + 1
    raise AssertionError(f"no class {name} in {path}")


def test_every_module_is_at_most_600_lines_the_jax_adapter_aside():
    assert all((ROOT / path).is_file() for path in SIZE_EXCEPTIONS), SIZE_EXCEPTIONS
    assert oversized(ROOT) == [], f"split these by job (at most {MAX_MODULE_LINES} lines each)"


def test_the_planner_class_is_under_400_lines():
    path, name = PLANNER_CLASS
    lines = class_lines(ROOT / path, name)
    assert lines < PLANNER_CLASS_UNDER, (
        f"{name} is {lines} lines: move a step into a module of planning/ that takes the Context"
    )


def test_the_size_checks_find_an_oversized_module_and_class(tmp_path):
    adapter = tmp_path / "planner/_src/xla/adapter.py"
    adapter.parent.mkdir(parents=True)
    adapter.write_text("x = 1\n" * (MAX_MODULE_LINES + 100))  # the exception
    (tmp_path / "planner/fits.py").write_text("x = 1\n" * MAX_MODULE_LINES)
    (tmp_path / "planner/big.py").write_text("x = 1\n" * (MAX_MODULE_LINES + 1))
    assert oversized(tmp_path, packages=("planner",)) == ["planner/big.py: 601 lines"]
    body = "".join(f"    def f{i}(self):\n        return {i}\n" for i in range(200))
    (tmp_path / "planner/driver.py").write_text(
        f"import dataclasses\n\n\n@dataclasses.dataclass\nclass Planner:\n{body}"
    )
    assert class_lines(tmp_path / "planner/driver.py", "Planner") == 402 >= PLANNER_CLASS_UNDER
