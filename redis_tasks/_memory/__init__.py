"""The in-memory backend: the process-local reference the Redis backend is held to.

``manager.py`` holds :class:`InMemoryTaskManager` (the contract, each operation
the mirror of its script); ``records.py`` the task records, their lock and clock,
which the manager hands to its work queue; ``work_queue.py`` the queue, on a
stream per partition (``stream.py``), with the mirrors of the scripts' shared
steps: a claim (``claim.py``), the terminal write (``terminal.py``), fair dispatch
(``dispatch.py``) from the tenant queues (``tenants.py``). Nothing here imports
``redis``.
"""

from .manager import InMemoryTaskManager

__all__ = ["InMemoryTaskManager"]
