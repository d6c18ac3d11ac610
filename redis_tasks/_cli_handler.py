"""The handler a worker runs, as its command line names it: ``MODULE:FUNCTION`` or
``FILE.py:FUNCTION``, refused in one line that says which part failed and why."""

from __future__ import annotations

import importlib
import inspect
import os
import sys
from pathlib import Path
from typing import Any

from ._cli_common import HandlerError
from ._execution import Handler

__all__ = ["load_handler"]


def load_handler(spec: str) -> Handler:
    """Import ``module.path:function`` (or ``path/to/file.py:function``, a file under the
    current directory); the function is the task handler.

    Raises :class:`HandlerError` with one line saying which part failed and why: not
    ``MODULE:FUNCTION``, a module that cannot be imported (its exception's type and
    first line: a missing module, or an error in its own code), a name the module does
    not have, or something that is not an async function.
    """
    module_name, sep, attribute = spec.partition(":")
    if not sep or not module_name or not attribute:
        raise HandlerError(
            f"the handler must be MODULE:FUNCTION (e.g. myapp.tasks:handler), got {spec!r}"
        )
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # like `python -m`, find modules in the current dir
    if module_name.endswith(".py"):
        module_name = _module_of_file(module_name)
    try:
        target: Any = importlib.import_module(module_name)
    except Exception as exc:  # its own code may raise anything while it is imported
        first = str(exc).splitlines()[0] if str(exc) else ""
        raise HandlerError(
            f"cannot import module {module_name!r}: {type(exc).__name__}: {first}".rstrip(": ")
        ) from None
    for part in attribute.split("."):
        if not hasattr(target, part):
            raise HandlerError(f"module {module_name!r} has no {attribute!r}")
        target = getattr(target, part)
    call = getattr(target, "__call__", None)  # noqa: B004 - an async __call__ counts too
    if not (inspect.iscoroutinefunction(target) or inspect.iscoroutinefunction(call)):
        raise HandlerError(
            f"{spec} is not an async function: a handler is `async def handler(execution)`"
        )
    handler: Handler = target
    return handler


def _module_of_file(path: str) -> str:
    """The dotted module a ``FILE.py`` under the current directory is (``myapp/tasks.py``:
    ``myapp.tasks``), as ``--fastmcp`` takes a file; :class:`HandlerError` otherwise."""
    file = Path(path)
    if not file.is_file():
        raise HandlerError(f"no such file: {path}")
    try:
        relative = file.resolve().relative_to(Path.cwd().resolve())
    except ValueError:
        raise HandlerError(
            f"{path} is not under the current directory: run the worker from the directory "
            "its imports start from, or name the handler as MODULE:FUNCTION"
        ) from None
    return ".".join(relative.with_suffix("").parts)
