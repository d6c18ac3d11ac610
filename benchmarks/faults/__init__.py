"""Faults under load: Redis paused, connections killed and the server restarted while the
lifecycle load runs at full speed. No task may be lost or completed twice, and every call
must end within its timeout.

Usage:
    python -m benchmarks.faults                        # 120 s on a private redis-server
    python -m benchmarks.faults --seconds 30 --json /tmp/faults.json
    python -m benchmarks.faults --redis-url redis://127.0.0.1:6379/0   # no restarts there

The load is the ``lifecycle`` scenario's, with no pauses of its own: ``--clients``
coroutines each create a task through one :class:`RedisTaskManager` (every call bounded by
``--timeout``), follow it to terminal (``find_task``, woken by the event publisher) and
start the next. ``--workers`` real ``redis-tasks worker`` processes run the tasks with
:func:`handler`, which records its run (its fence, in a set beside the task) before it
returns ``{fence, pid, attempt}``.

While the load runs, faults are injected in turn, ``--every`` seconds apart and at least
``--gap`` seconds after the previous one healed (the first after ``--warmup`` seconds):

- ``pause_all``: ``CLIENT PAUSE <ms> ALL``, alternately 1.5x and 0.5x the timeout long;
- ``kill``: ``CLIENT KILL TYPE normal`` (every client connection, the workers' included);
- ``pause_write``: ``CLIENT PAUSE <ms> WRITE``, alternately 0.5x and 1.5x the timeout;
- ``restart``: the server stopped, alternately by SIGKILL and SIGTERM, and started again
  on the same port and data directory; its append-only file is fsynced on every write
  (``appendfsync always``), so every acknowledged write survives. Only on the private
  server: a Redis given with ``--redis-url`` is not ours to restart;
- ``pause_write_kill``: a write pause of twice the timeout, and every connection killed
  three quarters of a timeout into it: the calls waiting on the pause fail, are retried,
  and wait on the pause again.

After the last fault the load goes on for ``--recovery`` seconds and stops creating. The
harness waits (on conditions, at most ``--settle`` seconds) until every stored task is
terminal, then checks the promises:

- no task lost: every task whose create returned is found and ends terminal, and so does
  every task whose create raised but was stored all the same (an *ambiguous* outcome,
  counted: the caller cannot tell, and the work still runs);
- none completed twice: the workers' logs record at most one accepted completion per
  task, for the fence of the stored result. Handlers that ran more than once (at-least-once
  execution, after a lease ran out during a fault: the ``--lease``, 3 s, is shorter than
  the longest pauses on purpose) are counted as re-runs, which is allowed; every task ends
  ``completed``, since the handler never fails;
- every call honours its timeout: each create and find returned or raised within
  ``--timeout`` plus ``--slack`` seconds (the slack covers this process's event-loop lag,
  measured and reported), and anything it raised was a ``BackendError``;
- workers and managers recover by themselves: the worker processes are alive, each ran a
  task created after the last fault healed, creates succeed again after every fault, the
  load manager's event tail delivers again after the last one, and no worker logged an
  error;
- every worker stops cleanly when the run ends (SIGTERM), with each handler slot it took
  given back exactly once: the worker checks that as it stops and logs any slot given back
  twice, taken beyond its lease, or not back.

It prints a summary and exits 1 if any promise broke; ``--json PATH`` writes every figure.
The faults hit every client of the server: give ``--redis-url`` only for a Redis of your
own. No URL, origin or payload is printed; worker logs (task IDs, fences) stay in a
temporary directory (``--keep-logs DIR`` keeps them).
"""

from __future__ import annotations

from .cli import main, summary
from .handler import handler, runs_key
from .injector import Injector
from .load import Load
from .processes import PrivateRedis, WorkerProcess, start_worker
from .records import KINDS, Fault, LogCounter, Op, Settings, WorkerLogs
from .run import run_faults

__all__ = [
    "KINDS",
    "Fault",
    "Injector",
    "Load",
    "LogCounter",
    "Op",
    "PrivateRedis",
    "Settings",
    "WorkerLogs",
    "WorkerProcess",
    "handler",
    "main",
    "run_faults",
    "runs_key",
    "start_worker",
    "summary",
]
