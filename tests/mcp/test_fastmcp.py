"""redis_tasks.fastmcp across processes: a FastMCP app's servers and workers on one Redis.

Two uvicorn servers and a ``redis-tasks worker --fastmcp`` serve
``tests/support/fastmcp_app.py`` (what a FastMCP user writes), with a snapshot key, so
the callers' snapshots are sealed at rest. The official suite's tasks scenarios run
against the same extension in test_conformance.py; here are the promises FastMCP users
are made beyond the wire: who the caller is, ``Context`` in a worker, a tool the
worker lacks, a worker killed mid-tool, and a FastMCP outside the range.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import secrets
import signal
import tempfile
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.asyncio as aioredis

from redis_tasks import RequestContext, TaskOrigin
from redis_tasks._cli_common import HandlerError
from redis_tasks._ids import task_ref
from redis_tasks._redis.keys import KeySpace
from redis_tasks.fastmcp import (
    CallerSnapshot,
    FastMCPMismatchError,
    SnapshotError,
    SnapshotKey,
    TasksExtension,
)
from redis_tasks.fastmcp._loading import AppError, load_app
from redis_tasks.testing import RedisServer
from tests.support.backends import value_of
from tests.support.helpers import wait_until
from tests.support.mcp_stack import McpStack

pytestmark = pytest.mark.slow

_APP = "tests/support/fastmcp_app.py"
_KEY = secrets.token_urlsafe(32)
_WORKER = ("--lease", "2", "--park-after", "0")
_PARKED = '"event": "task_parked"'


@pytest.fixture(scope="module")
def stack(redis_server: RedisServer) -> Iterator[McpStack]:
    """Servers A and B and one worker (lease 2 s), under a prefix of this module's own.
    The worker parks a task as soon as its tool waits for input (``--park-after 0``):
    ``ctx.elicit`` and the guard pattern both go through a park and a resume."""
    with tempfile.TemporaryDirectory(prefix="redis-tasks-fastmcp-") as directory:
        stack = McpStack(
            redis_server.url,
            f"f{uuid.uuid4().hex[:10]}",
            Path(directory),
            app="tests.support.fastmcp_app:app",
            worker_target=("--fastmcp", f"{_APP}:mcp"),
        )
        os.environ["REDIS_TASKS_SNAPSHOT_KEY"] = _KEY
        try:
            stack.start_server("server-a")
            stack.start_server("server-b")
            stack.start_worker(options=_WORKER)
            yield stack
        finally:
            stack.stop()
            os.environ.pop("REDIS_TASKS_SNAPSHOT_KEY", None)


async def _create(stack: McpStack, server: int, tool: str, **arguments: Any) -> str:
    reply = await stack.rpc(server, "tools/call", {"name": tool, "arguments": arguments},
                            token="tok-alice")  # fmt: skip
    assert reply["result"]["resultType"] == "task", reply
    task_id: str = reply["result"]["taskId"]
    return task_id


async def _until(stack: McpStack, task_id: str, done: Any, *, within: float = 30) -> dict[str, Any]:
    """Poll ``tasks/get`` (on alternate servers) until ``done(task)`` holds."""
    turn = iter(range(1_000_000))

    async def reached() -> dict[str, Any] | None:
        reply = await stack.rpc(next(turn) % 2, "tasks/get", {"taskId": task_id}, "tok-alice")
        task: dict[str, Any] = reply["result"]
        return task if done(task) else None

    return await wait_until(reached, within=within, what=f"task {task_id[:8]} to move on")


async def _until_as(stack: McpStack, task_id: str, token: str) -> dict[str, Any]:
    """Poll ``tasks/get`` as ``token``'s caller until the task completed."""

    async def completed() -> dict[str, Any] | None:
        task: dict[str, Any] = (await stack.rpc(0, "tasks/get", {"taskId": task_id}, token))[
            "result"
        ]
        return task if task["status"] == "completed" else None

    return await wait_until(completed, within=30, what=f"task {task_id[:8]} to complete")


def _status(*statuses: str) -> Any:
    return lambda task: task["status"] in statuses


async def test_a_task_runs_as_its_caller_and_only_its_caller_sees_it(stack: McpStack) -> None:
    _, created = await stack.rpc_reply(
        0, "tools/call", {"name": "whoami", "arguments": {}}, "tok-alice",
        headers={"x-caller": "from-alice"},
    )  # fmt: skip
    task_id = created["result"]["taskId"]
    task = await _until(stack, task_id, _status("completed"))
    assert task["result"]["structuredContent"] == {
        "client": "alice-client",
        "subject": "alice",
        "header": "from-alice",
        "expires_at": None,
    }
    # A token's expiry travels with its task: the tool sees it (and decides; see
    # docs/guides/fastmcp.md).
    reply = await stack.rpc(0, "tools/call", {"name": "whoami", "arguments": {}}, "tok-carol")
    carol = await _until_as(stack, reply["result"]["taskId"], "tok-carol")
    assert carol["result"]["structuredContent"]["expires_at"] == 4_102_444_800
    # Another principal, on either server: "not found", as for an ID never issued.
    for server in (0, 1):
        reply = await stack.rpc(server, "tasks/get", {"taskId": task_id}, token="tok-bob")
        assert reply["error"]["code"] == -32602, reply
        assert reply["error"]["message"] == "Failed to retrieve task: Task not found"
    # The caller's credentials are kept sealed: while one of alice's tasks is open (its
    # snapshot stored), no key of any type holds the token in clear (the header is in the
    # finished task's result, which is the tool's to give).
    label = uuid.uuid4().hex[:8]
    open_id = await _create(stack, 0, "wait", seconds=120, label=label)
    await _until(stack, open_id, lambda t: t.get("statusMessage") == f"started {label}")
    client = aioredis.Redis.from_url(stack.url)
    try:
        kinds: set[str] = set()
        async for key in client.scan_iter(f"*{stack.prefix}*"):
            raw = await client.type(key)
            kind = raw.decode() if isinstance(raw, bytes) else raw
            kinds.add(kind)
            assert b"tok-alice" not in repr(await value_of(client, key, kind)).encode(), kind
        assert {"hash", "stream", "string"} <= kinds, kinds
    finally:
        await client.aclose()
    await stack.rpc(0, "tasks/cancel", {"taskId": open_id}, token="tok-alice")
    await _until(stack, open_id, _status("cancelled"))
    assert "tok-alice" not in stack.log_text()


async def test_logs_and_progress_are_the_status_and_cancel_reaches_the_tool(
    stack: McpStack,
) -> None:
    label = uuid.uuid4().hex[:8]
    task_id = await _create(stack, 0, "wait", seconds=120, label=label)
    await _until(stack, task_id, lambda t: t.get("statusMessage") == f"started {label}")
    # A cancel on the other server reaches the tool running in the worker.
    reply = await stack.rpc(1, "tasks/cancel", {"taskId": task_id}, token="tok-alice")
    assert reply["result"]["resultType"] == "complete", reply
    await _until(stack, task_id, _status("cancelled"))
    client = redis.Redis.from_url(stack.url)

    async def marked() -> bool:
        return bool(client.exists(f"{stack.prefix}:test:cancelled:{label}"))

    try:
        await wait_until(marked, what="the tool to see its cancellation")
    finally:
        client.close()
    short = await _create(stack, 1, "wait", seconds=1, label="p")
    done = await _until(stack, short, _status("completed"))
    assert done["result"]["structuredContent"] == {"result": "waited p"}


@pytest.mark.parametrize(
    ("tool", "answer_key", "expected"),
    [("ask", "elicit-1", "hello Ada"), ("guarded", "name", "guarded Ada (asked)")],
)
async def test_input_rounds_imperative_and_guarded(
    stack: McpStack, tool: str, answer_key: str, expected: str
) -> None:
    parks = stack.log_text().count(_PARKED)
    task_id = await _parked(stack, tool, "tok-alice")
    # Answered only once parked: an answer that arrives first lets the run go on unparked.
    asked = await _until(stack, task_id, _status("input_required"))
    assert list(asked["inputRequests"]) == [answer_key]
    assert asked["inputRequests"][answer_key]["method"] == "elicitation/create"
    answer = {"action": "accept", "content": {"name": "Ada"}}
    reply = await stack.rpc(1, "tasks/update",
                            {"taskId": task_id, "inputResponses": {answer_key: answer}},
                            token="tok-alice")  # fmt: skip
    assert "error" not in reply, reply
    done = await _until(stack, task_id, _status("completed", "failed"))
    assert done["result"]["content"][0]["text"] == expected, done
    # The wait parked the task; its answer ran the tool again.
    assert stack.log_text().count(_PARKED) == parks + 1


def _read(stack: McpStack, key: str) -> bytes | None:
    client = redis.Redis.from_url(stack.url)
    try:
        value: bytes | None = client.get(f"{stack.prefix}:test:{key}")  # type: ignore[assignment]
        return value
    finally:
        client.close()


async def test_the_app_s_middleware_runs_once_a_call_in_the_server(stack: McpStack) -> None:
    """Not again around the run in the worker: a counting (billing, rate-limit, logging)
    middleware counts a task call once."""
    label = uuid.uuid4().hex[:8]
    task_id = await _create(stack, 0, "wait", seconds=0, label=label)
    await _until(stack, task_id, _status("completed"))
    assert _read(stack, f"middleware:{label}") == b"1"


async def test_a_task_whose_handle_the_middleware_lost_is_cancelled(stack: McpStack) -> None:
    """Middleware failing after the task was stored: the client got an error and no
    handle, so the task is cancelled (at once, or its running tool is), never left to
    run unseen."""
    label = uuid.uuid4().hex[:8]
    reply = await stack.rpc(0, "tools/call",
                            {"name": "fragile", "arguments": {"seconds": 60, "label": label}},
                            token="tok-alice")  # fmt: skip
    assert reply.get("result", {}).get("resultType") != "task", reply
    lost = _read(stack, f"lost:{label}")
    assert lost
    task = await _until(stack, lost.decode(), _status("cancelled", "completed", "failed"))
    assert task["status"] == "cancelled", task


async def test_a_mounted_server_s_tool_refuses_bad_arguments_inline(stack: McpStack) -> None:
    """Checked against the mounted tool's own signature before a task is stored, as
    inline (fastmcp-tasks answers the same); good ones make a task that runs there."""
    bad = await stack.rpc(0, "tools/call",
                          {"name": "child_add", "arguments": {"a": "one", "b": 2}},
                          token="tok-alice")  # fmt: skip
    assert bad.get("result", {}).get("resultType") != "task", bad
    assert bad.get("result", {}).get("isError") is True or "error" in bad, bad
    task_id = await _create(stack, 1, "child_add", a=40, b=2)
    done = await _until(stack, task_id, _status("completed", "failed"))
    assert done["result"]["structuredContent"] == {"result": 42}, done


async def test_a_tool_the_workers_app_lacks_fails_its_task_at_once(stack: McpStack) -> None:
    worker = stack.processes[2]
    worker.terminate()
    worker.wait(timeout=30)
    stack.start_worker(env={"RT_TEST_DROP_TOOL": "vanishing"}, options=_WORKER)
    task_id = await _create(stack, 0, "vanishing")
    failed = await _until(stack, task_id, _status("failed", "completed"))
    assert failed["status"] == "failed", failed
    assert failed["error"] == {"code": -32602, "message": "Unknown tool: 'vanishing'"}


async def test_a_worker_killed_mid_tool_loses_no_task(stack: McpStack) -> None:
    label = uuid.uuid4().hex[:8]
    task_id = await _create(stack, 0, "wait", seconds=2, label=label)
    await _until(stack, task_id, lambda t: t.get("statusMessage") == f"started {label}")
    running = [p for p in stack.processes if p.poll() is None][-1]  # the newest worker
    running.send_signal(signal.SIGKILL)
    running.wait(timeout=30)
    stack.start_worker(options=_WORKER)
    done = await _until(stack, task_id, _status("completed", "failed"), within=60)
    assert done["status"] == "completed", done
    assert done["result"]["structuredContent"] == {"result": f"waited {label}"}


async def _parked(stack: McpStack, tool: str, token: str) -> str:
    """A task of ``token``'s caller, parked at its tool's first question."""
    parks = stack.log_text().count(_PARKED)
    reply = await stack.rpc(0, "tools/call", {"name": tool, "arguments": {}}, token=token)
    task_id: str = reply["result"]["taskId"]

    async def parked() -> bool:
        return stack.log_text().count(_PARKED) > parks

    await wait_until(parked, what="the task parked")
    return task_id


def _forge(stack: McpStack, task_id: str, payload: Mapping[Any, Any]) -> None:
    """Put ``payload`` (a record's payload fields) in place of ``task_id``'s own."""
    keys = KeySpace(stack.prefix).of_task(task_id)
    assert keys is not None
    client = redis.Redis.from_url(stack.url)
    try:
        fields: list[bytes] = client.hkeys(keys.task)  # type: ignore[assignment]
        own = [f for f in fields if f.startswith(b"pl")]
        if own:
            client.hdel(keys.task, *own)
        client.hset(keys.task, mapping=payload)
    finally:
        client.close()


def _payload_of(stack: McpStack, task_id: str) -> dict[bytes, bytes]:
    keys = KeySpace(stack.prefix).of_task(task_id)
    assert keys is not None
    client = redis.Redis.from_url(stack.url)
    try:
        fields: dict[bytes, bytes] = client.hgetall(keys.task)  # type: ignore[assignment]
        return {f: v for f, v in fields.items() if f.startswith(b"pl")}
    finally:
        client.close()


async def test_a_caller_moved_or_forged_in_redis_fails_its_task_naming_why(
    stack: McpStack,
) -> None:
    """What a writer of Redis tried (issue 51): alice's sealed caller copied into bob's
    task, and a plain caller with an invented token written into a task. Each task
    fails at its resume, runs as nobody, and the log names it and why."""
    alice = await _parked(stack, "ask", "tok-alice")
    bob = await _parked(stack, "ask", "tok-bob")
    _forge(stack, bob, _payload_of(stack, alice))
    invented = {"token": {"token": "x", "client_id": "admin-client", "scopes": ["admin"]},
                "headers": {}, "caller": {"endpoint": "/mcp", "partitionKey": "alice"}}  # fmt: skip
    _forge(stack, alice, {b"pl": b"P" + json.dumps(invented).encode()})
    answer = {"action": "accept", "content": {"name": "Ada"}}
    for task_id, token in ((bob, "tok-bob"), (alice, "tok-alice")):
        update = {"taskId": task_id, "inputResponses": {"elicit-1": answer}}
        assert "error" not in await stack.rpc(1, "tasks/update", update, token=token)

    async def failed() -> bool:
        replies = [
            await stack.rpc(0, "tasks/get", {"taskId": t}, token=k)
            for t, k in ((bob, "tok-bob"), (alice, "tok-alice"))
        ]
        return all(r["result"]["status"] == "failed" for r in replies)

    await wait_until(failed, within=30, what="both forged tasks to fail")
    refused = [
        json.loads(line)
        for line in stack.log_text().splitlines()
        if '"event": "task_unreadable"' in line
    ]
    reasons = {line["task"]: line["reason"] for line in refused}
    assert reasons[task_ref(bob)] == "not_bound"
    assert reasons[task_ref(alice)] == "unbound"
    assert "admin-client" not in stack.log_text()


async def test_a_server_or_worker_without_a_key_says_so_once_at_start(
    redis_server: RedisServer, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    import argparse

    from redis_tasks._cli_fastmcp import fastmcp_app

    def said() -> int:
        return sum(getattr(r, "event", None) == "snapshot_key_missing" for r in caplog.records)

    monkeypatch.delenv("REDIS_TASKS_SNAPSHOT_KEY", raising=False)
    monkeypatch.setenv("REDIS_URL", redis_server.url)
    monkeypatch.setenv("RT_TEST_REDIS_URL", redis_server.url)
    with caplog.at_level(logging.WARNING, logger="redis_tasks.fastmcp"):
        async with TasksExtension(prefix=f"k{uuid.uuid4().hex[:8]}").lifespan():
            assert said() == 1
        args = argparse.Namespace(fastmcp=f"{_APP}:mcp", redis_url=None)
        fastmcp_app(args)  # the worker's start, as `redis-tasks worker --fastmcp` makes it
        assert said() == 2
        monkeypatch.setenv("REDIS_TASKS_SNAPSHOT_KEY", _KEY)
        async with TasksExtension(prefix=f"k{uuid.uuid4().hex[:8]}").lifespan():
            pass
        fastmcp_app(args)
    assert said() == 2  # with a key: nothing said


def test_a_worker_without_the_servers_key_refuses_to_start_naming_why(stack: McpStack) -> None:
    for name, key, words in (
        ("worker-wrong-key", secrets.token_urlsafe(32), "wrong snapshot key"),
        ("worker-no-key", "", "missing snapshot key"),
    ):
        process = stack.start_worker({"REDIS_TASKS_SNAPSHOT_KEY": key}, _WORKER, name)
        assert process.wait(timeout=60) == 2
        log = (stack.directory / f"{name}.log").read_text()
        assert words in log
        assert '"event": "startup_refused"' in log


async def test_servers_record_their_keys_id_and_a_worker_checks_its_own_against_it(
    redis_server: RedisServer, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    from redis_tasks.fastmcp._key_check import SnapshotKeyMismatchError, check_worker_key

    monkeypatch.delenv("REDIS_TASKS_SNAPSHOT_KEY", raising=False)  # the module stack's

    key, other = SnapshotKey(_KEY), SnapshotKey(secrets.token_urlsafe(32))
    prefix = f"k{uuid.uuid4().hex[:8]}"
    server = TasksExtension(redis_server.url, prefix=prefix, snapshot_key=_KEY)
    manager = server.manager
    with caplog.at_level(logging.WARNING, logger="redis_tasks.fastmcp"):
        async with manager:  # before any server: nothing to check against, said
            await check_worker_key(manager, key)
            assert any(
                getattr(r, "event", None) == "snapshot_key_unchecked" for r in caplog.records
            )
        async with server.lifespan():
            await check_worker_key(manager, key)
            with pytest.raises(SnapshotKeyMismatchError, match="wrong snapshot key"):
                await check_worker_key(manager, other)
            with pytest.raises(SnapshotKeyMismatchError, match="missing snapshot key"):
                await check_worker_key(manager, None)
            stored = await manager.client.get(manager.keyspace.snapshot_key_id)
            assert stored == key.key_id.hex().encode()  # the ID, never the key
        # A server without a key: a worker with one would refuse every task, unless it
        # takes callers kept in clear while moving to a key.
        async with TasksExtension(redis_server.url, prefix=prefix).lifespan():
            with pytest.raises(SnapshotKeyMismatchError, match="without one"):
                await check_worker_key(manager, key)
            async with manager:
                await check_worker_key(manager, key, accept_unbound=True)
                await check_worker_key(manager, None)


def test_a_fastmcp_outside_the_range_refuses_in_one_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import fastmcp

    monkeypatch.setattr(fastmcp, "__version__", "4.3.0")
    with pytest.raises(FastMCPMismatchError) as raised:
        TasksExtension("redis://127.0.0.1:1")
    message = str(raised.value)
    assert "\n" not in message
    assert ">=4.1.4,<4.3" in message
    assert "4.3.0" in message


def test_a_worker_is_told_in_one_line_what_is_wrong_with_its_app(tmp_path: Path) -> None:
    plain = tmp_path / "plain.py"
    plain.write_text("from fastmcp import FastMCP\nmcp = FastMCP('plain')\nother = 1\n")
    broken = tmp_path / "broken.py"
    broken.write_text("raise RuntimeError('bad app\\nsecond line')\n")
    cases = {
        f"{tmp_path}/missing.py:mcp": "no such file",
        f"{broken}:mcp": "cannot import",
        f"{plain}:nothing": "has no nothing",
        f"{plain}:other": "is a int, not a FastMCP app",
        f"{plain}:mcp": "has no redis_tasks.fastmcp.TasksExtension",
    }
    for spec, expected in cases.items():
        with pytest.raises(AppError) as raised:
            load_app(spec)
        assert expected in str(raised.value), spec
        assert "\n" not in str(raised.value), spec


def test_the_workers_redis_url_is_the_apps_and_a_contrary_prefix_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--redis-url`` serves an app whose ``TasksExtension()`` reads ``$REDIS_URL`` (it
    failed without ``$REDIS_URL``), and a ``--prefix`` other than the app's is refused in
    one line, not silently replaced (issue 52)."""
    from redis_tasks._cli_fastmcp import fastmcp_app

    app = tmp_path / "env_app.py"
    app.write_text(
        "from fastmcp import FastMCP\n"
        "from redis_tasks.fastmcp import TasksExtension\n"
        "mcp = FastMCP('env')\n"
        "mcp.add_extension(TasksExtension(prefix='reports'))\n"
    )
    monkeypatch.delenv("REDIS_URL", raising=False)
    monkeypatch.setenv("REDIS_TASKS_SNAPSHOT_KEY", _KEY)
    url = "redis://127.0.0.1:1/0"  # never reached: the app is only loaded
    args = argparse.Namespace(fastmcp=f"{app}:mcp", redis_url=url, prefix="rt")
    fastmcp_app(args)
    assert (args.redis_url, args.prefix) == (url, "reports")
    contrary = argparse.Namespace(
        fastmcp=f"{app}:mcp", redis_url=url, prefix="other", prefix_given=True
    )
    with pytest.raises(HandlerError, match="--prefix other is not the app's prefix"):
        fastmcp_app(contrary)


def test_a_workers_fastmcp_lines_are_its_json_lines_without_the_task_hint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """FastMCP's console lines were mixed into the worker's JSON ones, with "Consider using
    task=True" on a tool that is a task (issue 52): both gone, the line's fact kept."""
    from redis_tasks._cli_fastmcp import fastmcp_app
    from redis_tasks._logs import configure_logging

    monkeypatch.setenv("RT_TEST_REDIS_URL", "redis://127.0.0.1:1/0")  # loaded, not reached
    monkeypatch.setenv("REDIS_TASKS_SNAPSHOT_KEY", _KEY)
    loggers = [logging.getLogger(name) for name in ("redis_tasks", "fastmcp")]
    saved = [(lg.handlers[:], lg.propagate, lg.level) for lg in loggers]
    try:
        configure_logging("info")  # as redis-tasks worker does first
        fastmcp_app(argparse.Namespace(fastmcp=f"{_APP}:mcp", redis_url=None, prefix="rt"))
        logging.getLogger("fastmcp.tools.function_tool").warning(
            "Tool 'report' timed out after 5s. Consider using task=True for long-running "
            "operations. See https://gofastmcp.com/servers/tasks"
        )
    finally:
        for lg, (handlers, propagate, level) in zip(loggers, saved, strict=True):
            lg.handlers[:], lg.propagate = handlers, propagate
            lg.setLevel(level)
    (line,) = [json.loads(x) for x in capsys.readouterr().err.splitlines() if "timed out" in x]
    assert line["msg"] == "Tool 'report' timed out after 5s."
    assert line["logger"] == "fastmcp.tools.function_tool"


def _reason(payload: bytes, key: SnapshotKey | None, task_id: str, origin: TaskOrigin) -> str:
    with pytest.raises(SnapshotError) as refused:
        CallerSnapshot.decode(payload, key, task_id, origin)
    assert "tok-" not in str(refused.value)
    return refused.value.reason


def test_snapshots_are_sealed_for_their_task_and_refused_anywhere_else() -> None:
    from fastmcp.server.auth import AccessToken

    alice = AccessToken(token="tok-alice", client_id="alice-client", scopes=["a"])
    caller = RequestContext("/mcp", "alice")
    snapshot = CallerSnapshot(alice, {"authorization": "Bearer tok-alice"}, caller)
    key = SnapshotKey(_KEY)
    origin = TaskOrigin.from_persisted_state({"tool": "whoami", "arguments": {}})
    sealed = snapshot.encode(key, "3.alice-task", origin)
    assert b"alice" not in sealed  # neither the token nor the caller, in clear
    assert CallerSnapshot.decode(sealed, key, "3.alice-task", origin) == snapshot
    # Forgery 1: alice's sealed caller copied into bob's task.
    assert _reason(sealed, key, "5.bob-task", origin) == "not_bound"
    # Forgery 2: alice's task rewritten to run another tool (or other arguments).
    other = TaskOrigin.from_persisted_state({"tool": "delete_all", "arguments": {}})
    assert _reason(sealed, key, "3.alice-task", other) == "not_bound"
    # Forgery 3: a plain caller written under a key, with an invented token.
    root = AccessToken(token="tok-root", client_id="admin-client", scopes=["admin"])
    plain = CallerSnapshot(root, {}, caller).encode(None, "3.alice-task", origin)
    assert _reason(plain, key, "3.alice-task", origin) == "unbound"
    # ... taken only while moving to a key, when asked to.
    taken = CallerSnapshot.decode(plain, key, "3.alice-task", origin, accept_unbound=True)
    assert taken.token == root
    # A worker without the key, or with another, is told which.
    assert _reason(sealed, None, "3.alice-task", origin) == "missing_key"
    another = SnapshotKey(secrets.token_urlsafe(32))
    assert _reason(sealed, another, "3.alice-task", origin) == "wrong_key"
    assert another.key_id != key.key_id
    # Tampering with the ciphertext is refused as not bound (same key ID).
    tampered = sealed[:-1] + bytes([sealed[-1] ^ 1])
    assert _reason(tampered, key, "3.alice-task", origin) == "not_bound"
    assert _reason(b"X???", key, "3.alice-task", origin) == "unreadable"
    assert "alice" not in repr(snapshot)
    assert _KEY not in repr(key)
    with pytest.raises(ValueError, match="16 characters"):
        SnapshotKey("short")


def test_a_changed_fastmcp_part_is_named_at_startup(monkeypatch: pytest.MonkeyPatch) -> None:
    import fastmcp.server.dependencies as deps

    monkeypatch.delattr(deps, "_background_task_headers")
    with pytest.raises(FastMCPMismatchError, match="_background_task_headers is not a ContextVar"):
        TasksExtension("redis://127.0.0.1:1")


def test_all_is_pinned_sorted_and_documented() -> None:
    import inspect

    import redis_tasks.fastmcp

    exported = [
        "ACCEPT_UNBOUND_ENV",
        "FASTMCP_RANGE",
        "SNAPSHOT_KEY_ENV",
        "CallerSnapshot",
        "FastMCPMismatchError",
        "SnapshotError",
        "SnapshotKey",
        "TasksExtension",
        "tool_handler",
    ]
    assert redis_tasks.fastmcp.__all__ == exported
    for name in exported:
        obj = getattr(redis_tasks.fastmcp, name)
        if inspect.isclass(obj) or inspect.isfunction(obj):
            assert (obj.__doc__ or "").strip(), name


def test_the_range_is_the_one_the_extra_requires() -> None:
    from redis_tasks.fastmcp import FASTMCP_RANGE
    from redis_tasks.fastmcp._fastmcp import FASTMCP_BELOW, FASTMCP_LOWEST

    lowest, below = (".".join(map(str, v)) for v in (FASTMCP_LOWEST, FASTMCP_BELOW))
    assert f">={lowest},<{below}" == FASTMCP_RANGE
    pyproject = (Path(__file__).resolve().parents[2] / "pyproject.toml").read_text()
    assert f'"fastmcp-slim[server]{FASTMCP_RANGE}"' in pyproject


@pytest.mark.parametrize("middleware", [False, True])
async def test_a_worker_runs_the_app_s_middleware_only_when_told(middleware: bool) -> None:
    """``worker_middleware`` (``tool_handler(middleware=...)``): off, the run skips the
    app's middleware (it ran in the server); on, it wraps the run too."""
    from fastmcp import FastMCP
    from fastmcp.server.middleware import CallNext, Middleware, MiddlewareContext
    from fastmcp.utilities.tasks import TaskConfig

    from redis_tasks import InMemoryTaskManager, Limits, TaskRequestContext, Worker
    from redis_tasks.fastmcp import tool_handler
    from redis_tasks.mcp._tool_call import ToolCall

    seen: list[str] = []

    class Seen(Middleware):
        async def on_call_tool(
            self, context: MiddlewareContext[Any], call_next: CallNext[Any, Any]
        ) -> Any:
            seen.append(context.message.name)
            return await call_next(context)

    app = FastMCP("middleware")
    app.add_middleware(Seen())

    @app.tool(task=TaskConfig(mode="required"))
    async def double(n: int) -> int:
        return 2 * n

    alice = RequestContext("/mcp", "alice")
    origin = ToolCall(tool="double", arguments={"n": 21}, endpoint="/mcp").to_origin(Limits())

    def payload(task_id: str) -> bytes:
        return CallerSnapshot(None, {}, alice).encode(None, task_id, origin)

    handler = tool_handler(app, middleware=middleware)
    async with InMemoryTaskManager() as manager, Worker(manager, handler) as worker:
        running = asyncio.create_task(worker.run())
        task = await manager.create_task(alice, origin, payload=payload)

        async def ended() -> Any:
            found = await manager.find_task(TaskRequestContext(alice, task.task_id))
            return found if found is not None and found.is_terminal else None

        done = await wait_until(ended, what="the task's end")
        await worker.stop()
        await running
    assert done.result["structuredContent"] == {"result": 42}
    assert seen == (["double"] if middleware else [])
