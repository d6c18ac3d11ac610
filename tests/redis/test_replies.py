"""The typed reply readers: a reply that does not fit its script's promised shape
raises InternalError naming the script and nothing of the data; one that fits is
read as the header says. Pure functions, no Redis: the scripts' real replies go
through the same readers in every other test."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from redis_tasks._codes import ReturnCode
from redis_tasks._errors import (
    InternalError,
    QuotaExceededError,
    ReplicationError,
    TaskNotFoundError,
)
from redis_tasks._lease import ClaimOutcome
from redis_tasks._origin import TaskOrigin
from redis_tasks._record import SNAPSHOT_FIELDS
from redis_tasks._redis import replies

OK = int(ReturnCode.OK)
ORIGIN = TaskOrigin.from_persisted_state({"endpoint": "e"}).to_persisted_string().encode()
SECRET = b"secret-payload-7f3a"
RUN = [OK, 4, 2, ORIGIN, SECRET, b"", b"3", [b"k", b"f" * 32, SECRET]]
FIELDS: list[Any] = [b"v"] * len(SNAPSHOT_FIELDS)

# (reader, a reply that fits, the script the reader names)
Reader = Callable[[Any], object]
GOOD: list[tuple[str, Reader, list[Any], str]] = [
    (
        "created",
        lambda r: replies.created(r, 2, None),
        [OK, OK, 1_700_000_000_000, int(ReturnCode.QUOTA), b""],
        "create",
    ),
    ("snapshot", replies.snapshot, [OK, FIELDS, [b"k", SECRET]], "find"),
    ("answers", lambda r: replies.answers(r, "take_answers"), [OK, [b"k", SECRET]], "take_answers"),
    ("flag", lambda r: replies.flag(r, "renew"), [OK, 1], "renew"),
    ("claim", replies.claim, [OK, 0, RUN], "claim"),
    ("claim_batch", replies.claim_batch, [OK, b"1-0", b"t1", RUN], "claim_next"),
]


def _unfit(reply: list[Any]) -> list[list[Any]]:
    """Replies one step off ``reply``: each element dropped, one added, each replaced
    by a value of another kind (a list where bytes were, bytes where a list was)."""
    out: list[list[Any]] = [[*reply, SECRET]]
    for i in range(1, len(reply)):
        out.append(reply[:i] + reply[i + 1 :])
        wrong: Any = SECRET if isinstance(reply[i], int | list) else [SECRET]
        out.append([*reply[:i], wrong, *reply[i + 1 :]])
    return out


@pytest.mark.parametrize(("name", "read", "reply", "script"), GOOD, ids=[g[0] for g in GOOD])
def test_a_reply_off_its_shape_is_an_internal_error_naming_the_script(
    name: str, read: Reader, reply: list[Any], script: str
) -> None:
    read(reply)  # the fitting reply reads
    for bad in [None, b"", [], [b"0"], *_unfit(reply)]:
        with pytest.raises(InternalError) as caught:
            read(bad)
        assert str(caught.value) == f"unexpected reply from lua/{script}.lua", (name, bad)
        assert "secret" not in repr(caught.value)


def test_a_fitting_reply_reads_as_its_header_says() -> None:
    created, refused, late = replies.created(
        [OK, OK, 1_700_000_000_000, int(ReturnCode.RATE), b"250", OK, 1_700_000_000_001],
        3,
        None,
    )
    assert created == 1_700_000_000_000
    assert isinstance(refused, QuotaExceededError)
    assert (refused.reason, refused.retry_after) == ("rate", timedelta(milliseconds=250))
    assert late == 1_700_000_000_001
    unconfirmed = ReplicationError("only 0 of 1 replicas confirmed the write in time")
    assert replies.created([OK, OK, 1_700_000_000_000], 1, unconfirmed) == [unconfirmed]
    fields, requests = replies.snapshot([OK, [None, *FIELDS[1:]], [b"k", SECRET]])
    assert fields[0] is None
    assert requests == [b"k", SECRET]
    assert replies.flag([OK, 0], "renew") is False
    run = replies.claim([OK, 1, RUN])
    assert (run.outcome, run.fence, run.attempt, run.payload, run.backlog, run.parks) == (
        ClaimOutcome.RUN,
        4,
        2,
        SECRET,
        True,
        3,
    )
    assert run.recorded == ((b"k", b"f" * 32, SECRET),)
    assert "secret" not in repr(run)
    with pytest.raises(InternalError):  # parks is a count
        replies.claim([OK, 0, [*RUN[:-2], b"-1", RUN[-1]]])
    for recorded in ([b"k", b"f" * 32], [b"k", b"f" * 32, 7]):  # triples of bytes
        with pytest.raises(InternalError):
            replies.claim([OK, 0, [*RUN[:-1], recorded]])
    settled = replies.claim_batch([OK, b"1-0", b"", [int(ReturnCode.CANCELLED)]])
    assert settled == [("1-0", None, replies.claim([OK, 0, [int(ReturnCode.CANCELLED)]]))]
    assert settled[0][2].outcome is ClaimOutcome.CANCELLED


def test_a_code_other_than_ok_raises_what_it_maps_to() -> None:
    with pytest.raises(TaskNotFoundError):
        replies.flag([int(ReturnCode.NOT_FOUND)], "renew")
    with pytest.raises(InternalError):  # a settled claim code alone, then extra elements
        replies.claim([OK, 0, [int(ReturnCode.TERMINAL), 1]])
    with pytest.raises(InternalError):  # a flag that is not 0 or 1
        replies.flag([OK, 2], "renew")
