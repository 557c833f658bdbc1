"""The live dashboard in headless Chromium (Debian's ``chromium``, which .ci/run installs),
driven over the DevTools protocol: during a load, every panel gets data and the console
stays free of errors; a screenshot is saved in the test's temporary directory."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import json
import os
import pathlib
import shutil
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from tests.conftest import Client, LiveBroker

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
PANELS = ("hit-ratio", "rates", "size", "evictions", "storage", "bookie", "brokers", "top-topics")
#: the panels that chart series (the last two are tables)
CHARTS = PANELS[:-2]
DEADLINE_S = 45.0


class DevTools:
    """A minimal Chrome DevTools Protocol client over one page's websocket."""

    def __init__(self, socket: aiohttp.ClientWebSocketResponse) -> None:
        self.socket = socket
        self.events: list[dict[str, Any]] = []
        self._ids = itertools.count(1)
        self._waiting: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        async for message in self.socket:
            data = json.loads(message.data)
            future = self._waiting.pop(data.get("id", -1), None)
            if future is not None:
                future.set_result(data)
            else:
                self.events.append(data)

    async def call(self, method: str, **params: Any) -> dict[str, Any]:
        ident = next(self._ids)
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._waiting[ident] = future
        await self.socket.send_str(json.dumps({"id": ident, "method": method, "params": params}))
        answer = await asyncio.wait_for(future, 30)
        assert "error" not in answer, answer
        return dict(answer.get("result", {}))

    async def close(self) -> None:
        await self.socket.close()
        await self._reader

    def errors(self) -> list[str]:
        found = []
        for event in self.events:
            method, params = event.get("method"), event.get("params", {})
            if method == "Runtime.exceptionThrown":
                found.append(json.dumps(params.get("exceptionDetails", {}))[:300])
            elif method == "Runtime.consoleAPICalled" and params.get("type") == "error":
                found.append(json.dumps(params.get("args", []))[:300])
            elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
                found.append(params["entry"].get("text", ""))
        return found


@contextlib.asynccontextmanager
async def chromium(profile: pathlib.Path) -> AsyncIterator[DevTools]:
    assert CHROMIUM is not None
    process = await asyncio.create_subprocess_exec(
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--window-size=1400,1000",
        f"--user-data-dir={profile}",
        "--remote-debugging-port=0",
        "about:blank",
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        port_file = profile / "DevToolsActivePort"
        loop = asyncio.get_running_loop()
        end = loop.time() + DEADLINE_S
        while not (port_file.exists() and port_file.read_text().strip()):
            assert loop.time() < end, "chromium did not open its DevTools port"
            await asyncio.sleep(0.05)  # polling a file the browser writes, with a deadline
        port = int(port_file.read_text().split()[0])
        async with aiohttp.ClientSession() as session:
            async with session.get(f"http://127.0.0.1:{port}/json/list") as response:
                targets = await response.json()
            page = next(t for t in targets if t["type"] == "page")
            socket = await session.ws_connect(page["webSocketDebuggerUrl"], max_msg_size=0)
            devtools = DevTools(socket)
            try:
                yield devtools
            finally:
                await devtools.close()
    finally:
        if process.returncode is None:
            process.kill()
        await process.wait()


async def load(client: Client, stop: asyncio.Event) -> None:
    """Produce and consume until told to stop: two topics, a tailing and a lagging
    subscription, so every panel has something to show."""
    tail = await client.subscribe("public/default/dash-a", "tail")
    lagging = await client.subscribe("public/default/dash-b", "lag")
    round_ = 0
    while not stop.is_set():
        round_ += 1
        await client.produce("public/default/dash-a", [f"a{round_}-{i}" for i in range(20)])
        await client.produce("public/default/dash-b", [f"b{round_}-{i}" for i in range(5)])
        got = await client.receive(tail, 100, 20)
        if got:
            await client.ack(tail, [str(m["messageId"]) for m in got])
        if round_ % 10 == 0:
            await client.receive(lagging, 5, 0)


async def test_the_dashboard_shows_data_in_every_panel_without_console_errors(
    live_broker: LiveBroker, tmp_path: pathlib.Path
) -> None:
    if CHROMIUM is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is missing: .ci/run must install Debian's chromium")
        pytest.skip("install Debian's chromium to run the browser test")
    client = await live_broker(
        brokerlabShadowCacheImplementations="legacy,segmented",
        managedLedgerCacheSizeMB=1,
        managedLedgerCacheEvictionTimeThresholdMillis=300,
    )
    stop = asyncio.Event()
    loader = asyncio.create_task(load(client, stop))
    try:
        async with chromium(tmp_path / "profile") as devtools:
            for domain in ("Runtime", "Log", "Page"):
                await devtools.call(f"{domain}.enable")
            await devtools.call("Page.navigate", url=f"{client.base_url}/dashboard")
            expression = (
                "JSON.stringify(Object.fromEntries([...document.querySelectorAll('[data-panel]')]"
                ".map(p => [p.dataset.panel, Number(p.dataset.points)])))"
            )
            loop = asyncio.get_running_loop()
            end = loop.time() + DEADLINE_S
            points: dict[str, int] = {}
            # a long poll on an empty topic paces the checks (no sleeping)
            clock = await client.subscribe("public/default/idle", "clock")
            while loop.time() < end:
                result = await devtools.call("Runtime.evaluate", expression=expression)
                points = json.loads(result["result"].get("value") or "{}")
                if (
                    set(points) == set(PANELS)
                    and all(points[p] >= 3 for p in CHARTS)
                    and (points["top-topics"] >= 2)
                    and points["brokers"] == 1
                ):
                    break
                await client.receive(clock, 1, 300)
            assert set(points) == set(PANELS), points
            assert all(points[p] >= 3 for p in CHARTS), points
            assert points["top-topics"] >= 2, points
            assert points["brokers"] == 1, points  # one broker, in its row
            shot = await devtools.call("Page.captureScreenshot", format="png")
            image = base64.b64decode(shot["data"])
            assert image.startswith(b"\x89PNG")
            (tmp_path / "dashboard.png").write_bytes(image)
            assert devtools.errors() == []
    finally:
        stop.set()
        await loader
