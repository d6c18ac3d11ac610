"""Drive examples/fastmcp_app.py over HTTP (MCP 2026-07-28), whatever its tasks backend.

``python fastmcp_client.py http://127.0.0.1:8000/mcp`` prints ``ok <step>`` for each of:
a task polled to its result, a progress message seen as the task's status, an input
round answered through ``tasks/update``, and a cancellation. It exits 1 at the first
step that does not hold (within 60 s).
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import httpx2

VERSION = "2026-07-28"
TASKS = "io.modelcontextprotocol/tasks"


def rpc(url: str, method: str, params: dict[str, Any]) -> dict[str, Any]:
    """One JSON-RPC request declaring the tasks extension; its ``result`` (or exit 1)."""
    meta = {
        "io.modelcontextprotocol/protocolVersion": VERSION,
        "io.modelcontextprotocol/clientCapabilities": {"extensions": {TASKS: {}}},
    }
    headers = {
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": VERSION,
        "Mcp-Method": method,
        # What the request is about (SEP-2243): the tool called, or the task.
        "Mcp-Name": str(params.get("name") or params.get("taskId")),
    }
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": {**params, "_meta": meta}}
    reply = httpx2.post(url, json=body, headers=headers, timeout=30)
    text = reply.text
    if text.lstrip().startswith(("event:", "data:")):  # an SSE-framed reply
        text = [line[5:] for line in text.splitlines() if line.startswith("data:")][-1]
    message = json.loads(text)
    if "error" in message:
        sys.exit(f"{method}: {message['error']}")
    result: dict[str, Any] = message["result"]
    return result


def until(url: str, task_id: str, done: Any) -> dict[str, Any]:
    """Poll ``tasks/get`` until ``done(task)``."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        task = rpc(url, "tasks/get", {"taskId": task_id})
        if done(task):
            return task
        time.sleep(0.05)
    sys.exit(f"task {task_id[:8]} did not get there: {task}")


def main(url: str) -> None:
    """Run each step against ``url``."""
    created = rpc(url, "tools/call", {"name": "report", "arguments": {"quarter": "Q3"}})
    assert created["resultType"] == "task", created
    task = until(url, created["taskId"], lambda t: t["status"] == "completed")
    assert task["result"]["content"][0]["text"] == "report for Q3", task
    print("ok task polled to its result")

    created = rpc(url, "tools/call", {"name": "crunch", "arguments": {"seconds": 600}})
    until(url, created["taskId"], lambda t: t.get("statusMessage") == "crunching")
    print("ok progress seen as the status message")

    asked = rpc(url, "tools/call", {"name": "rebuild", "arguments": {}})
    task = until(url, asked["taskId"], lambda t: t["status"] == "input_required")
    answers = {key: {"action": "accept", "content": {"ok": True}} for key in task["inputRequests"]}
    rpc(url, "tasks/update", {"taskId": asked["taskId"], "inputResponses": answers})
    task = until(url, asked["taskId"], lambda t: t["status"] == "completed")
    assert task["result"]["content"][0]["text"] == "rebuilt", task
    print("ok input answered through tasks/update")

    rpc(url, "tasks/cancel", {"taskId": created["taskId"]})
    until(url, created["taskId"], lambda t: t["status"] == "cancelled")
    print("ok cancelled")


if __name__ == "__main__":
    main(sys.argv[1])
