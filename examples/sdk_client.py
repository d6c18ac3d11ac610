"""A Python client of an MCP server with the tasks extension (`redis_tasks.mcp`).

It calls one tool and prints its result, whether the server ran the tool inline or as a
task: `TasksClient` declares the extension, polls the task (`tasks/get`) and answers each
of its input requests through the callback below (`tasks/update`)::

    python examples/sdk_client.py http://127.0.0.1:8000/mcp TOKEN greet '{"greeting": "Hi"}'

Any server built with `redis_tasks.mcp.TasksExtension` answers it (`make demo` starts
two). `answer` gets each input request the task asks, by key, as the wire carries it
(`{"method": ..., "params": ...}`), and returns the response.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from redis_tasks.mcp import TasksClient


async def answer(key: str, request: dict[str, Any]) -> dict[str, Any]:
    """One answer per input request: what a person (or the application) replies."""
    method = request["method"]
    if method == "elicitation/create":  # a question: accept it with a name
        return {"action": "accept", "content": {"name": "Ada"}}
    if method == "roots/list":  # the client's roots: none here
        return {"roots": []}
    if method == "sampling/createMessage":  # a model's reply, which this client fakes
        reply = {"type": "text", "text": "42"}
        return {"role": "assistant", "content": reply, "model": "example"}
    raise ValueError(f"no answer for {method} ({key})")


async def main(endpoint: str, token: str, tool: str, arguments: dict[str, Any]) -> None:
    """Call ``tool`` with ``arguments`` as the bearer of ``token``; print its result."""
    headers = {"Authorization": f"Bearer {token}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=60) as http,
        Client(
            streamable_http_client(endpoint, http_client=http),
            extensions=[TasksClient(answer)],
        ) as client,
    ):
        result = await client.call_tool(tool, arguments)
        print(json.dumps(result.model_dump(by_alias=True, mode="json", exclude_none=True)))


if __name__ == "__main__":
    endpoint, token, tool = sys.argv[1:4]
    asyncio.run(main(endpoint, token, tool, json.loads(sys.argv[4]) if len(sys.argv) > 4 else {}))
