"""The OpenTelemetry SDK with a Prometheus reader, as ``redis-tasks worker`` sets it up.

Imported only when metrics are asked for (``--metrics-port``, or the bench's
metered variant): it needs the ``redis-mcp-tasks[otel]`` extra.
"""

from __future__ import annotations

import importlib
from typing import Final

from .metrics import METRICS

__all__ = ["INSTALL_HINT", "PrometheusExport", "require_extra"]

INSTALL_HINT: Final = "metrics need the otel extra: pip install 'redis-mcp-tasks[otel]'"


def require_extra() -> None:
    """Raise :class:`ImportError` (with :data:`INSTALL_HINT`) without the otel extra."""
    try:
        for module in ("opentelemetry.sdk.metrics", "opentelemetry.exporter.prometheus"):
            importlib.import_module(module)
    except ImportError as exc:
        raise ImportError(INSTALL_HINT) from exc


class PrometheusExport:
    """A meter provider whose reader feeds the Prometheus client's default registry.

    The provider becomes the global one when none was set yet, so a handler's own
    OpenTelemetry metrics are served beside the library's; the library's hooks
    record on it in any case. Raises :class:`ImportError` (with
    :data:`INSTALL_HINT`) without the extra.
    """

    def __init__(self) -> None:
        try:
            from opentelemetry import metrics as otel
            from opentelemetry.exporter.prometheus import PrometheusMetricReader
            from opentelemetry.sdk.metrics import MeterProvider
            from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest
        except ImportError as exc:
            raise ImportError(INSTALL_HINT) from exc
        self._reader = PrometheusMetricReader()
        self._provider = MeterProvider(metric_readers=[self._reader])
        self._registry = REGISTRY
        self._generate = generate_latest
        self.content_type: str = CONTENT_TYPE_LATEST
        otel.set_meter_provider(self._provider)
        if not METRICS.enabled or otel.get_meter_provider() is not self._provider:
            # Either the hooks were off, or another provider was global already:
            # bind them to this one. (Instruments made on the global provider's
            # proxy before now moved to this provider when it became global.)
            METRICS.enable(self._provider)

    def render(self) -> bytes:
        """Every metric of the registry, in the Prometheus text format."""
        body: bytes = self._generate(self._registry)
        return body

    def shutdown(self) -> None:
        """Stop the provider and take the reader off the registry."""
        METRICS.disable()
        self._provider.shutdown()
