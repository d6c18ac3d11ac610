"""A bench run that leaves the Redis it loads as it found it, however it ends.

:func:`guarded` runs the scenarios in a task of their own. SIGINT (Ctrl-C), SIGTERM
and SIGHUP cancel that task (again every few seconds, should a library swallow a
cancellation on the way), and whichever way it ends (done, a signal, an exception,
a child that died) the run's child processes are killed and, on a Redis the bench
did not start, its :class:`RunGuard` removes every key of the run before
:func:`guarded` returns; a signal then comes out as :class:`Interrupted`.

:class:`RunGuard` holds the run's claim on such a Redis: before any load it removes
what killed runs left (:func:`~._leftovers.remove_earlier_runs`), says what this
run will write, refuses when the server has no room for it (:class:`Refused`), and
registers the run; its connections, named after the run, tell other processes it
is alive.
"""

from __future__ import annotations

import asyncio
import signal
import sys
from collections.abc import Awaitable, Callable
from typing import Final, TypeVar

from redis.exceptions import RedisError

from ._children import kill_all
from ._footprint import Footprint, size
from ._leftovers import RunKeys, remove_earlier_runs
from ._namespace import RunNames

__all__ = ["CleanupFailed", "Interrupted", "Refused", "RunGuard", "guarded"]

T = TypeVar("T")

_KEEP_ALIVE: Final = 5.0  # seconds between PINGs of the run's named connections
_RECANCEL: Final = 5.0  # seconds a cancelled run gets before it is cancelled again


class Interrupted(Exception):
    """The run was stopped by a signal (and cleaned up after): which one, and how many
    keys of the run were removed (None on a private server, thrown away whole)."""

    def __init__(self, signum: int, removed: int | None) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum
        self.removed = removed


class Refused(Exception):
    """The server has no room for the run (the message gives the numbers)."""


class CleanupFailed(Exception):
    """The run's keys could not be removed at its end (the server went away, say)."""


class RunGuard:
    """A run's hold on a Redis it did not start (see the module's docstring)."""

    def __init__(self, url: str, names: RunNames) -> None:
        self.names = names
        self._keys = RunKeys(url, client_name=names.label)
        self._connected = False
        self._registered = False
        self._keep_alive: asyncio.Task[None] | None = None

    async def start(self, plan: Footprint, *, allow_large: bool) -> None:
        """Before any load: clean up after killed runs, say what this one writes,
        refuse if it does not fit (unless ``allow_large``), register."""
        await self._keys.__aenter__()
        self._connected = True
        earlier = await remove_earlier_runs(self._keys, everything=False)
        if earlier.runs or earlier.live:
            _say(earlier.summary())
        problem = plan.too_large_for(await self._keys.memory_limits())
        _say(
            f"run {self.names.label} writes up to about {plan.keys:,} keys, "
            f"{size(plan.bytes)}, at once ({plan.scenario}); all named "
            f"{self.names.pattern}, removed when it ends"
        )
        if problem is not None and not allow_large:
            raise Refused(
                f"not loading this server: {problem}; use smaller sizes, or pass "
                "--allow-large to run anyway"
            )
        await self._keys.register(self.names)
        self._registered = True
        self._keep_alive = asyncio.create_task(self._keys.keep_alive(_KEEP_ALIVE))

    async def finish(self) -> int:
        """Remove the run's keys, then its registry entry; close. How many keys went."""
        removed = 0
        if self._keep_alive is not None:
            self._keep_alive.cancel()
            await asyncio.gather(self._keep_alive, return_exceptions=True)
            self._keep_alive = None
        try:
            if self._registered:
                removed = await self._keys.remove(self.names.pattern)
                await self._keys.deregister([self.names.run_id])
                self._registered = False
        finally:
            if self._connected:
                self._connected = False
                await self._keys.__aexit__()
        return removed


def _say(text: str) -> None:
    print(f"redis-tasks bench: {text}", file=sys.stderr, flush=True)


async def guarded(body: Callable[[], Awaitable[T]], guard: RunGuard | None) -> T:
    """``body()``'s result, the run cleaned up after whatever way it ended.

    Raises :class:`Interrupted` after a SIGINT, SIGTERM or SIGHUP, and ``body``'s own
    exception after it raised, in both cases once the children are gone and the
    run's keys removed. A second signal during the clean-up is ignored: the
    clean-up is what it would cut short.
    """
    loop = asyncio.get_running_loop()
    task = asyncio.ensure_future(body())
    signals: list[int] = []
    stop = asyncio.Event()

    def on_signal(signum: int) -> None:
        if not signals:
            signals.append(signum)
            task.cancel()
            stop.set()

    # SIGHUP too: the terminal of an operator's session that dropped.
    handled = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    for signum in handled:
        loop.add_signal_handler(signum, on_signal, signum)
    try:
        stopped = asyncio.ensure_future(stop.wait())
        await asyncio.wait({task, stopped}, return_when=asyncio.FIRST_COMPLETED)
        stopped.cancel()
        while not task.done():
            done, _ = await asyncio.wait({task}, timeout=_RECANCEL)
            if not done:
                task.cancel()  # a cancellation was swallowed on the way: ask again
        removed: int | None = None
        await kill_all()
        if guard is not None:
            try:
                removed = await guard.finish()
            except (RedisError, OSError, TimeoutError) as exc:
                if not task.cancelled():
                    task.exception()  # retrieved: the keys left behind are the news now
                raise CleanupFailed(
                    f"could not remove the keys of run {guard.names.label} "
                    f"({type(exc).__name__}); `redis-tasks bench --clean` removes them later"
                ) from exc
    finally:
        if not task.done():  # the clean-up itself failed: do not leave the run going
            task.cancel()
        for signum in handled:
            loop.remove_signal_handler(signum)
    if signals:
        if not task.cancelled():
            task.exception()  # retrieved: the signal is the news, not what it cut short
        raise Interrupted(signals[0], removed)
    if removed:  # a measurement that failed (a worker died, say) did not clean up
        _say(f"removed the {removed:,} keys that failed measurements left")
    return task.result()
