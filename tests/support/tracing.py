"""OpenTelemetry's SDK with its in-memory span exporter, for the tests' processes.

A process the tests start (a worker, an MCP server) calls :func:`install` at
import to make an SDK tracer provider the global one; its finished spans are then
dumped as JSON to ``$RT_TEST_SPANS`` when it exits (when that is set), and
:func:`finished` gives them in process (an MCP server serves them at
``/test/spans``). Spans are in the SDK's own JSON form (``ReadableSpan.to_json``).
"""

from __future__ import annotations

import atexit
import json
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import Sampler

from redis_tasks._telemetry.traces import TRACES

__all__ = ["as_json", "finished", "install", "memory_provider", "traces_on"]

_exporter: InMemorySpanExporter | None = None


def memory_provider(sampler: Sampler | None = None) -> tuple[TracerProvider, InMemorySpanExporter]:
    """A tracer provider (with ``sampler``, else the SDK's default) whose spans go,
    as each ends, to an in-memory exporter."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(sampler=sampler)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


@contextmanager
def traces_on(provider: TracerProvider) -> Iterator[None]:
    """The library's hooks bound to ``provider`` for the block (this process's global
    provider untouched); restored, and ``provider`` shut down, afterwards."""
    saved = dict(vars(TRACES))
    assert TRACES.enable(provider)
    try:
        yield
    finally:
        vars(TRACES).clear()
        vars(TRACES).update(saved)
        provider.shutdown()


def as_json(spans: Sequence[ReadableSpan]) -> list[dict[str, Any]]:
    """``spans`` in the SDK's JSON form, decoded."""
    return [json.loads(span.to_json()) for span in spans]


def finished() -> list[dict[str, Any]]:
    """Every span this process finished so far (see :func:`install`)."""
    assert _exporter is not None, "install() first"
    return as_json(_exporter.get_finished_spans())


def _dump(path: Path) -> None:
    path.write_text(json.dumps(finished()))


def install() -> None:
    """Make an in-memory SDK provider the global one (once); dump at exit to ``$RT_TEST_SPANS``."""
    global _exporter
    if _exporter is not None:
        return
    provider, _exporter = memory_provider()
    trace.set_tracer_provider(provider)
    target = os.environ.get("RT_TEST_SPANS")
    if target:
        atexit.register(_dump, Path(target))
