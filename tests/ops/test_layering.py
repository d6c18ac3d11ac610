"""The layering the code map promises: Redis stays in ``_redis/``, the worker knows none of it;
no module imports one that imports it back (type-only imports count too); no module
is over :data:`MAX_LINES` lines.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "redis_tasks"

#: The most lines a module may have: past it, it holds more than one thing.
MAX_LINES = 400

#: Modules that must run without Redis: the worker, and the backend-neutral core
#: both backends (and the worker) build on.
NEUTRAL = sorted(
    [
        *PACKAGE.glob("_worker/*.py"),
        *PACKAGE.glob("_memory/*.py"),
        *PACKAGE.glob("_record/*.py"),
        *(
            PACKAGE / name
            for name in (
                "_base.py",
                "_work_queue.py",
                "_manager.py",
                "_execution.py",
                "_lease.py",
                "_events.py",
            )
        ),
    ]
)


def _imports(path: Path) -> Iterator[tuple[str, list[str]]]:
    """Each import statement of ``path`` (wherever it stands: under ``TYPE_CHECKING``
    or in a function too): the module, relative imports resolved against the
    package, and the names a ``from`` import takes from it."""
    package = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts[:-1])
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, []
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join([*base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            yield module, [alias.name for alias in node.names]


def imported_modules(path: Path) -> set[str]:
    """Every module ``path`` imports, relative imports resolved against the package."""
    return {module for module, _ in _imports(path)}


def module_name(path: Path) -> str:
    """The dotted name of the package's module at ``path`` (a package: its own)."""
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    """Each module of the package, to the modules of the package it imports.

    ``from package import module`` leads to that module, not to the package's
    ``__init__``; an import of ``a.b.c`` leads to ``a.b.c`` alone, not to the
    packages Python initializes on the way (or every module would lead to
    ``redis_tasks/__init__.py``, which imports the public API).
    """
    paths = {module_name(path): path for path in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        found: set[str] = set()
        for module, names in _imports(path):
            submodules = {f"{module}.{n}" for n in names} & paths.keys()
            found |= submodules or {module}
            # A ``from`` import that takes a module and a plain name leads to both.
            if submodules and len(submodules) < len(names):
                found.add(module)
        graph[name] = {module for module in found if module in paths and module != name}
    return graph


def circles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of ``graph`` with more than one module (each
    sorted, in sorted order): the modules that import each other, however far round."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:  # Tarjan's algorithm
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


@pytest.mark.parametrize("path", NEUTRAL, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_the_worker_and_the_neutral_core_import_nothing_of_redis(path: Path) -> None:
    forbidden = {
        name
        for name in imported_modules(path)
        if name == "redis" or name.startswith("redis.") or name.startswith("redis_tasks._redis")
    }
    assert forbidden == set(), f"{path.name} imports {sorted(forbidden)}"


def test_the_check_sees_a_redis_import() -> None:
    # The Redis backend's own manager imports both: the check must find them.
    found = imported_modules(PACKAGE / "_redis" / "manager.py")
    assert "redis.asyncio" in found
    assert "redis_tasks._redis.contract" in found


def test_no_module_imports_one_that_imports_it() -> None:
    # Type-only imports count: the rooms still depend on each other both ways.
    found = circles(import_graph())
    assert found == [], "import circles: " + "; ".join(" <-> ".join(c) for c in found)


def test_the_circle_check_sees_circles_and_type_only_imports() -> None:
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []
    graph = import_graph()
    # Under TYPE_CHECKING only, yet an edge.
    assert "redis_tasks._manager" in graph["redis_tasks._execution"]
    # `from . import scripts as lua` leads to the module, not the package.
    assert "redis_tasks._redis.scripts" in graph["redis_tasks._redis.work_queue"]
    assert "redis_tasks._redis" not in graph["redis_tasks._redis.work_queue"]


def test_no_module_is_over_the_line_limit() -> None:
    over = {
        str(path.relative_to(PACKAGE)): lines
        for path in sorted(PACKAGE.rglob("*.py"))
        if (lines := len(path.read_text().splitlines())) > MAX_LINES
    }
    assert over == {}, f"over {MAX_LINES} lines: {over}"
