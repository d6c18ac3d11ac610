"""A worker process's tracer provider, set up by the handler's module at import, before the
worker starts reading (``redis-tasks worker myapp.tasks:handler`` imports it first).

Run as a script, it creates one task on an in-memory manager and prints the library's
``create_task`` span (the console exporter), as the tests do.
"""

from __future__ import annotations

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter

provider = TracerProvider()  # OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES are read here
# ConsoleSpanExporter prints; OTLPSpanExporter (opentelemetry-exporter-otlp) sends to a collector.
provider.add_span_processor(BatchSpanProcessor(ConsoleSpanExporter()))
trace.set_tracer_provider(provider)


async def _one_task() -> None:
    from redis_tasks import InMemoryTaskManager, RequestContext, TaskOrigin

    async with InMemoryTaskManager() as manager:
        origin = TaskOrigin.from_persisted_string("{}")
        await manager.create_task(RequestContext("/mcp", "alice"), origin)


if __name__ == "__main__":
    import asyncio

    asyncio.run(_one_task())
    provider.shutdown()  # flushes the batch to the console
