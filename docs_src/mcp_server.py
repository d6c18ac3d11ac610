"""An MCP server on the official SDK whose slow tools run as tasks: the same module serves
(uvicorn) and works (``redis-tasks worker docs_src.mcp_server:handler``). The Guides / MCP
servers page shows this file whole; the tests build its server and handler."""

from mcp.server.mcpserver import Context, MCPServer
from pydantic import BaseModel

from redis_tasks import RedisTaskManager
from redis_tasks.mcp import TasksExtension, TaskSupport, tool_handler


class Confirm(BaseModel):
    """What ``rebuild`` asks."""

    ok: bool


tasks = TasksExtension(
    RedisTaskManager.from_url("redis://localhost:6379/0", prefix="reports"),
    tools={"report": TaskSupport.OPTIONAL, "rebuild": TaskSupport.REQUIRED},
)
server = MCPServer("reports", extensions=[tasks], lifespan=tasks.lifespan)


@server.tool()
async def report(quarter: str, ctx: Context) -> str:
    """A slow tool: with the extension declared, a call returns a task at once."""
    await ctx.report_progress(1, 2, "collecting")  # becomes the task's statusMessage
    return f"report for {quarter}"


@server.tool()
async def rebuild(ctx: Context) -> str:
    """Always a task; its elicitation becomes an input_required round."""
    answer = await ctx.elicit("Rebuild everything?", Confirm)
    return "rebuilt" if answer.action == "accept" else "skipped"


# serve with uvicorn, as many processes as you like; tasks.asgi adds the polling fast path
app = tasks.asgi(server.streamable_http_app())
handler = tool_handler(server)  # redis-tasks worker yourapp:handler
