"""A ``REQUIRED`` tool that gathers its input in multi-round-trip rounds before it becomes a
task (``input_first``, ``run_as_task``). The Guides / MCP servers page shows this file
whole; the tests build it."""

from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp_types import ElicitRequest, ElicitRequestFormParams, ElicitResult, InputRequiredResult

from redis_tasks import RedisTaskManager
from redis_tasks.mcp import TasksExtension, TaskSupport, run_as_task

manager = RedisTaskManager.from_url("redis://localhost:6379/0", prefix="bookings")
tasks = TasksExtension(manager, tools={"book": TaskSupport.REQUIRED}, input_first=["book"])
server = MCPServer("bookings", extensions=[tasks], lifespan=tasks.lifespan)


async def make_the_booking(room: str, guest: str) -> str:
    """The slow part, which runs in a worker."""
    return f"{room} booked for {guest}"


@server.tool()
async def book(room: str, ctx: Context) -> Any:
    """Ask who the guest is (in the server), then book (in a task)."""
    answers = ctx.input_responses or {}
    if "guest" not in answers:  # round 1, in the server: ask, no task yet
        question = ElicitRequest(
            params=ElicitRequestFormParams(
                message="Who is the guest?",
                requested_schema={"type": "object", "properties": {"name": {"type": "string"}}},
            )
        )
        return InputRequiredResult(input_requests={"guest": question}, request_state=room)
    guest = answers["guest"]
    if not isinstance(guest, ElicitResult) or guest.action != "accept" or not guest.content:
        return "nothing booked"  # round 2, declined: answered inline, no task made
    run_as_task()  # round 2, in the server: the answer goes into a new task; the reply is
    # its CreateTaskResult. In the worker, run_as_task() returns and the tool goes on.
    return await make_the_booking(room, str(guest.content["name"]))
