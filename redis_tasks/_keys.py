"""Key naming: the one place that knows how redis-tasks lays out Redis keys.

Every key carries the hash tag ``{<prefix>:<partition>}`` so that a task's keys
and its partition's streams share one Redis Cluster slot and each script
touches a single slot::

    {rt:7}:task:<id>        hash: the task record
    {rt:7}:task:<id>:req    hash: outstanding input requests (key -> kind + request)
    {rt:7}:task:<id>:iss    hash: every input key ever issued (key -> fingerprint)
    {rt:7}:task:<id>:ans    hash: accepted answers the worker has not taken yet
    {rt:7}:task:<id>:jrn    hash: the answer journal (every accepted answer)
    {rt:7}:work             stream + consumer group ``workers``: tasks to run
    {rt:7}:events           stream, MAXLEN ~ bounded: one task-ID entry per change

Every task key expires at ``created + ttl``; the two streams are per-partition
infrastructure, bounded by acknowledgement (work) and by MAXLEN (events).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from ._ids import MAX_PARTITIONS

__all__ = ["WORK_GROUP", "KeySpace", "TaskKeys"]

#: The consumer group every worker reads the work streams through.
WORK_GROUP: Final = "workers"
_PREFIX = re.compile(r"[A-Za-z0-9_.\-]{1,64}")


@dataclass(frozen=True, slots=True)
class TaskKeys:
    """All keys of one task, in the order the scripts' headers use."""

    task: str
    requests: str
    issued: str
    answers: str
    journal: str
    work: str
    events: str

    def terminal(self) -> tuple[str, ...]:
        """The KEYS of scripts that may end the task, in the order ``terminate()`` takes."""
        return (
            self.task,
            self.requests,
            self.issued,
            self.answers,
            self.journal,
            self.work,
            self.events,
        )


class KeySpace:
    """Names the keys of one prefix."""

    __slots__ = ("prefix",)

    def __init__(self, prefix: str) -> None:
        if not isinstance(prefix, str) or not _PREFIX.fullmatch(prefix):
            # Braces or colons in a prefix would break the hash tag or let one
            # prefix's ACL pattern (~{rt:*) cover another's keys.
            raise ValueError("prefix must be 1-64 characters of A-Z a-z 0-9 _ . -")
        self.prefix = prefix

    def tag(self, partition: int) -> str:
        """The hash tag of ``partition``."""
        if not 0 <= partition < MAX_PARTITIONS:
            raise ValueError("partition out of range")
        return f"{{{self.prefix}:{partition}}}"

    def task(self, partition: int, task_id: str) -> TaskKeys:
        """Every key of the task ``task_id`` stored in ``partition``."""
        tag = self.tag(partition)
        base = f"{tag}:task:{task_id}"
        return TaskKeys(
            task=base,
            requests=f"{base}:req",
            issued=f"{base}:iss",
            answers=f"{base}:ans",
            journal=f"{base}:jrn",
            work=f"{tag}:work",
            events=f"{tag}:events",
        )

    def work(self, partition: int) -> str:
        """The work stream of ``partition``."""
        return f"{self.tag(partition)}:work"

    def events(self, partition: int) -> str:
        """The event stream of ``partition``."""
        return f"{self.tag(partition)}:events"

    def pattern(self) -> str:
        """A ``SCAN MATCH`` / ACL key pattern covering every key of this prefix."""
        return f"{{{self.prefix}:*"
