"""Histories of what clients saw, checked against the contract's model.

A fault test that counts lost and doubled tasks cannot see what clients were told:
a ``find_task`` that answered an older status after a failover, an acknowledged
outcome that later reads as never written, two outcomes both acknowledged. Jepsen
finds such anomalies by recording every operation (its invocation, its return and
what it returned, or that nobody knows: a timeout) and searching for an order of
the operations, each taking effect at one instant between its invocation and its
return, that the model would have answered the same way.

- :mod:`.ops`: one recorded operation, and the values clients saw, normalised.
- :mod:`.model`: the model, :class:`~redis_tasks.InMemoryTaskManager` driven one
  operation at a time on one task, with its record saved and restored between
  branches of the search.
- :mod:`.checker`: per task (tasks are independent, so histories stay small), the
  search, and the smallest sub-history that still fails.
"""
