"""How a manager reaches Redis: the :class:`Link` its calls go through, and connecting.

A link is made whole, never patched: a topology, the script runner on it, and the
scripts' ``events`` argument. A manager is built on the link it can make at once
(the one server of the client it was given, or a cluster it was told of) and
works on it even before it is entered. Entering *connects*
(:meth:`Connector.connect`): it asks a URL's server whether it runs a cluster
when told to find out (``from_url(cluster=None)``), starts the topology, creates
the work groups with the scripts loaded, checks eviction, and on a cluster
whether hints may also go out on shard channels. What it returns is a new link,
which the manager keeps in place of the first; the contract, the work queue and
the event publisher read the manager's link at each call, so nothing is rewired.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass

from .client import ConnectionSettings, is_cluster
from .cluster_topology import ClusterTopology
from .keys import KeySpace
from .runner import ScriptRunner
from .setup import may_publish, warn_if_evicting, warn_if_not_persisting
from .topology import StandaloneTopology, Topology
from .work_groups import ensure_groups

__all__ = ["Connector", "Link"]


@dataclass(frozen=True, slots=True)
class Link:
    """What every Redis call of a manager goes through (see the module)."""

    topology: Topology
    #: Runs the scripts on :attr:`topology`.
    runner: ScriptRunner
    #: The emitting scripts' ``event_opts``: the stream's MAXLEN, then ``p`` when each
    #: hint is also published on its shard channel (a cluster's tails listen there).
    events: str
    #: Whether the event publisher's own hints go out on the shard channels too.
    publishing: bool = False
    #: Made by :meth:`Connector.connect`, not the link a manager is built on.
    connected: bool = False


@dataclass(frozen=True, slots=True)
class Connector:
    """What a manager needs to connect, beyond the link it was built on.

    ``settings`` are a URL's (``None`` for a manager given a client): with
    ``detect``, connecting asks that URL's server whether it runs a cluster and
    serves one through them if it does.
    """

    keys: KeySpace
    partitions: int
    events_maxlen: int
    settings: ConnectionSettings | None = None
    detect: bool = False

    def first(self, topology: Topology, runner: ScriptRunner) -> Link:
        """The link a manager is built on: ``runner`` on ``topology``, not publishing."""
        return Link(topology, runner, str(self.events_maxlen))

    async def connect(self, link: Link) -> Link:
        """Connect from ``link`` (see the module) and return the link to use from now on.

        On failure ``link`` stays as it was (a cluster found meanwhile is closed),
        so entering again connects again. On success a server that turned out to
        be a cluster's node is closed: the cluster's own pools serve it now.
        """
        topology = await self._found(link)
        try:
            await topology.start()
            await ensure_groups(
                topology,
                self.keys,
                range(self.partitions),
                call_timeout=topology.timeout,
                load_scripts=True,
            )
            await warn_if_evicting(topology)
            await warn_if_not_persisting(topology)
            if link.runner.watch is not None:
                # wait_replicas="auto": which primaries have a replica, before any write.
                # Best effort: a primary not answered now is asked at its first write.
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(topology.timeout):
                        await link.runner.watch.start(topology)
            # On a cluster, every hint goes out on its stream's shard channel too
            # (see shard_tail.py), once SPUBLISH is known to be allowed.
            publishing = topology.is_cluster and await may_publish(topology, self.keys.events(0))
        except BaseException:
            if topology is not link.topology:
                await topology.aclose()
            raise
        if topology is not link.topology:
            await link.topology.aclose()
        events = f"{self.events_maxlen}p" if publishing else str(self.events_maxlen)
        return Link(topology, link.runner.on(topology), events, publishing, connected=True)

    async def _found(self, link: Link) -> Topology:
        """The topology to connect: a cluster in place of the server first asked, if
        asked to find out (once: a connected link has)."""
        topology = link.topology
        if not self.detect or link.connected:
            return topology
        assert isinstance(topology, StandaloneTopology)
        assert self.settings is not None
        if await is_cluster(topology.client, topology.timeout):
            return ClusterTopology(self.settings)
        return topology
