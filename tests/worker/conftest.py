"""The worker suites' audit: no log record names a task by its whole ID (a capability).

Every record of the ``redis_tasks`` loggers a test makes in this process is kept
(at DEBUG, so every one is made) and, after the test, rendered as the command line
writes it (:class:`~redis_tasks._logs.JsonFormatter`: message and every field);
none may hold a whole task ID. Worker processes are audited by the ``fleet``
fixture, on their log files.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.helpers import every_log_line, whole_task_ids


@pytest.fixture(autouse=True)
def no_whole_task_id_logged() -> Iterator[list[str]]:
    """Every line the test logged; after it, none holds a whole task ID."""
    with every_log_line() as lines:
        yield lines
    leaked = [line for line in lines if whole_task_ids(line)]
    assert leaked == [], f"{len(leaked)} log records name a whole task ID: {leaked[:3]}"
