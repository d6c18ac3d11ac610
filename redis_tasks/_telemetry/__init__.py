"""Operations: the metrics redis-tasks records, and what a worker process serves
(Prometheus text, a health check).

:mod:`.metrics` owns every instrument and the hooks the library calls;
:mod:`.backlog` samples the work queues' depth for the backlog gauges;
:mod:`.prometheus` installs the OpenTelemetry SDK with a Prometheus reader (the
``otel`` extra); :mod:`.http` is the small asyncio server both endpoints use.
"""
