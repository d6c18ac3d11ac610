"""The deployment surface: TLS (rediss://) and a least-privilege ACL user."""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from functools import partial
from pathlib import Path

import pytest

from redis_tasks import (
    BackendError,
    RedisTaskManager,
    Task,
    TaskExecution,
    TaskRequestContext,
    TaskStatus,
    TaskUpdateContext,
    Worker,
)
from redis_tasks.testing import RedisServer, free_port, wait_listening
from tests.support.backends import acl_user
from tests.support.helpers import ALICE, ELICIT, ELICIT_ANSWER, ORIGIN, wait_until

pytestmark = pytest.mark.standalone_only


@dataclass(frozen=True)
class TlsServer:
    url: str
    ca: Path
    other_ca: Path


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def _make_certificates(directory: Path) -> None:
    """A CA, a server certificate for 127.0.0.1 signed by it, and an unrelated CA."""
    for ca in ("ca", "other-ca"):
        _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{ca}.key",
                 "-out", f"{ca}.crt", "-days", "1", "-subj", f"/CN={ca}",
                 cwd=directory)  # fmt: skip
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out",
             "server.csr", "-subj", "/CN=127.0.0.1", cwd=directory)  # fmt: skip
    (directory / "ext.cnf").write_text("subjectAltName=IP:127.0.0.1\n")
    _openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
             "-CAcreateserial", "-out", "server.crt", "-days", "1", "-extfile", "ext.cnf",
             cwd=directory)  # fmt: skip


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsServer]:
    directory = tmp_path_factory.mktemp("tls")
    _make_certificates(directory)
    port = free_port()
    process = subprocess.Popen(
        ["redis-server", "--port", "0", "--tls-port", str(port), "--bind", "127.0.0.1",
         "--tls-cert-file", "server.crt", "--tls-key-file", "server.key",
         "--tls-ca-cert-file", "ca.crt", "--tls-auth-clients", "no",
         "--save", "", "--appendonly", "no", "--dir", str(directory)],
        cwd=directory, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        wait_listening(port, process, within=30)
        yield TlsServer(
            f"rediss://127.0.0.1:{port}/0", directory / "ca.crt", directory / "other-ca.crt"
        )
    finally:
        process.terminate()
        process.wait(timeout=30)


async def test_tasks_run_end_to_end_over_tls(tls_server: TlsServer, prefix: str) -> None:
    async def handler(execution: TaskExecution) -> dict[str, object]:
        return {"ok": True}

    async with RedisTaskManager.from_url(
        tls_server.url, prefix=prefix, ssl_ca_certs=str(tls_server.ca)
    ) as manager:
        changes: list[str] = []
        registration = manager.event_publisher.subscribe(changes.append)
        await manager.event_publisher.wait_ready()
        async with Worker(manager, handler, concurrency=4) as worker:
            runner = asyncio.create_task(worker.run())
            try:
                tasks = [await manager.create_task(ALICE, ORIGIN) for _ in range(20)]

                async def all_done() -> bool:
                    for task in tasks:
                        found = await manager.find_task(TaskRequestContext(ALICE, task.task_id))
                        if found is None or found.status is not TaskStatus.COMPLETED:
                            return False
                    return True

                await wait_until(all_done, within=30, what="every task completed over TLS")

                async def every_change_seen() -> bool:
                    return len(changes) >= 2 * len(tasks)

                # The event tail reads over TLS too: a create and a completion per task.
                await wait_until(every_change_seen, within=30, what="the change events")
            finally:
                await worker.stop()
                await runner
        registration.close()


async def test_a_server_certificate_from_another_ca_is_refused(
    tls_server: TlsServer, prefix: str
) -> None:
    manager = RedisTaskManager.from_url(
        tls_server.url, prefix=prefix, ssl_ca_certs=str(tls_server.other_ca), timeout=2.0
    )
    with pytest.raises(BackendError):
        async with manager:
            pass
    await manager.client.aclose()


async def test_an_acl_user_limited_to_the_readme_line_runs_everything(
    redis_server: RedisServer, prefix: str
) -> None:
    """The README's ACL line (with this test's prefix) is enough: create, find, update,
    cancel, a worker with input requests and renewals, and the event tail all run, and
    Redis denied nothing (its ACL LOG stays empty). The contract suite also runs as
    such a user: the "acl" backend in conftest."""

    async def handler(execution: TaskExecution) -> dict[str, object]:
        await execution.report("asking")
        answers = await execution.request_input({"ok": ELICIT})
        return {"answer": answers["ok"]["action"]}

    async with (
        acl_user(redis_server, prefix) as (url, _),
        RedisTaskManager.from_url(url, prefix=prefix, wait_replicas=0) as manager,
    ):
        changes: list[str] = []
        registration = manager.event_publisher.subscribe(changes.append)
        await manager.event_publisher.wait_ready()
        async with Worker(manager, handler, concurrency=32, lease=timedelta(seconds=1)) as worker:
            runner = asyncio.create_task(worker.run())
            try:
                tasks = [await manager.create_task(ALICE, ORIGIN) for _ in range(20)]
                cancelled = tasks.pop()
                await manager.request_cancellation(TaskRequestContext(ALICE, cancelled.task_id))
                for task in tasks:
                    ctx = TaskRequestContext(ALICE, task.task_id)
                    await wait_until(partial(asking, manager, ctx), what="the input request")
                    await manager.update_task(
                        TaskUpdateContext(ALICE, task.task_id, {"ok": ELICIT_ANSWER})
                    )
                for task in tasks:
                    done = await wait_until(
                        partial(terminal, manager, task.task_id),
                        within=30,
                        what="the task to end",
                    )
                    assert done.status is TaskStatus.COMPLETED
            finally:
                await worker.stop()
                await runner
        registration.close()
        assert changes


async def asking(manager: RedisTaskManager, ctx: TaskRequestContext) -> bool:
    found = await manager.find_task(ctx)
    return found is not None and found.status is TaskStatus.INPUT_REQUIRED


async def terminal(manager: RedisTaskManager, task_id: str) -> Task | None:
    found = await manager.find_task(TaskRequestContext(ALICE, task_id))
    return found if found is not None and found.is_terminal else None
