"""The spans on the OpenTelemetry API, and the trace context stored with a task's work.

Imported by :meth:`.traces.Traces.enable` only, so only when ``opentelemetry``
can be imported; the names and attributes are described in :mod:`.traces` and
the Traces page (docs/operations/traces.md).

The stored context is W3C trace context as text: the ``traceparent`` header
value, then a space and the ``tracestate`` value when the span has one (a
``traceparent`` holds no space, so the first one splits them). It is at most
:data:`MAX_CARRIER` bytes: a ``tracestate`` that would make it longer is left
out (it could come from a client, through the MCP request's ``_meta``), so the
stored value is never longer than the record's longest pieced field.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable
from contextvars import Token
from types import TracebackType
from typing import Final, TypeVar

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.environment_variables import OTEL_PYTHON_TRACER_PROVIDER
from opentelemetry.trace import Link, Span, SpanContext, SpanKind, StatusCode, Tracer
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from redis_tasks._record import MAX_PIECES, PIECE_BYTES

__all__ = ["MAX_CARRIER", "SCOPE", "Tracing", "decode_context", "encode_context"]

T = TypeVar("T")

#: The instrumentation scope (tracer name) of every span the library makes.
SCOPE: Final = "redis_tasks"
#: The longest stored trace context: what a record keeps in pieces at most.
MAX_CARRIER: Final = PIECE_BYTES * MAX_PIECES

# Attribute names: OpenTelemetry's messaging conventions where they fit, the
# library's own (``redis_tasks.*``) for the rest.
SYSTEM: Final = "redis_tasks"
#: The task's reference (``redis_tasks._ids.task_ref``): never its whole ID, which is
#: a capability, unless the manager or worker was told ``whole_task_ids``.
TASK_REF: Final = "redis_tasks.task.ref"
TASK_STATUS: Final = "redis_tasks.task.status"
ATTEMPT: Final = "redis_tasks.task.attempt"
RECLAIMED: Final = "redis_tasks.run.reclaimed"
OUTCOME: Final = "redis_tasks.run.outcome"
ERROR_TYPE: Final = "error.type"
#: The error type of a span that ended without a known outcome (the conventions' fallback).
OTHER_ERROR: Final = "_OTHER"

_PROPAGATOR: Final = TraceContextTextMapPropagator()
#: No parent: a run starts a trace of its own (linked to the task's creation).
_ROOT: Final = Context()


def encode_context(span: Span) -> bytes:
    """``span``'s W3C trace context as stored with the work (see the module); empty
    when the span has no valid context."""
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier, context=trace.set_span_in_context(span))
    parent = carrier.get("traceparent", "")
    state = carrier.get("tracestate", "")
    text = f"{parent} {state}" if state else parent
    if len(text) > MAX_CARRIER:
        text = parent
    # Both are ASCII by construction (the SDK validates tracestate members).
    return text.encode("ascii", "replace")


def decode_context(stored: bytes) -> SpanContext | None:
    """The span context ``stored`` names (see :func:`encode_context`), or ``None``
    when there is none or it is not valid W3C trace context."""
    if not stored:
        return None
    parent, _, state = stored.decode("ascii", "replace").partition(" ")
    carrier = {"traceparent": parent}
    if state:
        carrier["tracestate"] = state
    found = trace.get_current_span(_PROPAGATOR.extract(carrier)).get_span_context()
    return found if found.is_valid else None


def _error(span: Span, error: str) -> None:
    # The type only: an exception's message may hold task data.
    span.set_attribute(ERROR_TYPE, error)
    span.set_status(StatusCode.ERROR)


class _CreateSpan:
    """A ``create_task`` span (see :class:`.traces.CreateSpan`)."""

    __slots__ = ("_span", "_token", "carrier")

    def __init__(self, span: Span) -> None:
        self._span = span
        self._token: Token[Context] | None = None
        # Only a recorded span is worth linking to: an unsampled or non-recording
        # one stores nothing, and costs the record nothing.
        self.carrier = encode_context(span) if span.is_recording() else b""

    def __enter__(self) -> _CreateSpan:
        self._token = otel_context.attach(trace.set_span_in_context(self._span))
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._token is not None:
            otel_context.detach(self._token)
            self._token = None
        if exc_type is not None:
            _error(self._span, exc_type.__name__)
        self._span.end()


class _RunSpan:
    """A ``run_task`` span (see :class:`.traces.RunSpan`)."""

    __slots__ = ("_ended", "_span")

    def __init__(self, span: Span) -> None:
        self._span = span
        self._ended = False

    def spawn(self, handler: Awaitable[T]) -> asyncio.Future[T]:
        # The task copies the current context when it is made: with the span
        # attached for that moment, the handler's own spans nest under it.
        token = otel_context.attach(trace.set_span_in_context(self._span))
        try:
            return asyncio.ensure_future(handler)
        finally:
            otel_context.detach(token)

    def end(self, outcome: str | None = None, error: str | None = None) -> None:
        if self._ended:
            return
        self._ended = True
        span = self._span
        if outcome is not None:
            span.set_attribute(OUTCOME, outcome)
        elif error is None:
            error = OTHER_ERROR  # ended by an unexpected error in the worker itself
        if error is not None:
            _error(span, error)
        span.end()


class Tracing:
    """The hooks of :class:`.traces.Traces`, on a tracer.

    With ``provider``, its tracer; without, the global provider's, looked for on
    each call until one is set (the OpenTelemetry API sets it once and for all,
    so the tracer is then kept). Until then a hook returns at once.
    """

    def __init__(self, provider: trace.TracerProvider | None = None) -> None:
        self._tracer: Tracer | None = None if provider is None else provider.get_tracer(SCOPE)
        # Until a provider is set, the API's get_tracer_provider() looks the
        # environment up on every call (about 1 us, most of a hook's cost when
        # nothing is configured); its module global says the same in a few tens
        # of ns. A provider named by that variable is loaded now, as the first
        # call of get_tracer_provider() would load it.
        self._global_known = hasattr(trace, "_TRACER_PROVIDER")
        if provider is None and os.environ.get(OTEL_PYTHON_TRACER_PROVIDER):
            trace.get_tracer_provider()

    def _live(self) -> Tracer | None:
        tracer = self._tracer
        if tracer is None:
            if self._global_known and trace._TRACER_PROVIDER is None:
                return None  # no provider configured: make nothing
            provider = trace.get_tracer_provider()
            if isinstance(provider, trace.ProxyTracerProvider):
                return None
            tracer = self._tracer = provider.get_tracer(SCOPE)
        return tracer

    def create_span(self, task: str) -> _CreateSpan | None:
        """See :attr:`.traces.Traces.create_span`."""
        tracer = self._live()
        if tracer is None:
            return None
        span = tracer.start_span(
            "create_task",
            kind=SpanKind.PRODUCER,
            attributes={
                "messaging.system": SYSTEM,
                "messaging.operation.type": "send",
                "messaging.operation.name": "create_task",
                "messaging.destination.partition.id": task.partition(".")[0],
                TASK_REF: task,
            },
            record_exception=False,
        )
        return _CreateSpan(span)

    def run_span(
        self, task: str, partition: int, attempt: int, reclaimed: bool, stored: bytes
    ) -> _RunSpan | None:
        """See :attr:`.traces.Traces.run_span`."""
        tracer = self._live()
        if tracer is None:
            return None
        producer = decode_context(stored)
        span = tracer.start_span(
            "run_task",
            context=_ROOT,
            kind=SpanKind.CONSUMER,
            attributes={
                "messaging.system": SYSTEM,
                "messaging.operation.type": "process",
                "messaging.operation.name": "run_task",
                "messaging.consumer.group.name": "workers",
                "messaging.destination.partition.id": str(partition),
                TASK_REF: task,
                ATTEMPT: attempt,
                RECLAIMED: reclaimed,
            },
            links=None if producer is None else [Link(producer)],
            record_exception=False,
        )
        return _RunSpan(span)

    def mark_request(self, task: str, status: str | None) -> None:
        """See :attr:`.traces.Traces.mark_request`."""
        if self._live() is None:
            return
        span = trace.get_current_span()
        if span.is_recording():
            span.set_attribute(TASK_REF, task)
            if status is not None:
                span.set_attribute(TASK_STATUS, status)
