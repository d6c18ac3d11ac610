"""Which event loop the command-line programs run: uvloop when it is installed.

uvloop (``pip install 'redis-mcp-tasks[fast]'``) runs the same asyncio code on
libuv; its loop turns and socket callbacks cost less Python, which a worker or
server of this library spends most of its time in (benchmarks/README.md has the
figures, with and without). The library itself never picks a loop: an
application that embeds it keeps its own. ``REDIS_TASKS_LOOP`` (or a command's
``--loop``) says ``auto`` (the default: uvloop if importable), ``uvloop`` (fail
without it) or ``asyncio``.
"""

from __future__ import annotations

import asyncio
import importlib
import os
from collections.abc import Coroutine
from typing import Any, Final, TypeVar

__all__ = ["LOOPS", "loop_name", "run"]

T = TypeVar("T")

#: The choices of ``--loop`` and ``REDIS_TASKS_LOOP``.
LOOPS: Final = ("auto", "uvloop", "asyncio")
_ENV: Final = "REDIS_TASKS_LOOP"


def loop_name(choice: str | None = None) -> str:
    """The loop ``choice`` (default: ``$REDIS_TASKS_LOOP``, else ``auto``) resolves to:
    ``"uvloop"`` or ``"asyncio"``. Raises :class:`ValueError` for an unknown choice
    and :class:`ImportError` when ``uvloop`` is asked for and not installed."""
    wanted = choice or os.environ.get(_ENV) or "auto"
    if wanted not in LOOPS:
        raise ValueError(f"unknown event loop {wanted!r}; choose from {', '.join(LOOPS)}")
    if wanted == "asyncio":
        return "asyncio"
    try:
        importlib.import_module("uvloop")
    except ImportError:
        if wanted == "uvloop":
            raise
        return "asyncio"
    return "uvloop"


def run(main: Coroutine[Any, Any, T], choice: str | None = None) -> T:
    """Run ``main`` to completion on the loop ``choice`` resolves to."""
    try:
        name = loop_name(choice)
    except (ValueError, ImportError):
        main.close()  # never awaited: no "coroutine was never awaited" warning
        raise
    if name == "uvloop":
        uvloop = importlib.import_module("uvloop")
        result: T = uvloop.run(main)
        return result
    return asyncio.run(main)
