"""A worker process's HTTP endpoints: ``/metrics`` (Prometheus text) and ``/healthz``.

Each listens where it is told (loopback unless told otherwise); asked for the
same address, they share one server. They serve from the worker's event loop,
so a scrape refreshes the backlog sample before it renders, and they stop when
the worker does.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from http import HTTPStatus
from typing import TYPE_CHECKING

from .http import HttpServer, Response, Route
from .metrics import METRICS

if TYPE_CHECKING:
    from redis_tasks._worker.health import HealthReport

    from .prometheus import PrometheusExport

__all__ = ["Endpoints"]

logger = logging.getLogger("redis_tasks.worker")

Address = tuple[str, int]


class Endpoints:
    """The metrics and health endpoints of one worker process."""

    def __init__(self, health: Callable[[], HealthReport], export: PrometheusExport | None):
        self._health = health
        self._export = export
        self._servers: list[HttpServer] = []

    async def start(self, *, metrics: Address | None, health: Address | None) -> None:
        """Listen for each endpoint given an address; raises :class:`OSError` if one
        cannot bind. Logs each bound port (``port`` 0 picks a free one)."""
        routes: dict[Address, dict[str, Route]] = {}
        if metrics is not None:
            routes.setdefault(metrics, {})["/metrics"] = self._metrics
        if health is not None:
            routes.setdefault(health, {}).update({"/healthz": self._healthz, "/": self._healthz})
        try:
            for (host, port), table in routes.items():
                server = HttpServer(table)
                bound = await server.start(host, port)
                self._servers.append(server)
                for path in table:
                    logger.info(
                        "serving %s",
                        path,
                        extra={
                            "event": "http_listening",
                            "path": path,
                            "host": host,
                            "port": bound,
                        },
                    )
        except OSError:
            await self.close()
            raise

    async def close(self) -> None:
        """Stop every endpoint."""
        servers, self._servers = self._servers, []
        for server in servers:
            await server.close()

    async def _metrics(self) -> Response:
        export = self._export
        if export is None:
            return Response(HTTPStatus.NOT_FOUND, b"metrics are off\n")
        await METRICS.refresh()
        return Response(HTTPStatus.OK, export.render(), export.content_type)

    async def _healthz(self) -> Response:
        report = self._health()
        status = HTTPStatus.OK if report.ok else HTTPStatus.SERVICE_UNAVAILABLE
        return Response(status, f"{report.reason}\n".encode())
