"""``redis-tasks dashboard``: a real dashboard process, read over HTTP and in Chromium.

The page test runs Debian's headless Chromium (``/usr/bin/chromium``, driven by
Playwright, which downloads no browser) against a dashboard process, logged in
with its token, while a real worker process drains a load the test keeps
creating: the figures must appear and move, every chart must draw its lines, and
the screenshot must show them (pixels of each series' colour inside each chart).
Nothing of the tasks' origins or payloads, no tenant key (tenants show by digest)
and no task ID (a lease shows its task's reference) may reach the page: with
tasks leased, no byte of any route holds one. Beyond loopback the dashboard does
not start without a token, and with one it refuses every request that lacks it.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from redis_tasks import RedisTaskManager, TaskExecution, TaskOrigin, Worker, task_ref
from redis_tasks._dashboard.auth import TOKEN_ENV
from redis_tasks._tenancy import tenant_digest
from redis_tasks.testing import RedisServer, start_redis_server
from tests.support.fleet import ROOT, Fleet
from tests.support.helpers import ALICE, wait_until, whole_task_ids

SECRET = "s3cr3t-" + uuid.uuid4().hex
#: A tenant key: its digest may show, the key never.
TENANT = "org-" + SECRET
ORIGIN = TaskOrigin.from_persisted_state({"tool": "t", "arguments": {"k": SECRET}})
CHROMIUM = "/usr/bin/chromium"
#: The flags a closed network needs (no background connections, no sandbox as root).
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
#: Each chart's series and the colour the stylesheet gives it.
SERIES = {
    "#chart-throughput": {"created": (0x2F, 0x6F, 0xDB), "ended": (0x1A, 0x9B, 0x5B)},
    "#chart-backlog": {"backlog": (0xD9, 0x82, 0x2B), "pending": (0x7B, 0x5B, 0xD6)},
    "#chart-pickup": {"p50": (0x2F, 0x6F, 0xDB), "p99": (0xC4, 0x3C, 0x3C)},
}


class Dashboard:
    """A ``redis-tasks dashboard`` process and its JSON log."""

    def __init__(
        self,
        directory: Path,
        url: str,
        prefix: str,
        *options: str,
        env: dict[str, str] | None = None,
    ) -> None:
        self.log = directory / f"dashboard-{uuid.uuid4().hex[:6]}.log"
        self.process = subprocess.Popen(
            [
                *(sys.executable, "-m", "redis_tasks", "dashboard", "--redis-url", url),
                *("--prefix", prefix, "--port", "0", *options),
            ],
            cwd=ROOT,
            env={**_without_token(), **(env or {})},
            stdout=subprocess.DEVNULL,
            stderr=self.log.open("wb"),
        )

    def events(self) -> list[dict[str, Any]]:
        lines = self.log.read_text().splitlines() if self.log.exists() else []
        return [json.loads(line) for line in lines if line.startswith("{")]

    async def port(self) -> int:
        async def listening() -> int | None:
            if self.process.poll() is not None:
                raise AssertionError(f"the dashboard exited: {self.log.read_text()}")
            found = [e["port"] for e in self.events() if e.get("event") == "dashboard_listening"]
            return found[0] if found else None

        return await wait_until(listening, within=60, what="the dashboard to listen")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
        self.process.wait(timeout=30)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[RedisServer]:
    running = start_redis_server(tmp_path)
    yield running
    running.stop()


@pytest.fixture
async def manager(server: RedisServer, prefix: str) -> AsyncIterator[RedisTaskManager]:
    async with RedisTaskManager.from_url(server.url, prefix=prefix) as m:
        yield m


def _without_token() -> dict[str, str]:
    return {name: value for name, value in os.environ.items() if name != TOKEN_ENV}


class Reply:
    """An HTTP reply: status, headers (lower-case names), body text, and every byte."""

    def __init__(self, raw: bytes) -> None:
        self.raw = raw
        head, _, body = raw.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        self.status = int(lines[0].split()[1])
        self.headers = {
            name.strip().lower(): value.strip()
            for name, _, value in (line.partition(":") for line in lines[1:])
        }
        self.text = body.decode()

    def json(self) -> Any:
        return json.loads(self.text)


async def http(
    port: int,
    path: str,
    method: str = "GET",
    host: str = "127.0.0.1",
    authorization: str | None = None,
) -> Reply:
    """One request on loopback (``Connection: close``, so the reply ends with the stream),
    with an ``Authorization`` header when given."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    extra = "" if authorization is None else f"Authorization: {authorization}\r\n"
    writer.write(
        f"{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n{extra}"
        "Content-Length: 0\r\n\r\n".encode()
    )
    await writer.drain()
    raw = await reader.read()
    writer.close()
    return Reply(raw)


async def state(port: int, authorization: str | None = None) -> dict[str, Any]:
    reply = await http(port, "/api/state", authorization=authorization)
    assert reply.status == 200
    document: dict[str, Any] = reply.json()
    return document


async def test_the_dashboard_serves_its_page_and_figures_read_only(
    server: RedisServer, prefix: str, tmp_path: Path
) -> None:
    # One partition: its first task goes straight to the stream, the rest wait in their
    # tenants' queues (ALICE's binding: 4, TENANT: 3).
    async with RedisTaskManager.from_url(server.url, prefix=prefix, partitions=1) as manager:
        for _ in range(5):
            await manager.create_task(ALICE, ORIGIN, payload=SECRET.encode())
        for _ in range(3):
            await manager.create_task(ALICE, ORIGIN, payload=SECRET.encode(), tenant=TENANT)
    dashboard = Dashboard(tmp_path, server.url, prefix, "--interval", "0.2")
    try:
        port = await dashboard.port()

        async def two_readings() -> dict[str, Any] | None:
            document = await state(port)
            return document if document["readings"] >= 2 else None

        document = await wait_until(two_readings, what="two readings")
        assert document["inspection"]["backlog"] == 8
        assert document["inspection"]["statuses"]["working"] == 8
        tenants = document["inspection"]["tenants"]
        assert (tenants["waiting"], tenants["queued"], tenants["refused"]) == (
            2,
            7,
            {"quota": 0, "rate": 0},
        )
        assert [(t["backlog"], t["key"]) for t in tenants["by_backlog"]] == [(4, None), (3, None)]
        assert tenants["by_backlog"][1]["tenant"] == tenant_digest(b"", b"", TENANT.encode())
        # redis-tasks tenants' figures too: the waiting tenants, by queued tasks.
        report = document["tenants"]
        assert (report["tenants"], report["queued"], report["complete"]) == (2, 7, True)
        assert [(t["queued"], t["key"]) for t in report["top"]["queued"]] == [(4, None), (3, None)]
        assert document["points"], "a point per reading after the first"
        assert document["failing_since"] is None
        latest = document["points"][-1]["at_ms"]
        newer = (await http(port, f"/api/state?since={latest}")).json()
        assert all(p["at_ms"] > latest for p in newer["points"])
        page = await http(port, "/")
        assert page.status == 200
        assert page.headers["content-type"].startswith("text/html")
        assert "default-src 'self'" in page.headers["content-security-policy"]
        assert 'id="chart-throughput"' in page.text
        assert 'id="tenants-backlog"' in page.text
        for asset, kind in (("/app.js", "text/javascript"), ("/style.css", "text/css")):
            reply = await http(port, asset)
            assert reply.status == 200
            assert reply.headers["content-type"].startswith(kind)
        # Read-only, and not readable through another site's name (DNS rebinding).
        assert (await http(port, "/api/state", "POST")).status == 405
        assert (await http(port, "/", "DELETE")).status == 405
        assert (await http(port, "/api/state", host="evil.example")).status == 400
        assert (await http(port, "/api/state?since=x")).status == 400
        assert SECRET not in json.dumps(document) + page.text
    finally:
        dashboard.stop()
    assert dashboard.process.returncode == 0


async def test_the_dashboard_reports_redis_down_and_keeps_serving(
    tmp_path: Path, prefix: str
) -> None:
    down = start_redis_server(tmp_path)
    down.stop()  # its port is free now: nothing answers there
    dashboard = Dashboard(tmp_path, down.url, prefix, "--interval", "0.2", "--timeout", "0.5")
    try:
        port = await dashboard.port()

        async def failing() -> dict[str, Any] | None:
            document = await state(port)
            return document if document["failing_since"] is not None else None

        document = await wait_until(failing, what="the failure to show")
        assert document["inspection"] is None
        assert (await http(port, "/")).status == 200
    finally:
        dashboard.stop()
    assert any(e.get("event") == "dashboard_read_failed" for e in dashboard.events())


def test_bad_arguments_are_refused() -> None:
    for bad in (["--port", "70000"], ["--interval", "0"], ["--sample", "-2"]):
        done = subprocess.run(
            [sys.executable, "-m", "redis_tasks", "dashboard", "--redis-url", "redis://x", *bad],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 2, bad
        assert done.stderr.startswith("redis-tasks dashboard: ")


#: Every route, and the refusals of a wrong method, path, host and query.
ROUTES = [
    ("GET", "/", "127.0.0.1"),
    ("GET", "/app.js", "127.0.0.1"),
    ("GET", "/style.css", "127.0.0.1"),
    ("GET", "/api/state", "127.0.0.1"),
    ("GET", "/api/state?since=0", "127.0.0.1"),
    ("GET", "/api/state?since=x", "127.0.0.1"),
    ("GET", "/no-such-page", "127.0.0.1"),
    ("POST", "/api/state", "127.0.0.1"),
    ("GET", "/api/state", "evil.example"),
]


async def test_no_byte_the_dashboard_serves_holds_a_task_id(
    server: RedisServer, manager: RedisTaskManager, prefix: str, tmp_path: Path
) -> None:
    release = asyncio.Event()

    async def hold(execution: TaskExecution) -> dict[str, Any]:
        await release.wait()
        return {"content": [], "isError": False}

    made = [(await manager.create_task(ALICE, ORIGIN)).task_id for _ in range(6)]
    dashboard = Dashboard(tmp_path, server.url, prefix, "--interval", "0.2")
    async with Worker(manager, hold) as worker:
        running = asyncio.create_task(worker.run())
        try:
            port = await dashboard.port()

            async def leased() -> dict[str, Any] | None:
                document = await state(port)
                shown = document["inspection"]
                leases = (
                    [] if shown is None else [x for p in shown["partitions"] for x in p["leases"]]
                )
                return document if len(leases) == len(made) else None

            document = await wait_until(leased, what="every task's lease on the page")
            # The page lists each task, by reference: enough to match `inspect`'s line.
            listed = {x["task"] for p in document["inspection"]["partitions"] for x in p["leases"]}
            assert listed == {task_ref(task_id) for task_id in made}
            replies = [await http(port, path, method, host) for method, path, host in ROUTES]
            assert [r.status for r in replies] == [200, 200, 200, 200, 200, 400, 404, 405, 400]
            for (_, path, _), reply in zip(ROUTES, replies, strict=True):
                served = reply.raw.decode("latin-1")
                assert whole_task_ids(served) == [], path
                # Nor the random part alone.
                assert not [t for t in made if t.partition(".")[2] in served], path
        finally:
            release.set()
            await worker.stop()
            await running
            dashboard.stop()


def _run(*options: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "redis_tasks", "dashboard", "--redis-url", "redis://x", *options],
        cwd=ROOT,
        env={**_without_token(), **(env or {})},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


async def test_beyond_loopback_the_dashboard_needs_a_token(
    server: RedisServer, prefix: str, tmp_path: Path
) -> None:
    # No token: refused at start, with one line saying how to give one.
    for host in ("0.0.0.0", "::", "dashboard.example"):
        refused = _run("--host", host)
        assert refused.returncode == 2, host
        (line,) = refused.stderr.splitlines()
        assert line.startswith(f"redis-tasks dashboard: --host {host}: "), line
        for how in (TOKEN_ENV, "--token", "secrets.token_urlsafe"):
            assert how in line, line
    weak = "short-" + uuid.uuid4().hex[:4]
    weak_ones: list[tuple[tuple[str, ...], dict[str, str] | None]] = [
        ((), {TOKEN_ENV: weak}),
        (("--token", weak), None),
    ]
    for options, env in weak_ones:
        refused = _run("--host", "0.0.0.0", *options, env=env)
        assert refused.returncode == 2
        assert "16 to 1024 characters" in refused.stderr
        assert weak not in refused.stderr + refused.stdout  # never repeated
    spaced = _run("--host", "0.0.0.0", "--token", "a token with spaces in it")
    assert spaced.returncode == 2
    assert "printable ASCII" in spaced.stderr
    # With one (from the environment here), every request must carry it.
    token = "tk-" + uuid.uuid4().hex
    dashboard = Dashboard(tmp_path, server.url, prefix, "--host", "0.0.0.0", env={TOKEN_ENV: token})
    try:
        port = await dashboard.port()
        for wrong in (
            None,
            f"Bearer {token}x",
            f"Bearer {token[:-1]}",
            "Bearer ",
            token,
            f"Token {token}",
            _basic("ops", token + "x"),
            _basic(token, ""),
            "Basic !!not-base64!!",
        ):
            for method, path, host in ROUTES:
                reply = await http(port, path, method, host, authorization=wrong)
                assert (reply.status, reply.text) == (401, ""), (wrong, method, path, host)
                assert reply.headers["www-authenticate"].startswith("Basic realm=")
        assert (await http(port, "/", authorization=f"Bearer {token}")).status == 200
        assert (await state(port, f"bearer  {token}"))["prefix"] == prefix
        # A browser's way: the token as the password of the Basic login, any user name.
        assert (await http(port, "/app.js", authorization=_basic("ops", token))).status == 200
        named = await http(port, "/", host="evil.example", authorization=f"Bearer {token}")
        assert named.status == 200  # beyond loopback any host name, unless --allow-host
    finally:
        dashboard.stop()
    assert dashboard.process.returncode == 0
    assert token not in dashboard.log.read_text()
    assert any(e.get("event") == "dashboard_token_required" for e in dashboard.events())


async def test_a_token_given_on_loopback_is_required_too(
    server: RedisServer, prefix: str, tmp_path: Path
) -> None:
    token = "tk-" + uuid.uuid4().hex
    dashboard = Dashboard(tmp_path, server.url, prefix, "--token", token)
    try:
        port = await dashboard.port()
        refused = await http(port, "/api/state")
        assert (refused.status, refused.text) == (401, "")
        assert (await http(port, "/api/state", authorization=f"Bearer {token}")).status == 200
    finally:
        dashboard.stop()
    assert token not in dashboard.log.read_text()


def _colour_pixels(image: Any, box: dict[str, float], colour: tuple[int, int, int]) -> int:
    """Pixels within ``box`` (CSS px = image px) close to ``colour``."""
    left, top = int(box["x"]), int(box["y"])
    right, bottom = int(box["x"] + box["width"]), int(box["y"] + box["height"])
    found = 0
    for x in range(left, right):
        for y in range(top, bottom):
            r, g, b = image.getpixel((x, y))[:3]
            if abs(r - colour[0]) + abs(g - colour[1]) + abs(b - colour[2]) < 60:
                found += 1
    return found


@pytest.mark.slow
async def test_the_page_in_chromium_moves_while_a_load_runs(
    server: RedisServer, manager: RedisTaskManager, prefix: str, tmp_path: Path
) -> None:
    if shutil.which(CHROMIUM) is None:
        pytest.fail(f"{CHROMIUM} is missing (Debian's chromium package)", pytrace=False)
    playwright = pytest.importorskip("playwright.async_api")
    image_module = pytest.importorskip("PIL.Image")
    fleet = Fleet(server.url, prefix, f"ns-{uuid.uuid4().hex[:8]}", tmp_path)
    # 4 handlers of 50 ms: about 80 tasks/s. Bursts of 120 every 2 s average 60/s, so the
    # backlog rises and falls with every burst while the throughput stays up.
    fleet.start("--concurrency", "4")
    token = "tk-" + uuid.uuid4().hex  # the browser logs in with it (HTTP Basic's password)
    dashboard = Dashboard(tmp_path, server.url, prefix, "--interval", "0.5", env={TOKEN_ENV: token})
    stop = asyncio.Event()
    payload = json.dumps({"mode": "count", "seconds": 0.05, "secret": SECRET}).encode()

    async def load() -> None:
        while not stop.is_set():
            await asyncio.gather(
                *(
                    manager.create_task(ALICE, ORIGIN, payload=payload, tenant=TENANT)
                    for _ in range(120)
                )
            )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 2.0)

    loading = asyncio.create_task(load())
    try:
        await fleet.wait_started()
        port = await dashboard.port()
        async with playwright.async_playwright() as driver:
            browser = await driver.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
            page = await browser.new_page(
                viewport={"width": 1400, "height": 1000},
                http_credentials={"username": "ops", "password": token},
            )
            await page.goto(f"http://127.0.0.1:{port}/")

            async def value(selector: str) -> str:
                text: str = await page.locator(selector).inner_text()
                return text

            async def moving() -> str | None:
                text = await value("#ended-rate")
                return text if text not in ("-", "0") else None

            await wait_until(moving, within=60, what="a throughput on the page")
            first = int((await value("#completed")).replace(",", ""))

            async def grown() -> int | None:
                now = int((await value("#completed")).replace(",", ""))
                return now if now > first else None

            await wait_until(grown, within=60, what="the completed count to move")

            async def every_line_above_zero() -> bool:
                # Each series drawn, with a point above the chart's zero line: a series
                # at 0 throughout lies under another and shows none of its colour.
                return bool(
                    await page.evaluate(
                        """(series) => series.every(([chart, cls]) => {
                            const line = document.querySelector(chart + " polyline." + cls);
                            if (!line) return false;
                            const zero = Number(document.querySelector(chart + " line")
                                .getAttribute("y1"));
                            return line.getAttribute("points").split(" ")
                                .some((xy) => Number(xy.split(",")[1]) < zero - 2);
                        })""",
                        [[chart, cls] for chart, series in SERIES.items() for cls in series],
                    )
                )

            await wait_until(every_line_above_zero, within=60, what="every chart's lines")

            async def waiting_tenants() -> list[str] | None:
                shown: list[str] = await page.locator("#tenants-backlog td.id").all_inner_texts()
                return shown or None

            shown = await wait_until(waiting_tenants, within=60, what="a tenant with backlog")
            assert shown == [tenant_digest(b"", b"", TENANT.encode())]
            assert await page.locator("#partitions tbody tr").count() == 16
            assert await page.locator("#consumers tbody tr").count() >= 1
            assert "standalone" in await value("#scope")
            assert (await value("#pickup")) != "-"
            shot = tmp_path / "dashboard.png"
            await page.screenshot(path=str(shot), full_page=True)
            boxes = {chart: await page.locator(chart).bounding_box() for chart in SERIES}
            body = await page.content()
            await browser.close()
        assert SECRET not in body
        assert whole_task_ids(body) == []  # the leases table names tasks by reference
        with image_module.open(shot) as picture:
            picture = picture.convert("RGB")
            for chart, series in SERIES.items():
                box = boxes[chart]
                assert box is not None
                for name, colour in series.items():
                    assert _colour_pixels(picture, box, colour) > 20, f"{chart}: no {name} line"
        keep = os.environ.get("RT_DASHBOARD_SCREENSHOT")
        if keep:  # how docs/assets/dashboard.png is made: the same page, the same load
            shutil.copyfile(shot, keep)
    finally:
        stop.set()
        await loading
        dashboard.stop()
        fleet.stop_all()
