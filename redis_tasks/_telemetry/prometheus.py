"""The OpenTelemetry SDK with a Prometheus reader, as ``redis-tasks worker`` sets it up.

Imported only when metrics are asked for (``--metrics-port``, or the bench's
metered variant): it needs the ``redis-mcp-tasks[otel]`` extra.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Final

from redis_tasks._version import install_hint

from .instruments import INSTRUMENTS
from .metrics import METRICS

if TYPE_CHECKING:
    from .histograms import BucketHistogram

__all__ = ["INSTALL_HINT", "PrometheusExport", "require_extra"]

INSTALL_HINT: Final = f"metrics need the otel extra: {install_hint('otel')}"


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
        # The histograms are written here, pre-bucketed, line for line as the SDK's
        # exporter wrote them: recording through the SDK cost a fifth of a worker's
        # throughput (see .histograms).
        self._histograms = HistogramCollector(METRICS.bucket_histograms())
        self._registry.register(self._histograms)

    def render(self) -> bytes:
        """Every metric of the registry, in the Prometheus text format."""
        body: bytes = self._generate(self._registry)
        return body

    def shutdown(self) -> None:
        """Stop the provider and take the reader and the histograms off the registry."""
        METRICS.disable()
        self._registry.unregister(self._histograms)
        self._provider.shutdown()


#: The labels the SDK's Prometheus exporter puts on every metric of the library's meter.
_SCOPE: Final = {
    "otel_scope_name": "redis_tasks",
    "otel_scope_schema_url": "",
    "otel_scope_version": "",
}


class HistogramCollector:
    """A Prometheus collector of the pre-bucketed histograms (``<name>_seconds``, with
    ``_bucket``, ``_count`` and ``_sum``), the names and labels the SDK's exporter used."""

    def __init__(self, histograms: Mapping[str, BucketHistogram]) -> None:
        self._histograms = histograms
        self._help = {spec.name: spec.description for spec in INSTRUMENTS}

    def describe(self) -> list[Any]:
        """Nothing up front: the registry then checks no names (and calls no collect)."""
        return []

    def collect(self) -> Iterator[Any]:
        """One histogram family per instrument, a series per label value recorded."""
        from prometheus_client import utils
        from prometheus_client.core import HistogramMetricFamily

        # The client's own spelling of a bound, as its exporter spells ``le`` (untyped).
        spell: Callable[[float], str] = utils.floatToGoString

        for name, histogram in self._histograms.items():
            label = (histogram.label,) if histogram.label else ()
            family = HistogramMetricFamily(
                f"{name}_seconds", self._help[name], labels=(*label, *_SCOPE)
            )
            bounds = [spell(b) for b in histogram.bounds] + ["+Inf"]
            for value, series in histogram.series():
                family.add_metric(
                    [*((value,) if label else ()), *_SCOPE.values()],
                    list(zip(bounds, map(float, series.cumulative()), strict=True)),
                    series.total,
                )
            yield family
