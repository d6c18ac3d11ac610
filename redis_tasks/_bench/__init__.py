"""``redis-tasks bench``: load tests of redis-tasks, and of peer queues side by side.

The scenarios live in :mod:`._scenarios`, the processes they drive in
:mod:`._systems` (redis-tasks itself, or a peer's adapter in its own virtualenv,
speaking :mod:`._protocol`), the ``mcp`` scenario in :mod:`._mcp_load`, and the
command line in :mod:`._cli` (its options in :mod:`._options`, a run of the
scenarios in :mod:`._run`, guarded by :mod:`._run_guard` so that a Redis it did not
start keeps nothing of the run).
"""
