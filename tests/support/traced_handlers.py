"""A traced worker's handler (``tests.support.traced_handlers:handler``).

Importing this module configures the process's tracer provider (the SDK with the
in-memory exporter, dumped to ``$RT_TEST_SPANS`` at exit), as an application's
handler module would configure its own. The handler is ``tests.support.handlers``'s,
inside a span of its own, so a test sees the handler's spans nest under the
worker's ``run_task`` span.
"""

from __future__ import annotations

from typing import Any

from opentelemetry import trace

from redis_tasks import TaskExecution

from . import handlers, tracing

tracing.install()
_tracer = trace.get_tracer("tests.handler")


async def handler(execution: TaskExecution) -> dict[str, Any]:
    """``tests.support.handlers.handler`` in a span named ``handler``."""
    with _tracer.start_as_current_span("handler"):
        return await handlers.handler(execution)
