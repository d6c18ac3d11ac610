"""The harness protocol, loaded by file path for peer adapters.

Peer adapters run in their own virtualenv (``benchmarks/.venv-peers``), which has the peer
libraries but not redis-tasks, so they cannot ``import redis_tasks``. The protocol module is
standard library only; this loads ``redis_tasks/_bench/_protocol.py`` straight from its file
(without running the package's ``__init__``) and re-exports what an adapter needs.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

__all__ = ["PROTOCOL_FILE", "Adapter", "OnJob", "main"]

#: ``redis_tasks/_bench/_protocol.py``, relative to this file.
PROTOCOL_FILE = (
    Path(__file__).resolve().parent.parent.parent / "redis_tasks" / "_bench" / "_protocol.py"
)

_MODULE_NAME = "_redis_tasks_bench_protocol"


def _load() -> ModuleType:
    """Import the protocol file once, under a private module name."""
    if (loaded := sys.modules.get(_MODULE_NAME)) is not None:
        return loaded
    spec = importlib.util.spec_from_file_location(_MODULE_NAME, PROTOCOL_FILE)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load the benchmark protocol from {PROTOCOL_FILE}")
    module = importlib.util.module_from_spec(spec)
    # Registered before executing so that dataclasses/typing lookups by module name work.
    sys.modules[_MODULE_NAME] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[_MODULE_NAME]
        raise
    return module


_protocol = _load()

#: Called by an adapter's job function when a job starts, with the job's stamp.
OnJob = Callable[[float | None], None]

#: ``main(adapter, argv=None)``: run an adapter module as the harness's client or worker.
main: Callable[..., None] = _protocol.main

#: The structural type an adapter module satisfies (for reference; modules are passed as-is).
Adapter: Any = _protocol.Adapter
