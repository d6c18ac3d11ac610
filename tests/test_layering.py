"""The layering the code map promises: Redis stays in ``_redis/``, the worker knows none of it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "redis_tasks"

#: Modules that must run without Redis: the worker, and the backend-neutral core
#: both backends (and the worker) build on.
NEUTRAL = sorted(
    [
        *PACKAGE.glob("_worker/*.py"),
        *(
            PACKAGE / name
            for name in (
                "_base.py",
                "_work_queue.py",
                "_manager.py",
                "_execution.py",
                "_lease.py",
                "_memory.py",
                "_memory_queue.py",
                "_memory_stream.py",
                "_record.py",
                "_events.py",
            )
        ),
    ]
)


def imported_modules(path: Path) -> set[str]:
    """Every module ``path`` imports, relative imports resolved against the package."""
    package = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts[:-1])
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                found.add(".".join([*base, *([node.module] if node.module else [])]))
            else:
                found.add(node.module or "")
    return found


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
