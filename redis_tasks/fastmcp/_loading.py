"""Find a FastMCP app and its ``TasksExtension`` from ``app.py:mcp`` (a worker's argument)."""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from pathlib import Path
from typing import Any

from fastmcp import FastMCP
from fastmcp.utilities.tasks import TASKS_EXTENSION_ID

from ._extension import TasksExtension
from ._fastmcp import app_extensions

__all__ = ["AppError", "load_app"]

#: The names tried, in order, when the spec names none (FastMCP's own CLI tries these).
_DEFAULT_NAMES = ("mcp", "server", "app")


class AppError(ValueError):
    """The app named on the command line cannot be served (one line: which and why)."""


def _import(target: str) -> Any:
    """Import a module by dotted name, or a ``.py`` file by path."""
    if target.endswith(".py"):
        path = Path(target).resolve()
        if not path.is_file():
            raise AppError(f"no such file: {target}")
        # Its own imports resolve as `python app.py` would resolve them.
        if str(path.parent) not in sys.path:
            sys.path.insert(0, str(path.parent))
        spec = importlib.util.spec_from_file_location(path.stem, path)
        if spec is None or spec.loader is None:
            raise AppError(f"cannot import {target}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[path.stem] = module
        spec.loader.exec_module(module)
        return module
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    return importlib.import_module(target)


def load_app(spec: str) -> tuple[FastMCP, TasksExtension]:
    """The FastMCP app ``spec`` names (``app.py:mcp``, ``package.module:mcp``, or
    ``app.py`` for its ``mcp``, ``server`` or ``app``) and its :class:`TasksExtension`.

    Raises :class:`AppError` with one line: a file or module that cannot be imported
    (its exception's type and first line), no such object, not a FastMCP app, or an
    app whose tasks extension is not this one.
    """
    target, _, name = spec.partition(":")
    if not target:
        raise AppError(f"the app must be FILE.py:OBJECT or MODULE:OBJECT, got {spec!r}")
    try:
        module = _import(target)
    except AppError:
        raise
    except Exception as exc:  # its own code may raise anything while it is imported
        first = str(exc).splitlines()[0] if str(exc) else ""
        raise AppError(
            f"cannot import {target}: {type(exc).__name__}: {first}".rstrip(": ")
        ) from None
    names = (name,) if name else _DEFAULT_NAMES
    app = next((getattr(module, n) for n in names if hasattr(module, n)), None)
    if app is None:
        raise AppError(f"{target} has no {' or '.join(names)}")
    if not isinstance(app, FastMCP):
        raise AppError(f"{spec} is a {type(app).__name__}, not a FastMCP app")
    extension = app_extensions(app).get(TASKS_EXTENSION_ID)
    if not isinstance(extension, TasksExtension):
        raise AppError(
            f"{spec} has no redis_tasks.fastmcp.TasksExtension: "
            "add one with mcp.add_extension(TasksExtension(url))"
        )
    return app, extension
