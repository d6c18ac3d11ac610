"""The transport of the Lua scripts: EVALSHA on the node that owns the keys.

The catalogue (contracts, sources, SHAs, and the bindings that make a call
from named arguments) is :mod:`.scripts`; this module only runs the calls.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from redis.exceptions import NoScriptError

from redis_tasks._codes import ReturnCode, error_for
from redis_tasks._errors import BackendError, InternalError, ReplicationError

from .client import backend_errors, counted
from .replicas import AUTO, ReplicaWatch
from .scripts import Call
from .topology import Node, Topology

__all__ = ["ScriptRunner"]


def _written(wrote: Callable[[list[Any]], bool]) -> Callable[[Any], bool]:
    """Whether a raw reply is one ``wrote`` says must be confirmed (an OK script reply)."""
    return lambda reply: (
        isinstance(reply, list) and bool(reply) and reply[0] == ReturnCode.OK and wrote(reply)
    )


class ScriptRunner:
    """Runs scripts on a topology: EVALSHA, NOSCRIPT reload, one deadline, error mapping.

    Redis errors of every kind become :class:`BackendError` here (through
    :data:`.client.backend_errors`, the one boundary between the client and the
    library's exception tree); anything else is a bug and passes as it is. Scripts are
    idempotent, so a lost reply can be retried: create finds its own task,
    finish accepts the identical transition again, claim returns the caller's
    own live lease, and the rest change nothing when repeated. Redirects,
    failovers and broken connections are retried by :meth:`Topology.call`
    within the call's one deadline (``timeout``).
    """

    __slots__ = (
        "_wait",
        "_wait_timeout",
        "_watch",
        "timeout",
        "topology",
        "wait_replicas",
    )

    def __init__(
        self,
        topology: Topology,
        *,
        wait_replicas: int | str = 0,
        wait_timeout: float = 1.0,
        watch: ReplicaWatch | None = None,
    ) -> None:
        self.topology = topology
        self.timeout = topology.timeout
        #: ``"auto"`` (:mod:`.replicas`) asks one replica of a primary that has one.
        self._watch = (watch or ReplicaWatch()) if wait_replicas == AUTO else None
        #: How many replicas a confirmed write needs where it waits.
        self.wait_replicas = 1 if self._watch is not None else int(wait_replicas)
        self._wait_timeout = wait_timeout
        wait_ms = max(1, int(wait_timeout * 1000))
        self._wait = (b"WAIT", self.wait_replicas, wait_ms) if self.wait_replicas > 0 else None

    @property
    def watch(self) -> ReplicaWatch | None:
        """The replica watch of ``wait_replicas="auto"`` (``None`` for a fixed count)."""
        return self._watch

    def on(self, topology: Topology) -> ScriptRunner:
        """A runner like this one (the same ``WAIT``, the same watch) on ``topology``: this
        one if it runs there already."""
        if topology is self.topology:
            return self
        return ScriptRunner(
            topology,
            wait_replicas=AUTO if self._watch is not None else self.wait_replicas,
            wait_timeout=self._wait_timeout,
            watch=self._watch,
        )

    async def run(self, call: Call, *, durable: bool = False) -> list[Any]:
        """Run ``call`` (what a binding made: ``scripts.find(task=..., ...)``) and
        return its reply after a successful code.

        Raises the mapped exception when the script answers a non-OK code.
        ``durable`` waits for ``wait_replicas`` replicas (if set) before returning.
        """
        reply = await self.run_raw(call, durable=durable)
        code = reply[0]
        if code != ReturnCode.OK:
            detail = reply[1] if len(reply) > 1 and isinstance(reply[1], bytes) else None
            raise error_for(code, detail)
        return reply

    async def run_raw(
        self,
        call: Call,
        *,
        durable: bool = False,
        batch: bool = True,
        wrote: Callable[[list[Any]], bool] | None = None,
    ) -> list[Any]:
        """Run ``call`` on the node that owns its keys and return its reply,
        whatever its code.

        ``wrote`` says which of a durable call's replies made a write its replicas
        must confirm (by default, any that answered OK): a worker's claim waits only
        when it claimed.

        ``batch=False`` sends the call on a connection of its own at once instead
        of with the auto-pipeline's next batch: for a call that others wait on (a
        worker's claim).
        """
        reply, acked = await self._run(call, durable, batch, wrote)
        if acked is not None:
            # Only a script that answered OK wrote something for the replicas to
            # confirm. Any other answer (a stale fence, a terminal task) changed
            # nothing: it reaches the caller as what it is, not as unconfirmed.
            ok = reply[0] == ReturnCode.OK
            if ok and (wrote is None or wrote(reply)) and acked < self.wait_replicas:
                raise self._unconfirmed(acked)
        return reply

    async def run_confirmed(
        self,
        call: Call,
        *,
        batch: bool = True,
        wrote: Callable[[list[Any]], bool] | None = None,
        hold: Callable[[list[Any]], bool] | None = None,
        hold_s: float = 0.0,
        eager: bool = False,
    ) -> tuple[list[Any], ReplicationError | None]:
        """Run a durable ``call`` and return its reply, whatever its code, with the
        error its writes get if fewer than ``wait_replicas`` replicas confirmed them
        (``None`` when they did, or none were asked for): for a call whose parts each
        answer for themselves (``finish_batch``, a ``claim_next`` batch), where only
        the parts that wrote are unconfirmed. ``batch`` and ``wrote`` as for
        :meth:`run_raw` (a call sent at once asks its ``WAIT`` only when ``wrote``
        says the reply needs it).

        ``hold`` (with ``batch=False``) says which replies must not be handed back
        before a replica holds them (a claim that starts a task): under
        ``wait_replicas="auto"`` their ``WAIT`` is asked again while it falls short,
        the primary still has a replica online, and both the call's deadline and
        ``hold_s`` seconds from its start leave room for another; past that the
        reply comes back unconfirmed. ``eager`` sends the ``WAIT`` with the call, in
        the same write (a call whose reply nearly always needs it: one round trip).
        """
        reply, acked = await self._run(call, True, batch, wrote, hold, hold_s, eager)
        if acked is None or acked >= self.wait_replicas:
            return reply, None
        return reply, self._unconfirmed(acked)

    async def confirms(self, key: str) -> bool:
        """Whether a read of ``key`` should confirm what it saw (see ``find``): under
        ``"auto"``, where the primary that owns ``key`` has a replica online. Not with
        a fixed count: a shard short of replicas (a promoted one, until another
        attaches) would then answer no outcome at all."""
        watch = self._watch
        return watch is not None and await watch.wants_wait(self.topology.node_for(key))

    def _again(
        self, hold: Callable[[list[Any]], bool], node: Node, until: float
    ) -> Callable[[Any, int], Awaitable[bool]]:
        """Whether a held reply's ``WAIT`` that fell short is asked again on ``node``:
        while ``node`` has a replica online and ``until`` (loop time) leaves room for
        one more ``WAIT`` and the reply's way back."""
        watch = self._watch
        assert watch is not None
        room = 1.5 * self._wait_timeout
        loop = asyncio.get_running_loop()

        async def again(reply: Any, acked: int) -> bool:
            return (
                hold(reply) and loop.time() + room < until and await watch.still_has_replica(node)
            )

        return again

    def _unconfirmed(self, acked: int) -> ReplicationError:
        return counted(
            ReplicationError(
                f"only {acked} of {self.wait_replicas} replicas confirmed the write in time"
            )
        )

    async def _run(
        self,
        call: Call,
        durable: bool,
        batch: bool,
        wrote: Callable[[list[Any]], bool] | None = None,
        hold: Callable[[list[Any]], bool] | None = None,
        hold_s: float = 0.0,
        eager: bool = False,
    ) -> tuple[list[Any], int | None]:
        """``call``'s reply, and how many replicas confirmed it (``None``: not asked).

        A call sent at once (``batch=False``) whose ``wrote`` says which replies need
        confirming asks its ``WAIT`` after the reply, on the same connection, only for
        those: a worker's claim pays the replica round trip only when it claimed.
        """
        script, keys, args = call
        wait = self._wait if durable else None
        watch = self._watch
        topology = self.topology
        after = None if batch or wrote is None else _written(wrote)
        loop = asyncio.get_running_loop()
        # The first attempt is bounded by its batch's own deadline, which saves a
        # timer per call at tens of thousands of calls a second; retries get what
        # is left of the call's one deadline.
        start = loop.time()
        deadline = start + self.timeout
        held_until = min(deadline, start + hold_s)

        async def attempt(node: Node, asking: bool) -> tuple[Any, int | None]:
            pipeline = node.pipeline
            command: tuple[Any, ...] = (b"EVALSHA", script.sha, len(keys), *keys, *args)
            # "auto": no WAIT where no replica could answer it.
            sent = wait if wait is None or watch is None or await watch.wants_wait(node) else None
            # "auto": a reply ``hold`` names waits while its primary has a replica.
            again = None
            if sent is not None and hold is not None and watch is not None:
                again = self._again(hold, node, held_until)
            for _ in range(2):
                try:
                    if batch:
                        result = await pipeline.call(command, asking=asking, wait=sent)
                    elif sent is not None and after is not None:
                        result = await pipeline.call_then_wait(
                            command, sent, after, asking=asking, again=again, eager=eager
                        )
                        if result[1] is None:
                            return result  # nothing the replicas must confirm
                    else:
                        result = await pipeline.call_now(command, asking=asking, wait=sent)
                    break
                except NoScriptError:
                    # A restart, failover or SCRIPT FLUSH emptied the cache; EVAL runs
                    # the script and caches it again for the next EVALSHA.
                    command = (b"EVAL", script.source, len(keys), *keys, *args)
            else:
                raise counted(BackendError("the script could not be loaded"))
            if sent is None:
                return result, None
            reply, acked = result
            if watch is not None and acked < 1 and not await watch.still_has_replica(node):
                # Its replica is gone: nothing could confirm this write, and it stands.
                return reply, None
            return reply, acked

        with backend_errors:
            reply, acked = await topology.call(
                topology.slot(keys[0]), attempt, deadline=deadline, timed=False
            )
        if not isinstance(reply, list) or not reply or not isinstance(reply[0], int):
            raise InternalError("unexpected script reply")
        return reply, acked
