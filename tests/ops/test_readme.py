"""The README's commands and usage example stay true."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from redis_tasks._bench._cli import SCENARIOS
from redis_tasks.testing import RedisServer

README = (Path(__file__).resolve().parents[2] / "README.md").read_text()


def test_the_first_two_commands_are_the_demo_and_the_tests() -> None:
    block = re.search(r"```sh\n(.*?)```", README, re.S)
    assert block is not None
    commands = [line.split("#")[0].strip() for line in block.group(1).splitlines()]
    assert commands[:2] == ["make demo", "make test"]


def test_the_usage_example_runs(redis_server: RedisServer, tmp_path: Path) -> None:
    block = re.search(r"```python\n(.*?)```", README, re.S)
    assert block is not None
    code = block.group(1).replace("redis://localhost:6379/0", redis_server.url)
    code = code.replace('prefix="rt"', 'prefix="readme"')
    code += "\nprint('readme example ok')\n"
    script = tmp_path / "example.py"
    script.write_text(code)
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "readme example ok"


def test_the_worker_example_is_real_code() -> None:
    blocks = re.findall(r"```python\n(.*?)```", README, re.S)
    assert len(blocks) == 7  # each is run or compiled by a test here
    namespace: dict[str, object] = {}
    exec(compile(blocks[1], "README.md", "exec"), namespace)  # defines the handler only
    assert callable(namespace["handler"])


def test_the_cluster_page_s_manager_is_made_as_shown() -> None:
    """``docs_src/cluster_manager.py`` (the Redis Cluster page shows it): it names a remote
    node, so the manager is made, never entered."""
    from redis_tasks import RedisTaskManager

    source = Path(__file__).resolve().parents[2] / "docs_src" / "cluster_manager.py"
    namespace: dict[str, object] = {}
    exec(compile(source.read_text(), str(source), "exec"), namespace)
    manager = namespace["manager"]
    assert isinstance(manager, RedisTaskManager)
    assert manager.timeout == 6.0


def test_the_tenants_example_runs(redis_server: RedisServer, tmp_path: Path) -> None:
    """The tenants section's limits and create_for, on a real server: the quota refuses
    the 101st open task of an organisation, with nothing stored, and names no tenant."""
    (block,) = [b for b in re.findall(r"```python\n(.*?)```", README, re.S) if "create_for" in b]
    script = tmp_path / "tenants.py"
    script.write_text(
        block
        + textwrap.dedent(
            f"""
            import asyncio
            import dataclasses

            async def main() -> None:
                limits = dataclasses.replace(LIMITS, tenant_create_rate=None,
                                             tenant_create_burst=None)
                async with RedisTaskManager.from_url(
                    "{redis_server.url}", prefix="readme-tenants", limits=limits
                ) as manager:
                    made = [await create_for(manager, "acme", f"u{{n}}", "pro")
                            for n in range(101)]
                    assert all(made[:100]) and made[100] is None, made[100]
                    other = await create_for(manager, "globex", "u1", "free")
                    assert other is not None
                    await manager.client.delete(
                        *[k async for k in manager.client.scan_iter("{{readme-tenants:*")]
                    )

            asyncio.run(main())
            """
        )
    )
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "quota None"


def test_the_plans_example_runs(redis_server: RedisServer, tmp_path: Path) -> None:
    """The plans table, on a real server: "free" globex gets 20 open tasks, "pro" acme
    more than the default plan's 100 (rates off, so only the quotas are at play)."""
    blocks = re.findall(r"```python\n(.*?)```", README, re.S)
    (tenants,) = [b for b in blocks if "create_for" in b]
    (plans,) = [b for b in blocks if "PLANS" in b]
    script = tmp_path / "plans.py"
    script.write_text(
        tenants
        + plans
        + textwrap.dedent(
            f"""
            import asyncio
            import dataclasses

            async def main() -> None:
                global LIMITS, PLANS
                LIMITS = dataclasses.replace(LIMITS, tenant_create_rate=None,
                                             tenant_create_burst=None)
                PLANS = {{k: dataclasses.replace(p, create_rate=None) for k, p in PLANS.items()}}
                async with planned_manager("{redis_server.url}") as manager:
                    free = [await create_for(manager, "globex", "u1", "free") for _ in range(21)]
                    assert all(free[:20]) and free[20] is None
                    pro = [await create_for(manager, "acme", "u1", "pro") for _ in range(150)]
                    assert all(pro)
                    await manager.client.delete(
                        *[k async for k in manager.client.scan_iter("{{rt:*")]
                    )

            asyncio.run(main())
            """
        )
    )
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "quota None"


def test_the_tracing_example_gives_a_process_the_library_s_spans() -> None:
    # examples/tracing.py (the Traces page shows it whole), in a process of its own: it
    # sets the global tracer provider, once and for all.
    done = subprocess.run(
        [sys.executable, "examples/tracing.py"],
        cwd=Path(__file__).resolve().parents[2],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert '"name": "create_task"' in done.stdout
    assert '"kind": "SpanKind.PRODUCER"' in done.stdout


def test_the_mcp_example_builds_a_server_and_a_worker_handler() -> None:
    from mcp.server.mcpserver import MCPServer

    blocks = re.findall(r"```python\n(.*?)```", README, re.S)
    (example,) = [b for b in blocks if "MCPServer(" in b]
    (input_first,) = [b for b in blocks if "run_as_task" in b and b is not example]
    namespace: dict[str, object] = {}
    exec(compile(example, "README.md", "exec"), namespace)  # builds; connects to nothing
    assert isinstance(namespace["server"], MCPServer)
    assert callable(namespace["handler"])
    assert callable(namespace["app"])
    # The input_first example adds its tool to that server (with its own extension).
    exec(compile(input_first, "README.md", "exec"), namespace)
    assert namespace["tasks"].task_support("book") is not None  # type: ignore[attr-defined]
    assert callable(namespace["book"])


def test_the_fastmcp_example_builds_an_app_whose_tool_is_a_task(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from fastmcp import FastMCP

    from redis_tasks.fastmcp import TasksExtension

    (example,) = [b for b in re.findall(r"```python\n(.*?)```", README, re.S) if "FastMCP(" in b]
    monkeypatch.setenv("REDIS_URL", "redis://127.0.0.1:1/0")  # read; never connected to
    namespace: dict[str, Any] = {}
    exec(compile(example, "README.md", "exec"), namespace)
    app = namespace["mcp"]
    assert isinstance(app, FastMCP)
    assert isinstance(app._extensions["io.modelcontextprotocol/tasks"], TasksExtension)
    tool = asyncio.run(app.get_tool("report"))
    assert tool is not None
    assert tool.task_config.mode == "required"


def test_every_documented_bench_command_parses() -> None:
    """``redis-tasks bench`` lines in both READMEs and the site's pages use only real
    scenarios and options."""
    from redis_tasks.__main__ import build_parser

    root = Path(__file__).resolve().parents[2]
    pages = [(root / "benchmarks" / "README.md").read_text()]
    pages += [page.read_text() for page in sorted((root / "docs").rglob("*.md"))]
    lines = [
        line.split("#")[0].split("&&")[-1].strip()
        for text in (README, *pages)
        for block in re.findall(r"```sh\n(.*?)```", text, re.S)
        for line in block.replace("\\\n", " ").splitlines()
        if "redis-tasks bench" in line
    ]
    assert len(lines) >= 4
    parser = build_parser()
    for line in lines:
        argv = line.split("redis-tasks", 1)[1].split()
        args = parser.parse_args(argv)
        assert args.command == "bench"
        assert set(args.scenarios) <= set(SCENARIOS), line
