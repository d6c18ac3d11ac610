"""``RedisTaskManager``: durable, multi-node task state on Redis.

Every operation validates its input in Python (storing nothing when it is
bad: :mod:`redis_tasks._base`), then makes exactly one Lua script call that
authorizes, reads or transitions, and emits the event, atomically
(:mod:`.contract`). This module holds the rest: construction (every attribute
set once, by ``__init__`` and :meth:`~RedisTaskManager.from_url` alike),
connecting on entering (:mod:`.link`), shutdown, and what a manager offers beyond
the contract (its client, its key space, its work queue).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import replace
from types import TracebackType
from typing import Any, Literal, Self

from redis.asyncio import Redis, RedisCluster

from redis_tasks._events import TaskEventPublisher
from redis_tasks._inspection import Inspection, TaskInspection, TaskMatches
from redis_tasks._inspection.tenant_report import TenantReport
from redis_tasks._limits import Limits
from redis_tasks._plans import PlanPolicy

from .client import Client, ConnectionSettings
from .cluster_topology import ClusterTopology
from .contract import RedisContract
from .events import RedisEventPublisher
from .inspect import inspect_partitions, inspect_task, inspect_tenants, match_tasks
from .keys import KeySpace
from .link import Connector, Link
from .replicas import AUTO
from .runner import ScriptRunner
from .topology import StandaloneTopology, Topology
from .work_queue import RedisWorkQueue

__all__ = ["RedisTaskManager"]

logger = logging.getLogger("redis_tasks")


class RedisTaskManager(RedisContract):
    """The task manager on Redis: standalone, Redis Cluster, Valkey; TLS via ``rediss://``.

    Keys live under ``prefix`` in ``partitions`` hash-tagged partitions (see
    :mod:`redis_tasks._redis.keys`), so every script touches one cluster slot. Every
    Redis call is bounded by ``timeout`` seconds and surfaces failures as
    :class:`BackendError`. Every script is safe to run again after a lost reply,
    so redirects, failovers and broken connections are retried within that bound.

    ``wait_replicas`` says which writes wait for replicas. The default, ``"auto"``,
    makes every write a client is told of return only after ``WAIT`` confirms one
    replica, on a primary that has one online; a primary without one (a standalone
    server, a shard whose replica is gone) does not wait and does not fail for it,
    and a primary that loses its last replica is said once (a warning, and the
    ``redis_tasks_replicas_missing{primary}`` gauge; see :mod:`.replicas`).
    ``wait_replicas=N`` asks ``N`` replicas everywhere, within ``wait_timeout`` seconds
    (default: 1, or half of ``timeout`` when that is less) (else :class:`ReplicationError`,
    with the write applied on the primary only); ``0`` never waits (fastest, and a failover
    may lose the failed primary's last writes: a task created just before may be unknown, or
    a finished one run again). A confirmed write survives the loss of its primary. That is
    ``create_task``, a client's answers and cancellation requests, and every outcome, a
    claim's included (one that found a cancellation request or the poison cap and
    ended the task; issue 26's history checker saw each rolled back by a failover). The
    price is a round trip to the replicas on each of those writes (one ``WAIT`` per
    pipeline batch; a claim asks it only when it claimed), and, with a fixed ``N``,
    errors while a shard has fewer replicas than asked (right after a failover, until a
    replica is attached again).

    A worker starts a task only once a replica holds its claim, and so its create: under
    ``"auto"`` a claim whose ``WAIT`` falls short asks it again while its primary has a
    replica online, for up to a third of the lease, then starts the task unconfirmed
    (a ``claim_unconfirmed`` warning) rather than leave it leased; a fixed ``N`` asks
    once. A lease renewal, a status message and an input request are not confirmed; a
    lost claim is harmless (the next gets a higher fence, the lost holder's writes are
    refused), a lost input request is asked again at the worker's next poll.

    Reads are served by the primary, so they may see a write its replicas never got
    before a failover rolls it back; under ``"auto"``, ``find_task`` that finds an
    outcome or an input request (what a client acts on) reads again with a write after
    the read and waits for its replica (:class:`ReplicationError` if none confirms in
    time): one more call for those reads only, where a replica is online.

    Logs and spans name a task by its reference (``11.Wt0jM9``), never its whole
    ID, unless ``whole_task_ids=True`` (see :attr:`whole_task_ids`).
    """

    def __init__(
        self,
        client: Client,
        *,
        prefix: str = "rt",
        partitions: int = 16,
        limits: Limits | None = None,
        timeout: float = 5.0,
        events_maxlen: int = 10_000,
        wait_replicas: int | Literal["auto"] = "auto",
        wait_timeout: float | None = None,
        close_client: bool = False,
        fair_dispatch: bool = True,
        whole_task_ids: bool = False,
        plans: PlanPolicy | None = None,
    ) -> None:
        topology: Topology
        if isinstance(client, RedisCluster):
            topology = ClusterTopology(ConnectionSettings.from_cluster_client(client, timeout))
        else:
            topology = StandaloneTopology(client, timeout, owned=close_client)
        self._setup(
            topology,
            prefix=prefix,
            partitions=partitions,
            limits=limits,
            timeout=timeout,
            events_maxlen=events_maxlen,
            wait_replicas=wait_replicas,
            wait_timeout=wait_timeout,
            close_client=close_client,
            fair_dispatch=fair_dispatch,
            whole_task_ids=whole_task_ids,
            plans=plans,
            cluster_client=client if isinstance(client, RedisCluster) else None,
        )

    def _setup(
        self,
        topology: Topology,
        *,
        prefix: str,
        partitions: int,
        limits: Limits | None,
        timeout: float,
        events_maxlen: int,
        wait_replicas: int | Literal["auto"],
        wait_timeout: float | None,
        close_client: bool,
        fair_dispatch: bool,
        whole_task_ids: bool = False,
        plans: PlanPolicy | None = None,
        cluster_client: RedisCluster | None = None,
        settings: ConnectionSettings | None = None,
        detect: bool = False,
        url: tuple[str, dict[str, Any]] | None = None,
    ) -> None:
        """Every attribute, once, on the link ``topology`` makes: what ``__init__`` and
        :meth:`from_url` share (``settings``, ``detect`` and ``url`` are a URL's)."""
        if wait_replicas != AUTO and (
            isinstance(wait_replicas, bool)
            or not isinstance(wait_replicas, int)
            or wait_replicas < 0
        ):
            raise ValueError('wait_replicas must be "auto" or an int >= 0')
        if wait_timeout is None:
            # Below the call's own deadline, so an unconfirmed write is told as such.
            wait_timeout = min(1.0, timeout / 2)
        keys = KeySpace(prefix)
        connector = Connector(keys, partitions, events_maxlen, settings, detect)
        runner = ScriptRunner(topology, wait_replicas=wait_replicas, wait_timeout=wait_timeout)
        super().__init__(
            keys,
            connector.first(topology, runner),
            limits,
            partitions,
            fair_dispatch=fair_dispatch,
            whole_task_ids=whole_task_ids,
            plans=plans,
        )
        if timeout <= 0 or events_maxlen < 1:
            raise ValueError("timeout and events_maxlen must be positive")
        if wait_replicas and not 0 < wait_timeout < timeout:
            raise ValueError("wait_timeout must be positive and below timeout")
        self._connector = connector
        self._timeout = timeout
        self._close_client = close_client
        # The client property's RedisCluster: the one given, else made from `url` on use.
        self._cluster_client = cluster_client
        self._url = url
        self._publisher = RedisEventPublisher(
            self._current_link, keys, partitions, maxlen=events_maxlen
        )
        # What workers tail: only the changes a running task's worker must see.
        self._signals = RedisEventPublisher(
            self._current_link, keys, partitions, maxlen=events_maxlen, stream=keys.signals
        )
        self._queue = RedisWorkQueue(self._current_link, keys, self._encoder, self._signals)

    def _current_link(self) -> Link:
        # What the work queue and the event publisher call for the link at each use.
        return self._link

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        prefix: str = "rt",
        partitions: int = 16,
        limits: Limits | None = None,
        timeout: float = 5.0,
        events_maxlen: int = 10_000,
        max_connections: int = 256,
        cluster: bool | None = None,
        wait_replicas: int | Literal["auto"] = "auto",
        wait_timeout: float | None = None,
        fair_dispatch: bool = True,
        whole_task_ids: bool = False,
        plans: PlanPolicy | None = None,
        **redis_options: Any,
    ) -> RedisTaskManager:
        """Connect to ``url`` (``redis://`` or ``rediss://``); the manager owns the connections.

        ``cluster=None`` asks the server when the manager is entered and serves a
        Redis Cluster if it runs in cluster mode (any node's URL will do);
        ``True``/``False`` skip the question. Every node (the one server, or each
        cluster primary) gets a blocking pool of ``max_connections``: a burst of
        calls waits for a free connection (within each call's ``timeout``)
        instead of failing. ``redis_options`` go to every connection (e.g.
        ``ssl_ca_certs``, ``username``).
        """
        settings = ConnectionSettings.from_url(
            url, timeout=timeout, max_connections=max_connections, options=redis_options
        )
        topology: Topology
        if cluster:
            topology = ClusterTopology(settings)
        else:
            client = Redis.from_pool(settings.pool(*settings.seeds[0]))
            topology = StandaloneTopology(client, timeout, owned=True)
        manager = cls.__new__(cls)
        manager._setup(
            topology,
            prefix=prefix,
            partitions=partitions,
            limits=limits,
            timeout=timeout,
            events_maxlen=events_maxlen,
            wait_replicas=wait_replicas,
            wait_timeout=wait_timeout,
            close_client=True,
            fair_dispatch=fair_dispatch,
            whole_task_ids=whole_task_ids,
            plans=plans,
            settings=settings,
            detect=cluster is None,
            url=(url, {**redis_options, "max_connections": max_connections}),
        )
        return manager

    @property
    def prefix(self) -> str:
        """The key prefix."""
        return self._keys.prefix

    @property
    def client(self) -> Client:
        """A redis-py client for your own commands (a ``RedisCluster`` on a cluster).

        The library's own calls do not go through it: they use a pool per node
        (see :mod:`redis_tasks._redis.topology`). On a cluster it is made on first use
        and closed with the manager.
        """
        topology = self._link.topology
        if isinstance(topology, StandaloneTopology):
            return topology.client
        if self._cluster_client is None:
            assert self._url is not None
            url, options = self._url
            self._cluster_client = RedisCluster.from_url(
                url,
                socket_timeout=self._timeout,
                socket_connect_timeout=self._timeout,
                **options,
            )
        return self._cluster_client

    def primary_clients(self) -> list[Redis]:
        """A redis-py client per primary (the one server on standalone), for
        per-node commands of your own (``INFO``, ``SCAN``); the library's pools."""
        return [node.client for node in self._link.topology.primaries()]

    @property
    def is_cluster(self) -> bool:
        """Whether this manager talks to a Redis Cluster."""
        return self._link.topology.is_cluster

    @property
    def keyspace(self) -> KeySpace:
        """The key naming of this manager's prefix."""
        return self._keys

    @property
    def timeout(self) -> float:
        """Seconds every Redis call may take."""
        return self._timeout

    async def __aenter__(self) -> Self:
        """Connect (:meth:`.link.Connector.connect`): detect a cluster if asked to, load
        the scripts, create the work groups; the link it makes serves from now on."""
        self._link = await self._connector.connect(self._link)
        return self

    # The link's parts by their old names, which tests and diagnostics read.

    @property
    def _topology(self) -> Topology:
        return self._link.topology

    @property
    def _runner(self) -> ScriptRunner:
        return self._link.runner

    @property
    def _events(self) -> str:
        return self._link.events

    @_events.setter
    def _events(self, value: str) -> None:
        # For tests that stand in for a writer of an older version (one whose scripts
        # do not publish): the link is replaced whole, as connecting replaces it.
        self._link = replace(self._link, events=value)

    async def ensure_work_groups(
        self, partitions: Iterable[int], *, load_scripts: bool = False
    ) -> None:
        """Create the ``workers`` group on each partition's work stream if it is missing
        (``load_scripts``: and load every script on every primary)."""
        await self._queue.ensure_groups(partitions, load_scripts=load_scripts)

    async def inspect(
        self, partitions: Iterable[int] | None = None, *, sample: int = 256
    ) -> Inspection:
        """The work queues as an operator sees them (``redis-tasks inspect``): per
        partition the backlog, pending entries, consumers, the oldest waiting entry,
        the oldest ``sample`` leases, terminal transitions and pickup times.

        One read-only script call per partition (``lua/inspect_queue.lua``); no task
        data (origin, payload, answers, result) is read.
        """
        chosen = range(self.partitions) if partitions is None else partitions
        return await inspect_partitions(self._link.runner, self._keys, chosen, sample=sample)

    async def inspect_tenants(
        self, partitions: Iterable[int] | None = None, *, sample: int = 256
    ) -> TenantReport:
        """The tenants as an operator sees them (``redis-tasks tenants``): those seen in
        the last day (a plan kept, a create refused) and those waiting, up to
        ``sample`` of each a partition, each with its open, running and queued
        tasks, its plan and its refusals (:mod:`redis_tasks._inspection.tenant_report`).

        One read-only script call per partition (``lua/inspect_tenants.lua``);
        tenants appear by digest, no key or task data is read.
        """
        chosen = range(self.partitions) if partitions is None else partitions
        return await inspect_tenants(self._link.runner, self._keys, chosen, sample=sample)

    async def inspect_task(self, task_id: str) -> TaskInspection | None:
        """One task's status, times, lease, fence, attempts and work entry, for an
        operator: no authorization is checked, and no task data is read. ``None``
        for an unknown, expired or malformed ID."""
        return await inspect_task(self._link.runner, self._keys, task_id)

    async def match_tasks(self, ref: str) -> TaskMatches | None:
        """The live tasks a task reference (``11.Wt0jM9``, as logs, spans and the
        dashboard name a task) or any longer prefix of an ID matches, by their
        whole IDs, for an operator (``redis-tasks inspect <reference>``); ``None``
        when ``ref`` is neither. A bounded ``SCAN`` of the partition's keys
        (:func:`.inspect.match_tasks`): the user needs ``+scan``."""
        return await match_tasks(self._link.topology, self._keys, ref)

    @property
    def work_queue(self) -> RedisWorkQueue:
        """The work queue workers of this manager read, claim and renew through."""
        return self._queue

    @property
    def events_arg(self) -> str:
        """The emitting scripts' ``event_opts`` argument: the stream's MAXLEN, then ``p``
        when each hint is also published on its shard channel."""
        return self._link.events

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Stop the event tails and close the connections this manager owns."""
        await self._publisher.aclose()
        await self._signals.aclose()
        await self._link.topology.aclose()
        if self._cluster_client is not None and (self._close_client or self._url is not None):
            await self._cluster_client.aclose()

    @property
    def event_publisher(self) -> TaskEventPublisher:
        """The Redis-stream publisher (same instance for the manager's lifetime)."""
        return self._publisher
