"""Operations: the metrics and traces redis-tasks records, and what a worker process
serves (Prometheus text, a health check).

:mod:`.instruments` owns every instrument; :mod:`.metrics` holds the hooks the
library calls (no-ops without the extra); :mod:`.traces` holds the span hooks,
bound the same way, and :mod:`.spans` the spans and the trace context stored with
the work; :mod:`.backlog` samples the work queues' depth for the backlog gauges;
:mod:`.prometheus` installs the OpenTelemetry SDK with a Prometheus reader (the
``otel`` extra); :mod:`.http` is the small asyncio server both endpoints use.
"""
