"""The live dashboard in headless Chromium (Debian's ``chromium``, which .ci/run installs),
driven over the DevTools protocol, at 1280 px: opened mid-run on a broker with token
authentication (``/dashboard#token=...``) and on one without, it draws the run from the
broker's start on a labelled time axis, hit % on 0-100 %, every panel with data, tables
not cut off, and the console stays free of errors. Screenshots are saved in the test's
temporary directory, and in ``$BROKERLAB_DASHBOARD_SHOTS`` when set
(``BROKERLAB_DASHBOARD_RUN_S`` sets how far into the run the page is opened, 5 s by
default: ``BROKERLAB_DASHBOARD_RUN_S=30`` for the issue's 30 s)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import json
import os
import pathlib
import shutil
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from broker.auth.tokens import create_secret_key, create_token
from tests.conftest import Client, LiveBroker
from tests.harness import eventually_async

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
PANELS = (
    "hit-ratio",
    "rates",
    "size",
    "evictions",
    "storage",
    "bookie",
    "loop-lag",
    "brokers",
    "top-topics",
)
#: the panels that chart series (the last two are tables)
CHARTS = PANELS[:-2]
DEADLINE_S = 45.0
#: how far into the run the page is opened
RUN_S = float(os.environ.get("BROKERLAB_DASHBOARD_RUN_S", "5"))
SHOTS = os.environ.get("BROKERLAB_DASHBOARD_SHOTS")
SECRET = create_secret_key()
AUTH = {
    "authenticationEnabled": True,
    "authenticationProviders": (
        "org.apache.pulsar.broker.authentication.AuthenticationProviderToken"
    ),
    "authorizationEnabled": True,
    "superUserRoles": "admin",
    "tokenSecretKey": "data:;base64," + base64.b64encode(SECRET).decode(),
}
BROKER = {
    "brokerlabShadowCacheImplementations": "legacy,segmented",
    "managedLedgerCacheSizeMB": 1,
    "managedLedgerCacheEvictionTimeThresholdMillis": 300,
    "brokerlabDashboardSampleIntervalMs": 250,
}


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
        "--window-size=1280,1500",
        f"--user-data-dir={profile}",
        "--remote-debugging-port=0",
        "about:blank",
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        port_file = profile / "DevToolsActivePort"
        await eventually_async(
            lambda: port_file.exists() and port_file.read_text().strip(),
            "chromium to open its DevTools port",
            DEADLINE_S,
        )
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


#: the load's pace: a round (25 messages produced, the tail read and acked) every
#: ROUND_S, so that each of the page's 250 ms samples has several. A rate, not a wait:
#: rounds back to back, as fast as the two brokers in this process answered them, were
#: most of the test's CPU (8 s of it on a loaded machine) and showed the page no more
ROUND_S = 0.05


async def load(client: Client, stop: asyncio.Event) -> None:
    """Produce and consume until told to stop: two topics, a tailing and a lagging
    subscription, so every panel has something to show."""
    tail = await client.subscribe("public/default/dash-a", "tail")
    lagging = await client.subscribe("public/default/dash-b", "lag")
    round_ = 0
    while True:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), ROUND_S)  # the pace; returns when told to stop
        if stop.is_set():
            return
        round_ += 1
        await client.produce("public/default/dash-a", [f"a{round_}-{i}" for i in range(20)])
        await client.produce("public/default/dash-b", [f"b{round_}-{i}" for i in range(5)])
        got = await client.receive(tail, 100, 20)
        if got:
            await client.ack(tail, [str(m["messageId"]) for m in got])
        if round_ % 10 == 0:
            await client.receive(lagging, 5, 0)


async def with_token(client: Client, token: str) -> Client:
    """The client, sending ``token`` with every request."""
    await client.session.close()
    client.session = aiohttp.ClientSession(
        headers={"Authorization": f"Bearer {token}"}, timeout=aiohttp.ClientTimeout(total=60)
    )
    return client


async def history(client: Client) -> dict[str, Any]:
    status, body = await client.request("GET", "/dashboard/history")
    assert status == 200, body
    assert isinstance(body, dict)
    return body


async def evaluate(devtools: DevTools, expression: str) -> Any:
    result = await devtools.call("Runtime.evaluate", expression=expression, returnByValue=True)
    return result["result"].get("value")


#: what the test reads of the page: every panel's drawn points and axes, the status, the
#: tables' fit at this width
PAGE_STATE = """JSON.stringify({
  hash: location.hash,
  status: document.getElementById("status").textContent,
  panels: Object.fromEntries([...document.querySelectorAll("[data-panel]")].map(p => [
    p.dataset.panel, {
      points: Number(p.dataset.points), startMs: Number(p.dataset.startMs || 0),
      firstMs: Number(p.dataset.firstMs || 0),
      xticks: [...p.querySelectorAll("text.xtick")].map(t => t.textContent),
      yticks: [...p.querySelectorAll("text.ytick")].map(t => t.textContent),
      xlabel: (p.querySelector("text.xlabel") || {}).textContent || "",
      overflow: [...p.querySelectorAll(".scroll")].some(s => s.scrollWidth > s.clientWidth),
      right: p.getBoundingClientRect().right,
      cellsRight: Math.max(0, ...[...p.querySelectorAll("th, td")].map(
        c => c.getBoundingClientRect().right)),
    }])),
  width: document.documentElement.clientWidth,
})"""


def ready(state: dict[str, Any]) -> bool:
    panels = state.get("panels", {})
    return (
        set(panels) == set(PANELS)
        and all(panels[p]["points"] >= 3 for p in CHARTS)
        and panels["top-topics"]["points"] >= 2
        and panels["brokers"]["points"] == 1
        and state["status"].startswith("updated")
    )


async def open_mid_run(
    devtools: DevTools, client: Client, fragment: str, shot: str, tmp_path: pathlib.Path
) -> None:
    """Open the dashboard once the broker's history spans RUN_S, and check that the page
    draws the run from the broker's start, not from when it was opened."""
    before = await history(client)
    rows = before["rows"]
    assert rows[0][0] == before["startMs"]
    opened_ms = time.time_ns() // 1_000_000
    # a fresh load (from the same page, a new fragment only changes the address)
    await devtools.call("Page.navigate", url="about:blank")
    await devtools.call("Page.navigate", url=f"{client.base_url}/dashboard{fragment}")

    seen: list[dict[str, Any]] = [{}]

    async def page_ready() -> dict[str, Any] | None:
        state = seen[0] = json.loads(await evaluate(devtools, PAGE_STATE) or "{}")
        return state if state and ready(state) else None

    try:
        state = await eventually_async(page_ready, "every panel of the dashboard", DEADLINE_S)
    except AssertionError as error:
        raise AssertionError(f"{error}; the page: {seen[0]}; {devtools.errors()}") from None
    assert state["hash"] == "", "the token is taken out of the address bar"
    assert state["width"] <= 1280
    panels = state["panels"]
    for name in CHARTS:
        panel = panels[name]
        # the x axis starts at the broker's first sample, RUN_S before the page opened,
        # and the page draws every sample the broker had before it opened
        assert panel["startMs"] == before["startMs"], (name, panel)
        assert panel["startMs"] <= opened_ms - RUN_S * 1000, (name, panel, opened_ms)
        assert panel["points"] >= len(rows) - 1, (name, panel["points"], len(rows))
        first = panel["firstMs"]
        assert before["startMs"] <= first <= rows[1][0], (name, panel)
        assert panel["xticks"][0] == "0:00" and len(panel["xticks"]) >= 3, (name, panel)
        assert panel["xlabel"].startswith("time since the broker started"), (name, panel)
    assert panels["hit-ratio"]["yticks"] == ["0%", "25%", "50%", "75%", "100%"], panels
    for name in ("brokers", "top-topics"):
        table = panels[name]
        assert not table["overflow"], (name, table)
        assert table["cellsRight"] <= table["right"], (name, table)  # hit % not cut off
    # and it goes on: new samples are added to what it drew
    drawn = panels["rates"]["points"]

    async def grown() -> bool:
        state = json.loads(await evaluate(devtools, PAGE_STATE) or "{}")
        return bool(state["panels"]["rates"]["points"] > drawn)

    await eventually_async(grown, "the page to draw newer samples", DEADLINE_S)
    shot_data = await devtools.call("Page.captureScreenshot", format="png")
    image = base64.b64decode(shot_data["data"])
    assert image.startswith(b"\x89PNG")
    save(image, tmp_path / shot)


def save(image: bytes, path: pathlib.Path) -> None:
    path.write_bytes(image)
    if SHOTS:
        pathlib.Path(SHOTS, path.name).write_bytes(image)


async def test_the_dashboard_opened_mid_run_draws_the_run_from_its_start(
    live_broker: LiveBroker, tmp_path: pathlib.Path
) -> None:
    if CHROMIUM is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is missing: .ci/run must install Debian's chromium")
        pytest.skip("install Debian's chromium to run the browser test")
    token = create_token(SECRET, "HS256", "admin", None)
    secured = await with_token(await live_broker(**AUTH, **BROKER), token)
    plain = await live_broker(**BROKER)
    stop = asyncio.Event()
    loaders = [asyncio.create_task(load(client, stop)) for client in (secured, plain)]

    async def run_long_enough() -> bool:
        for client in (secured, plain):
            rows = (await history(client))["rows"]
            if rows[-1][0] - rows[0][0] < RUN_S * 1000:
                return False
        return True

    try:
        await eventually_async(run_long_enough, f"{RUN_S} s of history", RUN_S + DEADLINE_S)
        async with chromium(tmp_path / "profile") as devtools:
            for domain in ("Runtime", "Log", "Page"):
                await devtools.call(f"{domain}.enable")
            # without the token, the secured broker's page says how to open it
            await devtools.call("Page.navigate", url=f"{secured.base_url}/dashboard")
            needs_token = "document.getElementById('status').textContent"
            await eventually_async(
                lambda: _contains(devtools, needs_token, "needs a token"),
                "the page to ask for a token",
                DEADLINE_S,
            )
            devtools.events.clear()  # the 401s the browser logged
            fragment = f"#token={token}"
            await open_mid_run(devtools, secured, fragment, "dashboard-token.png", tmp_path)
            await open_mid_run(devtools, plain, "", "dashboard-no-auth.png", tmp_path)
            assert devtools.errors() == []
    finally:
        stop.set()
        await asyncio.gather(*loaders)


async def _contains(devtools: DevTools, expression: str, text: str) -> bool:
    return text in str(await evaluate(devtools, expression))
