"""End to end: the tasks extension over streamable HTTP, two servers, one worker, one Redis.

A task is created on server A and read, answered and cancelled on server B; the
worker is a separate ``redis-tasks worker`` process running the application's
tools. Wire shapes are checked against SEP-2663's examples. The module runs once
per standalone server: Debian's redis-server, Valkey 9.1 and Redis 8.2.

The tenant hooks and the refusals for want of room (``-32003``) are served in this
process instead, on a manager of each test's own ``Limits`` and the session's
redis-server, through both the SDK's path and the fast path.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import subprocess
import sys
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import httpx2
import pytest
from mcp.client.extension import NotificationBinding
from mcp.server.context import ServerRequestContext
from mcp.server.mcpserver import MCPServer
from mcp.shared.exceptions import MCPError
from mcp_types import (
    CallToolRequestParams,
    NotificationParams,
    Request,
    RequestParams,
    SubscriptionsListenResult,
)
from pydantic import ConfigDict

from redis_tasks import (
    CapacityError,
    Limits,
    RedisTaskManager,
    RequestContext,
    TenantPlan,
    task_ref,
)
from redis_tasks.mcp import (
    CreatedTask,
    TasksClient,
    TasksExtension,
    TaskSupport,
    cancel_task,
    get_task,
    update_task,
)
from redis_tasks.mcp._fast_path import FastPath
from redis_tasks.testing import RedisServer
from tests.support.backends import EXTRA_SERVERS, server_url
from tests.support.helpers import wait_until, whole_task_ids
from tests.support.mcp_stack import SECRET, McpStack, until_status

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::DeprecationWarning")]

ISO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{3})?Z$")
A, B = 0, 1


@pytest.fixture(scope="module", params=["redis", *EXTRA_SERVERS])
def stack(request: pytest.FixtureRequest) -> Iterator[McpStack]:
    """Servers A and B and a worker on one standalone server, under a prefix of this
    module's own. A stack per server: pytest runs the module's tests on one, in file
    order, before starting the next. The worker parks a task as soon as its tool
    waits for input (``--park-after 0``): every elicitation, sampling request, roots
    request and input round of these tests goes through a park and a resume, the
    tool run again from the top with its answered rounds replayed."""
    url = server_url(request, request.param)
    with tempfile.TemporaryDirectory(prefix="redis-tasks-mcp-") as directory:
        stack = McpStack(url, f"m{uuid.uuid4().hex[:10]}", Path(directory))
        try:
            stack.start(("--park-after", "0"))
            yield stack
        finally:
            stack.stop()
        logged = stack.log_text()
        # No process logged a whole task ID in the module's every test (issue 30).
        assert whole_task_ids(logged) == []
        assert '"event": "task_parked"' in logged


def check_task_shape(task: dict[str, Any], result_type: str) -> None:
    """The SEP-2663 Task fields every rendering carries."""
    assert task["resultType"] == result_type
    assert isinstance(task["taskId"], str)
    assert task["status"] in {"working", "input_required", "completed", "failed", "cancelled"}
    assert ISO.match(task["createdAt"]), task["createdAt"]
    assert ISO.match(task["lastUpdatedAt"]), task["lastUpdatedAt"]
    assert task["lastUpdatedAt"] >= task["createdAt"]
    assert task["ttlMs"] is None or (isinstance(task["ttlMs"], int) and task["ttlMs"] > 0)
    assert isinstance(task["pollIntervalMs"], int)
    assert task["pollIntervalMs"] > 0
    assert ("inputRequests" in task) == (task["status"] == "input_required")
    assert ("result" in task) == (task["status"] == "completed")
    assert ("error" in task) == (task["status"] == "failed")


async def create(stack: McpStack, server: int, tool: str, arguments: dict[str, Any]) -> str:
    """Call a task tool on ``server``; check the CreateTaskResult on the raw wire."""
    reply = await stack.rpc(server, "tools/call", {"name": tool, "arguments": arguments})
    created = reply["result"]
    check_task_shape(created, "task")
    assert created["status"] == "working"
    task_id: str = created["taskId"]
    return task_id


async def test_create_on_a_elicit_and_roots_answered_on_b(stack: McpStack) -> None:
    async with stack.client(A) as a, stack.client(B) as b:
        created = await a.session.call_tool("greet", {"greeting": "Hi"}, allow_claimed=True)
        assert isinstance(created, CreatedTask)
        task_id = created.task_id
        # Durable before the reply: the other server finds it at once.
        first = await get_task(b.session, task_id)
        check_task_shape(first, "complete")
        assert first["taskId"] == task_id

        asking = await until_status(b, task_id, "input_required")
        check_task_shape(asking, "complete")
        assert list(asking["inputRequests"]) == ["elicit-1"]
        request = asking["inputRequests"]["elicit-1"]
        assert request["method"] == "elicitation/create"
        assert request["params"]["message"] == "What is your name?"
        assert request["params"]["requestedSchema"]["properties"]["name"]["type"] == "string"

        ack = await update_task(
            b.session, task_id, {"elicit-1": {"action": "accept", "content": {"name": "Luca"}}}
        )
        assert ack["resultType"] == "complete"
        assert set(ack) <= {"resultType", "_meta"}

        async def roots_asked() -> dict[str, Any] | None:
            task = await get_task(a.session, task_id)
            return task if "roots-2" in task.get("inputRequests", {}) else None

        roots = await wait_until(roots_asked, within=30, what="the roots request")
        assert roots["inputRequests"]["roots-2"] == {"method": "roots/list", "params": {}}
        await update_task(a.session, task_id, {"roots-2": {"roots": [{"uri": "file:///w"}]}})

        done = await until_status(b, task_id, "completed")
        check_task_shape(done, "complete")
        assert done["result"]["content"] == [{"type": "text", "text": "Hi, Luca! (1 roots)"}]
        assert done["result"]["isError"] is False


async def test_questions_asked_at_once_are_one_round_answered_key_by_key(
    stack: McpStack,
) -> None:
    task_id = await create(stack, A, "two_questions", {})
    async with stack.client(B) as b:

        async def both_asked() -> dict[str, Any] | None:
            task = await get_task(b.session, task_id)
            return task if len(task.get("inputRequests", {})) == 2 else None

        asking = await wait_until(both_asked, within=30, what="both questions in one round")
        assert set(asking["inputRequests"]) == {"elicit-1", "elicit-2"}
        answer = {"action": "accept", "content": {"name": "Ada"}}
        await update_task(b.session, task_id, {"elicit-2": answer})
        # The other key is still outstanding, alone, and the task still waits for it.
        partial = await get_task(b.session, task_id)
        assert partial["status"] == "input_required"
        assert set(partial["inputRequests"]) == {"elicit-1"}
        await update_task(b.session, task_id, {"elicit-1": {**answer, "content": {"name": "Bo"}}})
        done = await until_status(b, task_id, "completed")
    assert done["result"]["content"] == [{"type": "text", "text": "Bo and Ada"}]


async def test_an_input_first_tool_asks_inline_then_becomes_a_task(stack: McpStack) -> None:
    call = {"name": "book", "arguments": {"room": "12"}}
    first = (await stack.rpc(A, "tools/call", call))["result"]
    assert first["resultType"] == "input_required"
    assert "taskId" not in first
    assert list(first["inputRequests"]) == ["guest"]
    answer = {"guest": {"action": "accept", "content": {"name": "Ada"}}}
    # The same server: the SDK seals requestState with a key of the process.
    second = await stack.rpc(
        A, "tools/call", {**call, "inputResponses": answer, "requestState": first["requestState"]}
    )
    assert "result" in second, second
    created = second["result"]
    check_task_shape(created, "task")
    assert "requestState" not in created
    assert "inputRequests" not in created
    async with stack.client(A) as a:
        done = await until_status(a, created["taskId"], "completed")
    assert done["result"]["content"] == [{"type": "text", "text": "12 booked for Ada (room=12)"}]
    # The inline phase is bounded: a tool still running at input_first_timeout fails
    # the call (the server runs it), and no task is made.
    late = await stack.rpc(A, "tools/call", {"name": "dawdle", "arguments": {}})
    assert late["error"]["code"] == -32603


async def test_transparent_client_resolves_the_task(stack: McpStack) -> None:
    """The MCP clients page's example (``examples/sdk_client.py``), run as it is in a
    process of its own: ``TasksClient`` polls the task and answers its elicitation and
    roots request through the example's callback."""
    ran = await asyncio.to_thread(
        subprocess.run,
        [
            sys.executable,
            "examples/sdk_client.py",
            stack.endpoint(B),
            "alice",
            "greet",
            json.dumps({"greeting": "Hello"}),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert ran.returncode == 0, ran.stderr
    result = json.loads(ran.stdout)
    assert result["content"][0]["text"] == "Hello, Ada! (0 roots)"


async def test_another_principal_gets_the_unknown_task_body(stack: McpStack) -> None:
    task_id = await create(stack, A, "add", {"a": 1, "b": 2})
    owner = await stack.rpc(B, "tasks/get", {"taskId": task_id})
    assert owner["result"]["taskId"] == task_id
    unknown_id = task_id[:-4] + ("AAAA" if not task_id.endswith("AAAA") else "BBBB")
    for method, extra in (
        ("tasks/get", {}),
        ("tasks/cancel", {}),
        ("tasks/update", {"inputResponses": {"k": {"action": "cancel"}}}),
    ):
        bodies = [
            await stack.rpc(B, method, {"taskId": task_id, **extra}, token="bob"),
            await stack.rpc(B, method, {"taskId": unknown_id, **extra}, token="bob"),
            await stack.rpc(B, method, {"taskId": unknown_id, **extra}),
            await stack.rpc(B, method, {"taskId": "no{such}:id\r\n", **extra}),
        ]
        expected = {
            "jsonrpc": "2.0",
            "id": 7,
            "error": {"code": -32602, "message": "Failed to retrieve task: Task not found"},
        }
        assert bodies == [expected] * 4, method
    # Bob's attempts changed nothing: the owner still sees the task, uncancelled.
    async with stack.client(A) as a:
        final = await until_status(a, task_id, "completed")
    assert final["result"]["structuredContent"] == {"result": 3}


async def test_a_mismatched_mcp_name_is_refused_and_a_missing_one_accepted(
    stack: McpStack,
) -> None:
    # SEP-2243 / SEP-2663: Mcp-Name must equal params.taskId on tasks/*; -32020, HTTP 400.
    task_id = await create(stack, A, "add", {"a": 2, "b": 2})
    other = await create(stack, A, "add", {"a": 3, "b": 3})
    for method, extra in (
        ("tasks/get", {}),
        ("tasks/update", {"inputResponses": {"k": {"action": "cancel"}}}),
        ("tasks/cancel", {}),
    ):
        params = {"taskId": task_id, **extra}
        for server in (A, B):  # any server answers for any task, and alike
            status, reply = await stack.rpc_reply(
                server, method, params, headers={"Mcp-Name": other}
            )
            assert status == 400, (method, reply)
            assert reply["error"]["code"] == -32020, (method, reply)
            assert task_id not in json.dumps(reply)  # names no task
            # A missing header is accepted (fastmcp-tasks' client sends none on tasks/*).
            status, reply = await stack.rpc_reply(
                server, method, params, headers={"Mcp-Name": None}
            )
            assert status == 200, (method, reply)
            assert "result" in reply, (method, reply)
    async with stack.client(A) as a:
        assert (await until_status(a, other, "completed"))["status"] == "completed"


async def test_cancel_on_b_stops_the_running_tool(stack: McpStack) -> None:
    task_id = await create(stack, A, "hold", {})
    async with stack.client(B) as b:

        async def holding() -> bool:
            task = await get_task(b.session, task_id)
            return task.get("statusMessage") == "holding"

        await wait_until(holding, within=30, what="the tool to report progress")
        ack = await cancel_task(b.session, task_id)
        assert ack["resultType"] == "complete"
        final = await until_status(b, task_id, "cancelled")
        check_task_shape(final, "complete")
        # Cancelling a terminal task is acknowledged again.
        assert (await cancel_task(b.session, task_id))["resultType"] == "complete"


async def test_a_crashing_tool_fails_with_a_generic_error_and_logs_no_secret(
    stack: McpStack,
) -> None:
    task_id = await create(stack, A, "crash", {"secret": SECRET})
    async with stack.client(B) as b:
        final = await until_status(b, task_id, "failed")
    check_task_shape(final, "complete")
    assert final["error"] == {"code": -32603, "message": "Internal error"}

    def logged_failure() -> bool:
        # The worker names the task by its reference: never its whole ID (see the stack).
        return task_ref(task_id) in stack.log_text() and "handler_error" in stack.log_text()

    await wait_until(lambda: asyncio.sleep(0, logged_failure()), within=10, what="the log")
    assert SECRET not in stack.log_text()


async def test_a_tool_raising_a_jsonrpc_error_fails_with_it(stack: McpStack) -> None:
    task_id = await create(stack, B, "refuse", {})
    async with stack.client(A) as a:
        final = await until_status(a, task_id, "failed")
    assert final["error"] == {
        "code": -32001,
        "message": "Quota exceeded",
        "data": {"retryAfterMs": 1000},
    }


async def test_a_tool_error_is_a_completed_task_with_is_error(stack: McpStack) -> None:
    task_id = await create(stack, A, "tool_error", {})
    async with stack.client(B) as b:
        final = await until_status(b, task_id, "completed")
    assert final["result"]["isError"] is True
    assert "the input file is empty" in final["result"]["content"][0]["text"]


async def test_sampling_round_trip(stack: McpStack) -> None:
    task_id = await create(stack, A, "ask_model", {"question": "2+2?"})
    async with stack.client(B) as b:
        asking = await until_status(b, task_id, "input_required")
        request = asking["inputRequests"]["sample-1"]
        assert request["method"] == "sampling/createMessage"
        assert request["params"]["maxTokens"] == 10
        # A wrong variant is ignored; the right one is taken.
        await update_task(b.session, task_id, {"sample-1": {"action": "accept"}})
        assert (await get_task(b.session, task_id))["status"] == "input_required"
        answer = {"role": "assistant", "content": {"type": "text", "text": "4"}, "model": "m"}
        await update_task(b.session, task_id, {"sample-1": answer})
        final = await until_status(b, task_id, "completed")
    assert final["result"]["content"][0]["text"] == "model said: 4"


async def test_a_multi_round_trip_tool_is_resumed_with_answers(stack: McpStack) -> None:
    task_id = await create(stack, A, "multi_round", {})
    async with stack.client(B) as b:
        asking = await until_status(b, task_id, "input_required")
        assert asking["inputRequests"]["color"]["method"] == "elicitation/create"
        await update_task(
            b.session, task_id, {"color": {"action": "accept", "content": {"c": "red"}}}
        )
        final = await until_status(b, task_id, "completed")
    assert final["result"]["content"][0]["text"] == "colour red after round-1"


async def test_methods_the_extension_does_not_serve(stack: McpStack) -> None:
    task_id = await create(stack, A, "add", {"a": 2, "b": 2})
    for method in ("tasks/result", "tasks/list"):
        reply = await stack.rpc(B, method, {"taskId": task_id})
        assert reply["error"]["code"] == -32601, method


async def test_a_client_without_the_extension(stack: McpStack) -> None:
    async with stack.client(A, extensions=[]) as plain:
        # An optional task tool runs inline.
        inline = await plain.call_tool("add", {"a": 20, "b": 22})
        assert inline.structured_content == {"result": 42}
        # A required one is refused with the capability it needs.
        with pytest.raises(MCPError) as refused:
            await plain.call_tool("hold", {})
        assert refused.value.code == -32021
        assert refused.value.data == {
            "requiredCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}}
        }
        with pytest.raises(MCPError) as get_refused:
            await get_task(plain.session, "0.AAAAAAAAAAAAAAAAAAAAAAAA")
        assert get_refused.value.code == -32021


async def test_invalid_arguments_are_answered_inline_and_store_nothing(stack: McpStack) -> None:
    from redis.asyncio import Redis

    async with Redis.from_url(stack.url) as redis:
        before = len([k async for k in redis.scan_iter(match=f"{{{stack.prefix}:*:task:*")])
        reply = await stack.rpc(A, "tools/call", {"name": "add", "arguments": {"a": "x"}})
        after = len([k async for k in redis.scan_iter(match=f"{{{stack.prefix}:*:task:*")])
    assert reply["result"]["isError"] is True
    assert reply["result"]["resultType"] == "complete"
    assert after == before


class _ListenParams(RequestParams):
    model_config = ConfigDict(extra="allow")


class _Listen(Request[_ListenParams, str]):
    method: str = "subscriptions/listen"


class _TaskNote(NotificationParams):
    model_config = ConfigDict(extra="allow")


class _Collector(TasksClient):
    def __init__(self) -> None:
        super().__init__()
        self.seen: list[dict[str, Any]] = []

    def notifications(self) -> list[NotificationBinding[Any]]:
        return [
            NotificationBinding(
                method="notifications/tasks", params_type=_TaskNote, handler=self._on
            )
        ]

    async def _on(self, params: _TaskNote) -> None:
        self.seen.append(params.model_dump(by_alias=True, mode="json", exclude_none=True))


async def test_task_notifications_carry_what_tasks_get_returns(stack: McpStack) -> None:
    task_id = await create(stack, A, "greet", {"greeting": "Hey"})
    collector = _Collector()
    async with stack.client(B, extensions=[collector]) as b, stack.client(B, token="bob") as bob:
        params = _ListenParams.model_validate({"notifications": {"taskIds": [task_id]}})
        listen = asyncio.ensure_future(
            b.session.send_request(_Listen(params=params), SubscriptionsListenResult)
        )
        # Another principal subscribing to the same task is agreed nothing.
        bob_params = _ListenParams.model_validate({"notifications": {"taskIds": [task_id]}})
        bob_listen = await bob.session.send_request(
            _Listen(params=bob_params), SubscriptionsListenResult
        )
        assert bob_listen is not None

        async def asked() -> dict[str, Any] | None:
            for note in collector.seen:
                if note["status"] == "input_required":
                    return note
            return None

        note = await wait_until(asked, within=30, what="an input_required notification")
        current = await get_task(b.session, task_id)
        if current["status"] == "input_required":
            expected = {k: v for k, v in current.items() if k not in {"resultType", "_meta"}}
            assert {k: v for k, v in note.items() if k != "_meta"} == expected
        await update_task(
            b.session, task_id, {"elicit-1": {"action": "accept", "content": {"name": "Sam"}}}
        )

        async def roots_note() -> bool:
            return any("roots-2" in n.get("inputRequests", {}) for n in collector.seen)

        await wait_until(roots_note, within=30, what="the roots round notification")
        await update_task(b.session, task_id, {"roots-2": {"roots": []}})
        ended = await asyncio.wait_for(listen, timeout=30)
        assert ended is not None
        final = await get_task(b.session, task_id)
    last = collector.seen[-1]
    assert last["status"] == "completed"
    assert {k: v for k, v in last.items() if k != "_meta"} == {
        k: v for k, v in final.items() if k not in {"resultType", "_meta"}
    }


async def test_the_fast_path_served_this_modules_polls(stack: McpStack) -> None:
    # Last in the module on purpose: the servers run with the fast path, and the
    # tasks/* requests above (SDK client and raw) must have gone through it.
    async with httpx2.AsyncClient(timeout=30) as http:
        for server in (A, B):
            url = stack.endpoint(server).replace("/mcp", "/test/fast-path")
            counts = (await http.get(url)).json()
            assert counts["served"] > 0, counts


# -- refusals for want of room, and the tenant hooks: in process ------------------------
#
# The manager's Limits differ from test to test, so these serve the application in
# this process (the SDK's app and its fast path, through httpx's ASGI transport, on the
# session's redis-server) rather than in server processes started for each.

PATHS = ("sdk", "fast")
ENVELOPE = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {
        "extensions": {"io.modelcontextprotocol/tasks": {}}
    },
}
JOB = {"name": "job", "arguments": {}}


def _refused(reason: str) -> dict[str, Any]:
    error = {"code": -32003, "message": "Task capacity exceeded", "data": {"reason": reason}}
    return {"jsonrpc": "2.0", "id": 7, "error": error}


def _by_header(ctx: ServerRequestContext[Any, Any]) -> RequestContext:
    # The principal is the x-user header: two principals without an auth server.
    headers: Any = getattr(ctx.request, "headers", {})
    return RequestContext("/mcp", f"user:{headers['x-user']}")


def _org(params: CallToolRequestParams, ctx: ServerRequestContext[Any, Any]) -> str | None:
    headers: Any = getattr(ctx.request, "headers", {})
    org: str | None = headers.get("x-org")
    if org == "fail":
        raise RuntimeError(f"directory down: {SECRET}")
    if org == "number":
        return cast("str", 7)  # a hook's bug: the extension checks what it gets
    return org


def _weight(params: CallToolRequestParams, ctx: ServerRequestContext[Any, Any]) -> int | None:
    headers: Any = getattr(ctx.request, "headers", {})
    weight = headers.get("x-weight")
    return None if weight is None else cast("int", json.loads(weight))  # "1.5": a hook's bug


def _plan(params: CallToolRequestParams, ctx: ServerRequestContext[Any, Any]) -> TenantPlan | None:
    headers: Any = getattr(ctx.request, "headers", {})
    name = headers.get("x-plan")
    if name == "free":
        return TenantPlan(max_open_tasks=1, name="free")
    if name == "heavy":
        return TenantPlan(weight=6)  # over the test's Limits(max_tenant_weight=5)
    if name == "wrong":
        return cast("TenantPlan", "pro")  # a hook's bug: the extension checks what it gets
    return None


@dataclass
class InProcess:
    """One application on a manager of given Limits, reached by its SDK path and fast path."""

    manager: RedisTaskManager
    paths: dict[str, Any]

    async def rpc(
        self, path: str, user: str, method: str, params: dict[str, Any], **headers: str
    ) -> dict[str, Any]:
        """One 2026-era request as ``user`` (HTTP 200 expected); the reply."""
        name = str(params["taskId"] if "taskId" in params else params["name"])
        transport = httpx2.ASGITransport(app=self.paths[path])
        async with httpx2.AsyncClient(transport=transport, base_url="http://127.0.0.1:9") as http:
            reply = await http.post(
                "/mcp",
                json={
                    "jsonrpc": "2.0",
                    "id": 7,
                    "method": method,
                    "params": {**params, "_meta": ENVELOPE},
                },
                headers={
                    "Accept": "application/json, text/event-stream",
                    "MCP-Protocol-Version": "2026-07-28",
                    "Mcp-Method": method,
                    "Mcp-Name": name,
                    "x-user": user,
                    **headers,
                },
            )
        parsed: dict[str, Any] = reply.json()
        # The SDK's HTTP status of each code: -32003 has none of its own (a body to read).
        invalid = parsed.get("error", {}).get("code") == -32602
        assert reply.status_code == (400 if invalid else 200), reply.text
        return parsed

    async def call(self, path: str, user: str, **headers: str) -> dict[str, Any]:
        """A task-augmented ``tools/call`` of ``job``; the reply."""
        return await self.rpc(path, user, "tools/call", JOB, **headers)


@asynccontextmanager
async def in_process(url: str, prefix: str, limits: Limits) -> AsyncIterator[InProcess]:
    """Serve ``job`` (``REQUIRED``, no worker) on a manager with ``limits``; the tenant
    is the ``x-org`` header (absent: the binding), the weight ``x-weight``, the plan
    ``x-plan`` (see :func:`_plan`)."""
    manager = RedisTaskManager.from_url(url, prefix=prefix, limits=limits)
    tasks = TasksExtension(
        manager,
        tools={"job": TaskSupport.REQUIRED},
        authorizer=_by_header,
        tenant=_org,
        weight=_weight,
        plan=_plan,
    )
    server = MCPServer("limits", extensions=[tasks], lifespan=tasks.lifespan)

    @server.tool()
    def job() -> str:
        """Never runs here: every call becomes a task."""
        return "done"

    app = tasks.asgi(server.streamable_http_app(json_response=True, stateless_http=True))
    endpoints = [getattr(route, "app", None) for route in app.routes]
    fast = next(e for e in endpoints if isinstance(e, FastPath))
    async with app.router.lifespan_context(app):
        yield InProcess(manager, {"sdk": fast.inner, "fast": fast})


async def test_a_tenant_over_its_quota_gets_a_capacity_error(
    redis_server: RedisServer, prefix: str
) -> None:
    async with in_process(redis_server.url, prefix, Limits(max_open_tasks_per_tenant=2)) as app:
        for path in PATHS:
            user = f"quota-{path}"  # a tenant per path: each fills its own quota
            first, second = [(await app.call(path, user))["result"] for _ in range(2)]
            assert first["status"] == second["status"] == "working"
            # No retryAfterMs: a place frees when a task ends, at no known time.
            assert await app.call(path, user) == _refused("quota")
            # tasks/* are not subject to the quota; a task that ends frees its place.
            read = await app.rpc(path, user, "tasks/get", {"taskId": first["taskId"]})
            assert read["result"]["status"] == "working"
            cancel = await app.rpc(path, user, "tasks/cancel", {"taskId": first["taskId"]})
            assert cancel["result"]["resultType"] == "complete"
            await app.manager.complete_task(second["taskId"], {"content": []})
            assert (await app.call(path, user))["result"]["status"] == "working"


async def test_a_tenant_over_its_create_rate_is_told_when_to_retry(
    redis_server: RedisServer, prefix: str
) -> None:
    # One create per 100 s, no burst: the second call is refused however slow the machine.
    limits = Limits(tenant_create_rate=0.01, tenant_create_burst=1)
    async with in_process(redis_server.url, prefix, limits) as app:
        for path in PATHS:
            user = f"rate-{path}"
            assert "result" in await app.call(path, user)
            reply = await app.call(path, user)
            retry = reply["error"]["data"].pop("retryAfterMs")
            assert isinstance(retry, int)
            assert 0 < retry <= 100_000
            assert reply == _refused("rate")


async def test_the_tenant_hook_groups_principals_under_one_quota(
    redis_server: RedisServer, prefix: str
) -> None:
    acme = {"x-org": "acme"}
    async with in_process(redis_server.url, prefix, Limits(max_open_tasks_per_tenant=2)) as app:
        assert "result" in await app.call("sdk", "alice", **acme)
        assert "result" in await app.call("fast", "bob", **acme)
        # Both principals' tasks count against acme; alone, each would have room.
        assert await app.call("sdk", "alice", **acme) == _refused("quota")
        assert await app.call("fast", "bob", **acme) == _refused("quota")
        assert "result" in await app.call("fast", "alice")  # her own binding
        assert "result" in await app.call("sdk", "bob", **{"x-org": "globex"})


async def test_failing_hooks_and_refused_weights(
    redis_server: RedisServer, prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    internal = {"jsonrpc": "2.0", "id": 7, "error": {"code": -32603, "message": "Internal error"}}
    over = {
        "jsonrpc": "2.0",
        "id": 7,
        "error": {"code": -32602, "message": "Tool arguments exceed the task limits"},
    }
    async with in_process(redis_server.url, prefix, Limits(max_tenant_weight=5)) as app:
        for path in PATHS:
            with caplog.at_level(logging.ERROR, logger="redis_tasks.mcp"):
                assert await app.call(path, "u", **{"x-org": "fail"}) == internal
                assert await app.call(path, "u", **{"x-org": "number"}) == internal
                assert await app.call(path, "u", **{"x-weight": "1.5"}) == internal
                # Out of Limits: refused like any task input over a bound.
                assert await app.call(path, "u", **{"x-plan": "wrong"}) == internal
            assert await app.call(path, "u", **{"x-weight": "6"}) == over
            assert await app.call(path, "u", **{"x-org": "x" * 257}) == over
            assert await app.call(path, "u", **{"x-plan": "heavy"}) == over
            assert "result" in await app.call(path, "u", **{"x-weight": "5"})
            # The plan hook's plan: a quota of one for this call's tenant.
            free = {"x-plan": "free", "x-org": f"org-{path}"}
            assert "result" in await app.call(path, "u", **free)
            assert await app.call(path, "u", **free) == _refused("quota")
    logged = [r.getMessage() for r in caplog.records]
    assert logged.count("tenant, weight or plan hook failed: RuntimeError") == 2
    assert logged.count("tenant hook returned int, not a str or None") == 2
    assert logged.count("weight hook returned float, not an int") == 2
    assert logged.count("plan hook returned str, not a TenantPlan or None") == 2
    assert SECRET not in caplog.text


async def test_a_full_redis_refuses_writes_with_a_capacity_error(
    redis_server: RedisServer, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # What the manager raises on an OOM reply (maxmemory under noeviction); the core's
    # own tests make Redis full for real.
    async def full(*args: Any, **kwargs: Any) -> Any:
        raise CapacityError("Redis is out of memory (maxmemory): nothing was stored")

    async with in_process(redis_server.url, prefix, Limits()) as app:
        task_id = (await app.call("sdk", "u"))["result"]["taskId"]
        for method in ("create_task", "update_task", "request_cancellation"):
            monkeypatch.setattr(app.manager, method, full)
        answers = {"k": {"action": "cancel"}}
        for path in PATHS:
            assert await app.call(path, "u") == _refused("full")
            update = {"taskId": task_id, "inputResponses": answers}
            assert await app.rpc(path, "u", "tasks/update", update) == _refused("full")
            assert await app.rpc(path, "u", "tasks/cancel", {"taskId": task_id}) == _refused("full")
            read = await app.rpc(path, "u", "tasks/get", {"taskId": task_id})
            assert read["result"]["status"] == "working"
