"""The tasks fast path answers byte for byte as the SDK does, and passes on what it should.

Four server processes on one Redis serve the same application: the SDK's path
and the fast path, each in SSE mode (stateful, the SDK's default) and in JSON
mode (stateless). Every case is one raw HTTP request sent to both servers of a
mode; their replies must agree in status, headers (all but ``date``) and body,
byte for byte. The fast path's own counters say whether it answered the case
or passed it on to the SDK, and each case states which it expects, so a fast
path that passed everything on could not pass this test.

A refused create compares whole too: every server has a quota of open tasks per
tenant (``QUOTA``), and the tenant ``crowd`` holds that many before the cases run.

Read-only cases read the same tasks on both servers. Cases that change a task
(``tasks/update``, ``tasks/cancel`` of a live task) use twin tasks in the same
state, one per server; their replies name no task, so they still compare
whole.
"""

from __future__ import annotations

import asyncio
import json
import re
import tempfile
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2
import pytest

from redis_tasks import InputRequest, JsonRpcError, Limits, RedisTaskManager, RequestContext
from redis_tasks.mcp import ToolCall
from redis_tasks.testing import RedisServer
from tests.support.mcp_stack import McpStack

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::DeprecationWarning")]

VERSION = "2026-07-28"
EXTENSION: dict[str, Any] = {"extensions": {"io.modelcontextprotocol/tasks": {}}}
META: dict[str, Any] = {
    "io.modelcontextprotocol/protocolVersion": VERSION,
    "io.modelcontextprotocol/clientCapabilities": EXTENSION,
}
#: The SSE-mode servers' keepalive interval (longer than any other case takes, even on a
#: loaded machine) and a delay that outlasts it twice.
PING, SLOW = 2.0, 4.5
#: Tasks in every state a poll can see; the ``twin-*`` ones exist once per server.
READ_KINDS = ("working", "completed", "failed", "input")
TWIN_KINDS = ("twin-working", "twin-input")
#: Every server's ``Limits.max_open_tasks_per_tenant``: well above what any principal's
#: own cases leave open (about 25), and what the tenant ``crowd`` holds from the start.
QUOTA = 50
#: A result that exercises the serializer: non-ASCII, separators, nulls, numbers.
RESULT = {
    "content": [{"type": "text", "text": 'Grüße \u2028 "quoted" \\ </script> 🙂'}],
    "structuredContent": {"n": None, "f": 1.5, "big": 2**63 - 1, "e": 1e100, "list": [None, {}]},
    "isError": False,
}


#: Builds a request body from a lookup of task IDs by kind (``None``: no body).
Body = Callable[[Callable[[str], str]], Any]


@dataclass
class Case:
    """One HTTP request, and whether the fast path should answer it itself."""

    name: str
    fast: bool
    body: Body
    headers: Mapping[str, str | None] = field(default_factory=dict)
    method: str = "POST"
    raw: bytes | None = None  # sent as is instead of ``body``
    json_fast: bool | None = None  # ``fast`` in JSON mode, when it differs
    repeated: tuple[tuple[str, str], ...] = ()  # header lines sent a second time
    expect: bytes = b""  # in the reply body, so that both agreeing on a wrong answer fails


def rpc(method: str, params: dict[str, Any], request_id: Any = 7, **extra: Any) -> dict[str, Any]:
    """A JSON-RPC request object."""
    return {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params, **extra}


def call(
    method: str,
    kind: str | None = "completed",
    request_id: Any = 7,
    envelope: Any = META,
    **params: Any,
) -> Body:
    """``method`` about a task of ``kind`` (``None``: no task ID), with ``params`` besides."""

    def body(task: Callable[[str], str]) -> Any:
        ids = {} if kind is None else {"taskId": task(kind)}
        return rpc(method, {**ids, "_meta": envelope, **params}, request_id)

    return body


def get(kind: str | None = "completed", **params: Any) -> Body:
    """A ``tasks/get``."""
    return call("tasks/get", kind, **params)


def with_id(request_id: Any) -> Body:
    """A ``tasks/get`` with this JSON-RPC ID."""
    return call("tasks/get", request_id=request_id)


def with_meta(**changes: Any) -> Body:
    """A ``tasks/get`` with its ``_meta`` changed (a ``None`` value drops the key)."""
    envelope: dict[str, Any] = {**META}
    for key, value in changes.items():
        envelope[f"io.modelcontextprotocol/{key}"] = value
    return call("tasks/get", envelope={k: v for k, v in envelope.items() if v is not None})


def reshaped(**changes: Any) -> Body:
    """A ``tasks/get`` whose request object has these members changed (``None`` drops one)."""

    def body(task: Callable[[str], str]) -> Any:
        request = {**get()(task), **changes}
        return {k: v for k, v in request.items() if v is not None}

    return body


def no_body(task: Callable[[str], str]) -> None:
    """No body at all."""


UPDATE: dict[str, str | None] = {"Mcp-Method": "tasks/update"}
CANCEL: dict[str, str | None] = {"Mcp-Method": "tasks/cancel"}
ANSWER = {"ask": {"action": "accept", "content": {"ok": True}}}
PROGRESS = {**META, "progressToken": "p1"}
NOTIFY: dict[str, str | None] = {"x-test-notify": "1"}
SLOW_NOTIFY: dict[str, str | None] = {"x-test-notify": "1", "x-test-delay": str(SLOW)}
BOB: dict[str, str | None] = {"Authorization": "Bearer bob"}
CROWD: dict[str, str | None] = {"x-test-tenant": "crowd"}
VERSION_HEADER, FUTURE = "MCP-Protocol-Version", "2099-01-01"
FROM_FUTURE = with_meta(protocolVersion=FUTURE)
WITH_PROGRESS = call("tasks/get", envelope=PROGRESS)


def TOOL(name: str) -> dict[str, str | None]:
    """The routing headers of a ``tools/call`` of ``name``."""
    return {"Mcp-Method": "tools/call", "Mcp-Name": name}


def with_capabilities(capabilities: Any) -> dict[str, Any]:
    """The envelope with these client capabilities."""
    return {**META, "io.modelcontextprotocol/clientCapabilities": capabilities}


def tool_call(name: str | None, envelope: Any = META, **arguments: Any) -> Body:
    """A ``tools/call`` of ``name`` (``None``: no name) with these arguments."""

    def body(task: Callable[[str], str]) -> Any:
        params: dict[str, Any] = {"arguments": arguments, "_meta": envelope}
        if name is not None:
            params["name"] = name
        return rpc("tools/call", params)

    return body


def update(kind: str, responses: Any) -> Body:
    """A ``tasks/update`` with these answers."""
    return call("tasks/update", kind, inputResponses=responses)


CASES = [
    # Answered by the fast path.
    Case("get working", True, get("working")),
    Case("get completed", True, get("completed")),
    Case("get failed", True, get("failed")),
    Case("get input_required", True, get("input")),
    Case("get unknown task", True, get("unknown")),
    Case("get malformed task id", True, get("malformed")),
    Case("get another principal's task", True, get(), BOB),
    Case("get with a string id", True, with_id("req-1")),
    Case("get with a huge id", True, with_id(2**70)),
    Case("get with id 0", True, with_id(0)),
    Case("get with extra params", True, get(extra={"x": 1})),
    Case("get with client info", True, with_meta(clientInfo={"name": "c", "version": "1"})),
    Case("get without the capability", True, with_meta(clientCapabilities={})),
    Case("get with capabilities no object", True, with_meta(clientCapabilities="x")),
    Case("get without a task id", True, get(None)),
    Case("get with a numeric task id", True, get(None, taskId=5)),
    Case("get with an overlong task id", True, get(None, taskId="x" * 5000)),
    Case("get whose authorizer fails", True, get(), {"x-test-authorizer": "fail"}),
    Case("get with a mismatched Mcp-Name", True, get(), {"Mcp-Name": "another-task"}),
    Case("get with a session header", True, get(), {"Mcp-Session-Id": "0123456789abcdef"}),
    Case("get accepting anything", True, get(), {"Accept": "*/*"}),
    Case("get with a charset", True, get(), {"Content-Type": "application/json; charset=utf-8"}),
    Case("get from an allowed origin", True, get(), {"Origin": "http://127.0.0.1:1234"}),
    Case("get from a foreign Host", True, get(), {"Host": "evil.example"}),
    Case("get from a foreign Origin", True, get(), {"Origin": "http://evil.example"}),
    Case("get without a Content-Type", True, get(), {"Content-Type": None}),
    Case("get as text/plain", True, get(), {"Content-Type": "text/plain"}),
    Case("get with a notification", True, WITH_PROGRESS, NOTIFY),
    Case("get without a progress token", True, get(), NOTIFY),
    Case("get outlasting the ping interval", True, get(), {"x-test-delay": str(SLOW)}),
    Case("get notifying, then outlasting it", True, WITH_PROGRESS, SLOW_NOTIFY),
    Case("cancel a working task", True, call("tasks/cancel", "twin-working"), CANCEL),
    Case("cancel a completed task", True, call("tasks/cancel"), CANCEL),
    Case("cancel an unknown task", True, call("tasks/cancel", "unknown"), CANCEL),
    Case("cancel another's task", True, call("tasks/cancel", "working"), {**CANCEL, **BOB}),
    Case("update an input_required task", True, update("twin-input", ANSWER), UPDATE),
    Case("update with the wrong variant", True, update("input", {"ask": {"roots": []}}), UPDATE),
    Case("update with an unknown key", True, update("input", {"no": {}}), UPDATE),
    Case("update a completed task", True, update("completed", ANSWER), UPDATE),
    Case("update an unknown task", True, update("unknown", ANSWER), UPDATE),
    Case("update without responses", True, call("tasks/update", "input"), UPDATE),
    Case("update with a list", True, update("input", [1]), UPDATE),
    Case("call a required tool", True, tool_call("hold"), TOOL("hold")),
    Case("call a required tool with arguments", True, tool_call("crash", secret="s"),
         TOOL("crash")),
    Case("call a required tool with bad arguments", True, tool_call("crash", secret=5),
         TOOL("crash")),
    Case("call a required tool without the capability", True,
         tool_call("hold", envelope=with_capabilities({})), TOOL("hold")),
    Case("call a required tool as another principal", True, tool_call("hold"),
         {**TOOL("hold"), **BOB}),
    Case("call a required tool with a progress token", True,
         tool_call("hold", envelope=PROGRESS), TOOL("hold")),
    Case("call a required tool over its tenant's quota", True, tool_call("hold"),
         {**TOOL("hold"), **CROWD},
         expect=b'"error":{"code":-32003,"message":"Task capacity exceeded",'
                b'"data":{"reason":"quota"}}'),
    Case("call a required tool whose tenant hook fails", True, tool_call("hold"),
         {**TOOL("hold"), "x-test-tenant": "fail"},
         expect=b'"error":{"code":-32603,"message":"Internal error"}'),
    Case("call a required tool whose Mcp-Param matches", True, tool_call("report", region="eu"),
         {**TOOL("report"), "Mcp-Param-Region": "eu"}),
    # Passed on to the SDK.
    Case("call a required tool whose Mcp-Param differs", False, tool_call("report", region="eu"),
         {**TOOL("report"), "Mcp-Param-Region": "us"}),
    Case("call a required tool without its Mcp-Param", False, tool_call("report", region="eu"),
         TOOL("report")),
    Case("get without credentials", False, get(), {"Authorization": None}),
    Case("get with an unknown token", False, get(), {"Authorization": "Bearer mallory"}),
    Case("get with a Basic credential", False, get(), {"Authorization": "Basic YTpi"}),
    Case("get without the required scope", False, get(), {"Authorization": "Bearer noscope"}),
    Case("get without a version header", False, get(), {VERSION_HEADER: None}),
    Case("get on a handshake-era version", False, get(), {VERSION_HEADER: "2025-11-25"}),
    Case("get on an unknown version", False, FROM_FUTURE, {VERSION_HEADER: FUTURE}),
    Case("get whose envelope disagrees", False, with_meta(protocolVersion="2025-11-25")),
    Case("get without envelope capabilities", False, with_meta(clientCapabilities=None)),
    Case("get without an Mcp-Method header", False, get(), {"Mcp-Method": None}),
    Case("get with a mismatched Mcp-Method", False, get(), {"Mcp-Method": "tasks/list"}),
    Case("get with a repeated Mcp-Method", False, get(), repeated=(("Mcp-Method", "tasks/get"),)),
    Case("get with a repeated version", False, get(), repeated=((VERSION_HEADER, VERSION),)),
    Case("get accepting only JSON", False, get(), {"Accept": "application/json"}, json_fast=True),
    Case("get accepting only SSE", False, get(), {"Accept": "text/event-stream"}),
    Case("get accepting neither", False, get(), {"Accept": "text/html"}),
    Case("get without Accept", False, get(), {"Accept": None}),
    Case("get with a float id", False, with_id(1.0)),
    Case("get with a boolean id", False, with_id(True)),
    Case("get with a null id", False, with_id(None)),
    Case("get with an extra member", False, reshaped(extra=1)),
    Case("get on JSON-RPC 1.0", False, reshaped(jsonrpc="1.0")),
    Case("get without params", False, reshaped(params=None)),
    Case("get as a notification", False, reshaped(id=None)),
    Case("get as a batch", False, lambda task: [get()(task)]),
    Case("unparseable body", False, no_body, raw=b'{"jsonrpc": "2.0", "id": 7,'),
    Case("body too large", False, no_body, raw=b"x" * (4 * 1024 * 1024 + 1)),
    Case("call an optional tool", False, tool_call("add", a=1, b=2), TOOL("add")),
    Case("call an unknown tool", False, tool_call("nope"), TOOL("nope")),
    Case("call without a tool name", False, tool_call(None), TOOL("hold")),
    Case("call a required tool without credentials", False, tool_call("hold"),
         {**TOOL("hold"), "Authorization": None}),
    Case("tasks/result", False, call("tasks/result"), {"Mcp-Method": "tasks/result"}),
    Case("tasks/list", False, call("tasks/list", None), {"Mcp-Method": "tasks/list"}),
    Case("GET", False, no_body, method="GET"),
    Case("DELETE", False, no_body, method="DELETE"),
]  # fmt: skip


def test_cases_are_named_once() -> None:
    names = [case.name for case in CASES]
    assert len(names) == len(set(names))


@dataclass
class Servers:
    """The four servers, their twin tasks, and how to reach them."""

    stack: McpStack
    tasks: dict[str, str]
    twins: dict[tuple[str, int], str]

    def url(self, server: int, path: str = "/mcp") -> str:
        return f"http://127.0.0.1:{self.stack.ports[server]}{path}"

    def task(self, server: int) -> Callable[[str], str]:
        def lookup(kind: str) -> str:
            if kind == "unknown":
                return "3.AAAAAAAAAAAAAAAAAAAAAAAA"
            if kind == "malformed":
                return "no{such}:id\r\n"
            if kind.startswith("twin-"):
                return self.twins[kind, server]
            return self.tasks[kind]

        return lookup


SDK_SSE, FAST_SSE, SDK_JSON, FAST_JSON = range(4)
PAIRS = {"sse": (SDK_SSE, FAST_SSE), "json": (SDK_JSON, FAST_JSON)}


async def _create(stack: McpStack, server: int) -> str:
    reply = await stack.rpc(server, "tools/call", {"name": "add", "arguments": {"a": 1, "b": 2}})
    task_id: str = reply["result"]["taskId"]
    return task_id


async def _prepare(stack: McpStack, url: str) -> Servers:
    async def make(kind: str, server: int) -> str:
        task_id = await _create(stack, server)
        if kind.endswith("completed"):
            await manager.complete_task(task_id, RESULT, "done")
        elif kind.endswith("failed"):
            await manager.fail_task(task_id, JsonRpcError(code=-32001, message="Quota", data=[1]))
        elif kind.endswith("input"):
            request = InputRequest(method="elicitation/create", params={"message": "Sure?"})
            await manager.request_input(task_id, {"ask": request}, "asking")
        return task_id

    limits = Limits(max_open_tasks_per_tenant=QUOTA)
    async with RedisTaskManager.from_url(url, prefix=stack.prefix, limits=limits) as manager:
        tasks = {kind: await make(kind, SDK_SSE) for kind in READ_KINDS}
        twins = {
            (kind, server): await make(kind.removeprefix("twin-"), server)
            for kind in TWIN_KINDS
            for server in range(4)
        }
        # The tenant names no principal: its quota counts these wherever they came from.
        origin = ToolCall("hold", {}, "/mcp", None).to_origin(limits)
        crowd = RequestContext("/mcp", "crowd-filler")
        await asyncio.gather(
            *(manager.create_task(crowd, origin, tenant="crowd") for _ in range(QUOTA))
        )
    return Servers(stack, tasks, twins)


@pytest.fixture(scope="module")
def servers(redis_server: RedisServer) -> Iterator[Servers]:
    """SDK and fast path, in SSE mode (stateful) and JSON mode (stateless); no worker."""
    with tempfile.TemporaryDirectory(prefix="redis-tasks-fast-path-") as directory:
        stack = McpStack(redis_server.url, f"f{uuid.uuid4().hex[:10]}", Path(directory))
        quota = {"RT_TEST_MAX_OPEN": str(QUOTA)}
        sse = {**quota, "RT_TEST_SSE_PING": str(PING)}
        json_mode = {**quota, "RT_TEST_JSON_RESPONSE": "1", "RT_TEST_STATELESS": "1"}
        try:
            stack.start_server("sdk-sse", {**sse, "RT_TEST_FAST_PATH": "0"})
            stack.start_server("fast-sse", sse)
            stack.start_server("sdk-json", {**json_mode, "RT_TEST_FAST_PATH": "0"})
            stack.start_server("fast-json", json_mode)
            yield asyncio.run(_prepare(stack, redis_server.url))
        finally:
            stack.stop()


def _content(case: Case, servers: Servers, server: int) -> bytes:
    if case.raw is not None:
        return case.raw
    body = case.body(servers.task(server))
    return b"" if body is None else json.dumps(body).encode()


@dataclass(frozen=True)
class Reply:
    """What a client sees of a reply, minus the ``date`` header uvicorn stamps on each."""

    status: int
    headers: tuple[tuple[bytes, bytes], ...]
    body: bytes


PINGS = re.compile(rb"(: ping\r\n\r\n)+")


async def _send(
    http: httpx2.AsyncClient,
    case: Case,
    servers: Servers,
    server: int,
    headers: list[tuple[str, str]],
) -> Reply:
    request = http.build_request(
        case.method, servers.url(server), content=_content(case, servers, server), headers=headers
    )
    reply = await http.send(request)
    raw = tuple(_normalised(k.lower(), v) for k, v in reply.headers.raw if k.lower() != b"date")
    body = reply.content
    if case.name.startswith("call"):
        # Each server creates a task of its own: its ID and clock readings differ,
        # and so may the length of the body (a task ID's partition has 1 or 2
        # digits); the normalised bodies are compared whole.
        body = CREATED.sub(rb'"\1":"<\1>"', body)
        raw = tuple(header for header in raw if header[0] != b"content-length")
    return Reply(reply.status_code, raw, body)


CREATED = re.compile(rb'"(taskId|createdAt|lastUpdatedAt)":"[^"]*"')


def _normalised(name: bytes, value: bytes) -> tuple[bytes, bytes]:
    # A handshake-era request to a stateful server opens a session of a random ID.
    return (name, b"<session>") if name == b"mcp-session-id" else (name, value)


async def _counts(http: httpx2.AsyncClient, servers: Servers, server: int) -> dict[str, int]:
    counts: dict[str, int] = (await http.get(servers.url(server, "/test/fast-path"))).json()
    return counts


def _header_lines(case: Case) -> list[tuple[str, str]]:
    base: dict[str, str | None] = {
        "Authorization": "Bearer alice",
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
        "MCP-Protocol-Version": VERSION,
        "Mcp-Method": "tasks/get",
        **case.headers,
    }
    return [(k, v) for k, v in base.items() if v is not None] + list(case.repeated)


async def _compare(servers: Servers, mode: str) -> list[str]:
    sdk, fast = PAIRS[mode]
    failures: list[str] = []
    async with httpx2.AsyncClient(timeout=60) as http:
        del http.headers["accept"]  # a case without Accept sends none
        for case in CASES:
            headers = _header_lines(case)
            before = await _counts(http, servers, fast)
            expected, got = await asyncio.gather(
                _send(http, case, servers, sdk, headers),
                _send(http, case, servers, fast, headers),
            )
            after = await _counts(http, servers, fast)
            if "outlasting" in case.name and mode == "sse":
                # How many keepalives fit in the delay is a matter of timing.
                assert PINGS.search(expected.body), case.name
                assert PINGS.search(got.body), case.name
                expected = Reply(
                    expected.status, expected.headers, PINGS.sub(b": ping\r\n\r\n", expected.body)
                )
                got = Reply(got.status, got.headers, PINGS.sub(b": ping\r\n\r\n", got.body))
            if got != expected:
                failures.append(f"{case.name}: SDK {expected!r}\n    fast path {got!r}")
            if case.expect not in got.body:
                failures.append(f"{case.name}: {case.expect!r} not in {got.body!r}")
            fast_expected = case.fast if mode == "sse" or case.json_fast is None else case.json_fast
            served = after["served"] - before["served"]
            if served != int(fast_expected):
                failures.append(
                    f"{case.name}: the fast path served {served}, expected {int(fast_expected)}"
                )
    return failures


@pytest.mark.parametrize("mode", ["sse", "json"])
def test_the_fast_path_answers_as_the_sdk_does(servers: Servers, mode: str) -> None:
    failures = asyncio.run(_compare(servers, mode))
    assert not failures, "\n".join(failures)
