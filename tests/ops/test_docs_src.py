"""Every file under ``docs_src/`` (the code the site's guides show) runs or builds as its
page says: the usage example and the handler's own test end to end, the tenants page's
limits and plans on a real server, and the servers and apps built as shown."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest

from docs_src import tenants
from redis_tasks import RedisTaskManager
from redis_tasks.testing import RedisServer

ROOT = Path(__file__).resolve().parents[2]


def test_the_usage_example_runs(redis_server: RedisServer) -> None:
    done = subprocess.run(
        [sys.executable, "docs_src/usage.py"],
        cwd=ROOT,
        env={**os.environ, "REDIS_URL": redis_server.url},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("completed "), done.stdout


async def test_the_testing_page_s_test_passes() -> None:
    """``docs_src/testing_handler.py`` runs the Workers page's handler on a worker."""
    from docs_src.testing_handler import test_a_declined_confirmation_fails_the_task

    await test_a_declined_confirmation_fails_the_task()


async def _drop(manager: RedisTaskManager, prefix: str) -> None:
    await manager.client.delete(*[k async for k in manager.client.scan_iter(f"{{{prefix}:*")])


async def test_the_tenants_quota_refuses_the_101st_and_stores_nothing(
    redis_server: RedisServer, capsys: pytest.CaptureFixture[str]
) -> None:
    """The Tenants page's limits and ``create_for``: the quota refuses the 101st open task
    of an organisation and names no tenant; another organisation is not held back."""
    limits = dataclasses.replace(tenants.LIMITS, tenant_create_rate=None, tenant_create_burst=None)
    async with RedisTaskManager.from_url(
        redis_server.url, prefix="docs-tenants", limits=limits
    ) as manager:
        made = [await tenants.create_for(manager, "acme", f"u{n}", "pro") for n in range(101)]
        assert all(made[:100])
        assert made[100] is None
        assert capsys.readouterr().out == "quota None\n"
        assert await tenants.create_for(manager, "globex", "u1", "free") is not None
        await _drop(manager, "docs-tenants")


async def test_the_tenants_plans_give_each_organisation_its_own_quota(
    redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The plans table: "free" globex gets 20 open tasks, "pro" acme more than the default
    plan's 100 (rates off, so only the quotas are at play)."""
    no_rate = dataclasses.replace(tenants.LIMITS, tenant_create_rate=None, tenant_create_burst=None)
    monkeypatch.setattr(tenants, "LIMITS", no_rate)
    plans = {k: dataclasses.replace(p, create_rate=None) for k, p in tenants.PLANS.items()}
    monkeypatch.setattr(tenants, "PLANS", plans)
    async with tenants.planned_manager(redis_server.url) as manager:
        free = [await tenants.create_for(manager, "globex", "u1", "free") for _ in range(21)]
        assert all(free[:20])
        assert free[20] is None
        pro = [await tenants.create_for(manager, "acme", "u1", "pro") for _ in range(150)]
        assert all(pro)
        await _drop(manager, "rt")


def test_the_cluster_page_s_manager_is_made_as_shown() -> None:
    """It names a remote node, so the manager is made, never entered."""
    from docs_src.cluster_manager import manager

    assert isinstance(manager, RedisTaskManager)
    assert manager.timeout == 6.0


def test_the_mcp_servers_page_builds_its_servers_and_worker_handler() -> None:
    from mcp.server.mcpserver import MCPServer

    from docs_src import input_first, mcp_server  # build; connect to nothing

    assert isinstance(mcp_server.server, MCPServer)
    assert callable(mcp_server.handler)
    assert callable(mcp_server.app)
    assert mcp_server.tasks.task_support("rebuild") is not None
    assert isinstance(input_first.server, MCPServer)
    assert input_first.tasks.task_support("book") is not None


def test_the_fastmcp_page_builds_an_app_whose_tool_is_a_task(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from fastmcp import FastMCP

    from redis_tasks.fastmcp import TasksExtension

    monkeypatch.setenv("REDIS_URL", "redis://127.0.0.1:1/0")  # read; never connected to
    sys.modules.pop("docs_src.fastmcp_report", None)
    from docs_src import fastmcp_report

    app = fastmcp_report.mcp
    assert isinstance(app, FastMCP)
    assert isinstance(app._extensions["io.modelcontextprotocol/tasks"], TasksExtension)
    tool = asyncio.run(app.get_tool("report"))
    assert tool is not None
    assert tool.task_config.mode == "required"
