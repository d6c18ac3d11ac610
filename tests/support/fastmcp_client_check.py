"""fastmcp-tasks 4.1.4's client driving a server of ours: the second independent client.

Run by ``tests/mcp/test_conformance.py`` with the interpreter of fastmcp-tasks' own
virtualenv (``make bench-fastmcp``), which has neither redis-tasks nor its test
helpers: ``python tests/support/fastmcp_client_check.py URL``. It prints ``ok <check>`` for
each check that passes and exits 1 at the first that does not. The server is the
conformance fixture (``tests/support/conformance_app.py``).
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from fastmcp import Client
from fastmcp.exceptions import ToolError
from fastmcp_tasks.client import _send_get, call_tool_task
from mcp.shared.exceptions import MCPError


async def _confirm(message: str, response_type: Any, params: Any, context: Any) -> Any:
    return {"confirm": True}


def _text(result: Any) -> str:
    return "".join(getattr(block, "text", "") for block in result.content)


async def main(url: str) -> None:
    async with Client(url, elicitation_handler=_confirm, timeout=60) as client:
        sync = await client.call_tool("greet", {"name": "World"})
        assert _text(sync) == "Hello, World!", _text(sync)
        print("ok sync tool", flush=True)

        done = await client.call_tool("slow_compute", {"seconds": 0.2, "label": "fastmcp"})
        assert "computed fastmcp" in _text(done), _text(done)
        print("ok task created, polled to its result", flush=True)

        asked = await client.call_tool("confirm_delete", {"filename": "a.txt"})
        assert _text(asked) == "deleted a.txt", _text(asked)
        print("ok elicitation answered through tasks/update", flush=True)

        task = await call_tool_task(client, "slow_compute", {"seconds": 60, "label": "x"})
        await task.cancel()
        final = await task.wait(timeout=30)
        assert final.status == "cancelled", final.status
        print("ok cancel", flush=True)

        try:
            await client.call_tool("failing_job", {})
        except ToolError:
            print("ok tool error", flush=True)
        else:
            raise AssertionError("failing_job did not raise")

        try:
            await client.call_tool("protocol_error_job", {})
        except (ToolError, MCPError):
            print("ok protocol error", flush=True)
        else:
            raise AssertionError("protocol_error_job did not raise")

        try:
            await _send_get(client.session, "0." + "A" * 24)
        except MCPError as exc:
            if exc.error.code != -32602:
                raise AssertionError(f"an unknown task ID gave {exc.error.code}") from exc
            print("ok unknown task ID", flush=True)
        else:
            raise AssertionError("an unknown task ID was found")


if __name__ == "__main__":
    try:
        asyncio.run(main(sys.argv[1]))
    except Exception as exc:  # the test names the check that failed from the output
        print(f"failed: {type(exc).__name__}: {exc}", flush=True)
        raise SystemExit(1) from None
