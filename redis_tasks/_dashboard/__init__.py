"""``redis-tasks dashboard``: a small read-only live page of the work queues.

:mod:`.app` holds the Starlette application and the sampler that reads Redis;
:mod:`.history` the time series the charts draw; ``static/`` the page itself.
Needs Starlette and uvicorn (``redis-mcp-tasks[dashboard]``).
"""
