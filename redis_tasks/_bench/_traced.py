"""The bench's traced variant: the OpenTelemetry SDK's tracer provider with a batch
processor, as an application that exports traces runs it, and an exporter that drops
what it is given, so the figure is the cost of making the spans, not of a collector."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["install_tracing"]


def install_tracing() -> None:
    """Make an SDK tracer provider (batching, exporting nowhere) the global one."""
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

    class Discard(SpanExporter):
        """Accepts every batch and keeps nothing."""

        def export(self, spans: Sequence[Any]) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(Discard()))
    trace.set_tracer_provider(provider)
