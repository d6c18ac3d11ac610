"""The hooks the library calls to make its spans, bound once to OpenTelemetry or to no-ops.

Three kinds of span (:mod:`.spans` makes them):

- ``create_task`` (PRODUCER), around the store of a new task. Its W3C trace
  context (``traceparent``, and ``tracestate`` when there is one) is stored with
  the work, so the worker that runs the task can link to it.
- ``run_task`` (CONSUMER), in the worker, from the claim that gave it the lease
  to the outcome written; the root of its own trace, *linked* to the task's
  ``create_task`` span, and the current span while the handler runs (the
  handler's own spans nest under it).
- The MCP extension's requests (``tools/call`` creating a task, ``tasks/get``,
  ``tasks/update``, ``tasks/cancel``): the MCP SDK already makes a SERVER span
  for each (its ``OpenTelemetryMiddleware``), so the extension adds the task's
  reference (and status) to that span instead of making a second one.

With the OpenTelemetry API importable (the ``redis-mcp-tasks[otel]`` extra, or the
MCP SDK, which depends on it) and not ``REDIS_TASKS_TRACES=off``, the hooks use
the tracer ``redis_tasks`` of the global tracer provider once one is set. Until
then a hook costs one look at the global provider and returns ``None``: no span
object, no context stored. Without the API every hook is bound once, at import,
to a function that does nothing, and ``opentelemetry`` is never imported.

Attributes name a task by its reference, partition, attempt and outcome only:
never its whole ID (a capability: whoever holds it reaches the task on a server
without authentication; the hooks are given the reference,
``redis_tasks._ids.task_ref``, which is the whole ID only where the manager or
worker was told ``whole_task_ids``), its origin, arguments, payload, answers,
result, endpoint or partition key, and an exception's type, never its message.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import TYPE_CHECKING, Final, Protocol, TypeVar

from .hooks import HookSet, wanted

if TYPE_CHECKING:
    import asyncio

    from opentelemetry.trace import TracerProvider

__all__ = ["TRACES", "CreateSpan", "RunSpan", "Traces"]

T = TypeVar("T")


class CreateSpan(Protocol):
    """A ``create_task`` span: the current span inside ``with``, ended on exit."""

    #: The trace context to store with the work (empty when the span is not recorded).
    carrier: bytes

    def __enter__(self) -> CreateSpan:
        """Make the span current."""
        ...

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """End the span (an error status naming the exception's type, if one is raised)."""
        ...


class RunSpan(Protocol):
    """A ``run_task`` span: started at the claim, ended once the outcome is written."""

    def spawn(self, handler: Awaitable[T]) -> asyncio.Future[T]:
        """Run ``handler`` as a task whose current span is this one."""
        ...

    def end(self, outcome: str | None = None, error: str | None = None) -> None:
        """End the span once (later calls do nothing): ``outcome`` is how the run
        ended (completed, failed, cancelled, abandoned), ``error`` names what went
        wrong (an exception type, or why the outcome was not recorded)."""
        ...


class Traces(HookSet):
    """The hooks the library makes spans through (see the module); one instance, :data:`TRACES`."""

    #: A ``create_task`` span for the new task (its reference), or ``None`` (no tracer).
    create_span: Callable[[str], CreateSpan | None]
    #: A ``run_task`` span for (task reference, partition, attempt, reclaimed, stored
    #: context), or ``None`` (no tracer).
    run_span: Callable[[str, int, int, bool, bytes], RunSpan | None]
    #: Name the task (reference, and status or ``None``) on the current request's span.
    mark_request: Callable[[str, str | None], None]

    HOOKS = ("create_span", "run_span", "mark_request")

    def enable(self, provider: TracerProvider | None = None) -> bool:
        """Make spans with ``provider``'s tracer, or the global provider's once one is set.

        Returns ``False`` (hooks left as they were) when the API is not installed.
        """
        try:
            from .spans import Tracing
        except ImportError:
            return False
        self.bind(Tracing(provider))
        return True


#: The library's one :class:`Traces`: OpenTelemetry's when importable, else no-ops.
TRACES: Final = Traces()
if wanted("REDIS_TASKS_TRACES"):
    TRACES.enable()
