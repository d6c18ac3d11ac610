"""The worker suites' audit: no log record names a task by its whole ID (a capability).

Every record of the ``redis_tasks`` loggers a test makes in this process is kept
(at DEBUG, so every one is made) and, after the test, rendered as the command line
writes it (:class:`~redis_tasks._logs.JsonFormatter`: message and every field);
none may hold a whole task ID. Worker processes are audited by the ``fleet``
fixture, on their log files.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from redis_tasks._logs import JsonFormatter
from tests.support.helpers import whole_task_ids


class _Keep(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture(autouse=True)
def no_whole_task_id_logged() -> Iterator[list[logging.LogRecord]]:
    """Every record the test logged; after it, none holds a whole task ID."""
    logger = logging.getLogger("redis_tasks")
    keep = _Keep()
    level = logger.level
    logger.addHandler(keep)
    logger.setLevel(logging.DEBUG)
    try:
        yield keep.records
    finally:
        logger.removeHandler(keep)
        logger.setLevel(level)
    formatter = JsonFormatter()
    leaked = [line for r in keep.records if whole_task_ids(line := formatter.format(r))]
    assert leaked == [], f"{len(leaked)} log records name a whole task ID: {leaked[:3]}"
