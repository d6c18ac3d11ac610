"""A FastMCP app whose ``report`` tool is a task on redis-tasks: one import changed from
fastmcp-tasks. The Guides / FastMCP page shows this file whole; the tests build it."""

from fastmcp import Context, FastMCP
from fastmcp.utilities.tasks import TaskConfig

from redis_tasks.fastmcp import TasksExtension  # was: from fastmcp_tasks import TasksExtension

mcp = FastMCP("reports")
mcp.add_extension(TasksExtension())  # $REDIS_URL; or TasksExtension("redis://...", prefix=...)


@mcp.tool(task=TaskConfig(mode="required"))
async def report(quarter: str, ctx: Context) -> str:
    await ctx.report_progress(1, 2, "collecting")  # the task's statusMessage
    answer = await ctx.elicit("Include forecasts?", bool)  # an input_required round
    forecasts = answer.action == "accept" and answer.data
    return f"report for {quarter}" + (" with forecasts" if forecasts else "")


app = mcp.http_app()
