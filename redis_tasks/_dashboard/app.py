"""The dashboard's web application: a read-only page and the one JSON document it polls.

A background task reads the queues every ``interval`` seconds
(``RedisTaskManager.inspect``: one read-only script call per partition) into a
:class:`~.history.History`, whatever the number of pages open, so a page costs
Redis nothing and every page shows the same figures. The page (``static/``)
polls ``/api/state`` and draws the charts itself; it has no third-party code and
loads nothing from elsewhere (a closed network is the norm where Redis runs).

Read-only by construction: GET routes only, no task data in anything served (an
:class:`~redis_tasks._inspection.Inspection` holds none: a lease names its task by
reference, ``11.Wt0jM9``, never by ID, which is a capability; tenants are their
digests, and the dashboard names none), a strict content security policy, and a
``Host`` check so that a page of another site cannot read the figures through DNS
rebinding. With a token (:mod:`.auth`, required off loopback) every request
without it is refused before anything else looks at it. Redis down is shown, not
fatal: the sampler keeps trying with backoff and the page says since when it failed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Sequence
from importlib import resources
from typing import Any, Final

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from redis_tasks._cancel import cancel_and_wait
from redis_tasks._errors import BackendError, InternalError
from redis_tasks._inspection.tenant_report import TenantReport
from redis_tasks._redis.manager import RedisTaskManager

from .auth import BearerToken
from .history import History

__all__ = ["LOOPBACK_HOSTS", "Sampler", "dashboard_app"]

logger = logging.getLogger("redis_tasks.dashboard")

#: Host names a page may be reached by when the dashboard listens on loopback.
LOOPBACK_HOSTS: Final = ("127.0.0.1", "localhost")
#: Lease rows per partition in each state document.
LEASE_ROWS: Final = 10
#: Tenants listed by each order (open, queued, running, refused).
TENANT_ROWS: Final = 10
_SECURITY_HEADERS: Final = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
}
_STATIC: Final = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/app.js": ("app.js", "text/javascript; charset=utf-8"),
    "/style.css": ("style.css", "text/css; charset=utf-8"),
}


class Sampler:
    """Reads the queues every ``interval`` seconds into :attr:`history`, entering the
    manager on the first success and retrying (with backoff) while Redis fails."""

    def __init__(
        self,
        manager: RedisTaskManager,
        *,
        interval: float = 2.0,
        sample: int = 256,
        partitions: Sequence[int] | None = None,
    ) -> None:
        self.manager = manager
        self.interval = interval
        self.sample = sample
        self.partitions = None if partitions is None else list(partitions)
        self.history = History()
        #: The latest tenants' reading (``redis-tasks tenants``' figures), if any.
        self.tenants: TenantReport | None = None
        self.failing_since: float | None = None
        self.readings = 0
        self._entered = False

    async def read_once(self) -> None:
        """One reading (entering the manager first if need be); failures are recorded."""
        try:
            if not self._entered:
                await self.manager.__aenter__()
                self._entered = True
            reading = await self.manager.inspect(self.partitions, sample=self.sample)
            tenants = await self.manager.inspect_tenants(
                self.partitions, sample=max(self.sample, 1)
            )
        except (BackendError, InternalError) as exc:
            if self.failing_since is None:
                self.failing_since = time.time()
                logger.warning(
                    "dashboard cannot read Redis",
                    extra={"event": "dashboard_read_failed", "error": type(exc).__name__},
                )
            return
        self.failing_since = None
        running = {t: f.running for t, f in reading.tenants.figures.items() if f.running}
        self.tenants = tenants.with_running(running)
        self.history.add(reading)
        self.readings += 1

    async def run(self) -> None:
        """Read until cancelled: every ``interval``, or after a backoff while failing.

        Any error but Redis's (which :meth:`read_once` records) is a bug, which
        reading again would repeat: it stops the sampling, logged once with its
        traceback, and the page keeps the last reading.
        """
        delay = self.interval
        while True:
            try:
                await self.read_once()
            except Exception:
                logger.exception("dashboard sampling stopped by an unexpected error")
                return
            delay = self.interval if self.failing_since is None else min(delay * 2, 30.0)
            await asyncio.sleep(delay)

    async def close(self) -> None:
        """Close the manager's connections if it was entered."""
        if self._entered:
            self._entered = False
            await self.manager.__aexit__(None, None, None)

    def state(self, since: int | None) -> dict[str, Any]:
        """The document ``/api/state`` serves: settings, the latest reading, and the
        points after ``since`` (ms; all of them without it)."""
        latest = self.history.latest
        points = self.history.points()
        if since is not None:
            points = [p for p in points if p["at_ms"] > since]
        return {
            "prefix": self.manager.prefix,
            "partitions": self.manager.partitions,
            "interval_s": self.interval,
            "readings": self.readings,
            "failing_since": self.failing_since,
            "inspection": None if latest is None else latest.to_json(leases=LEASE_ROWS),
            "tenants": None if self.tenants is None else self.tenants.to_json(top=TENANT_ROWS),
            "points": points,
        }


def _asset(name: str) -> bytes:
    return resources.files(__package__).joinpath("static", name).read_bytes()


def dashboard_app(
    sampler: Sampler,
    *,
    allowed_hosts: Sequence[str] = LOOPBACK_HOSTS,
    token: str | None = None,
) -> Starlette:
    """The Starlette application serving ``sampler``'s figures; its lifespan runs the
    sampler and closes the manager at shutdown. With ``token``, only requests that
    carry it are served (:class:`.auth.BearerToken`)."""
    assets = {path: (_asset(name), kind) for path, (name, kind) in _STATIC.items()}

    async def static(request: Request) -> Response:
        body, kind = assets[request.url.path]
        return Response(body, media_type=kind, headers=_SECURITY_HEADERS)

    async def state(request: Request) -> Response:
        raw = request.query_params.get("since")
        try:
            since = None if raw is None else int(raw)
        except ValueError:
            return JSONResponse({"error": "since must be an integer"}, 400, _SECURITY_HEADERS)
        return JSONResponse(sampler.state(since), headers=_SECURITY_HEADERS)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        running = asyncio.create_task(sampler.run())
        try:
            yield
        finally:
            await cancel_and_wait([running])  # its Redis calls may lose a cancellation
            await sampler.close()

    routes = [Route(path, static, methods=["GET"]) for path in _STATIC]
    routes.append(Route("/api/state", state, methods=["GET"]))
    # The token first: a request without it learns nothing, not even a bad host.
    middleware = [] if token is None else [Middleware(BearerToken, token=token)]
    middleware.append(Middleware(TrustedHostMiddleware, allowed_hosts=list(allowed_hosts)))
    return Starlette(routes=routes, middleware=middleware, lifespan=lifespan)
