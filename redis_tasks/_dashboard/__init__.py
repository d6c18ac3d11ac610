"""``redis-tasks dashboard``: a small read-only live page of the work queues.

:mod:`.app` holds the Starlette application and the sampler that reads Redis;
:mod:`.auth` the bearer token every request must carry once one is given (off
loopback one must be); :mod:`.history` the time series the charts draw; ``static/``
the page itself. Nothing served holds a task's ID: a lease names its task by reference.
Needs Starlette and uvicorn (``redis-mcp-tasks[dashboard]``).
"""
