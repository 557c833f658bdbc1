"""``brokerlab serve --self-check``: start a broker over a scratch data dir, produce,
consume, ack part, restart over the same data, check nothing acked comes back and
nothing unacked is lost. Exit 0 on success."""

from __future__ import annotations

import base64
import dataclasses
import pathlib
import tempfile
import time

import aiohttp
from aiohttp import web

from broker.http.app import Settings, create_app
from broker.http.listener import LimitedTCPSite, http_runner

TOPIC = "public/default/self-check"
MESSAGES = 2000
BATCH = 100


async def _start(settings: Settings) -> tuple[web.AppRunner, str]:
    """The broker served as ``brokerlab serve`` serves it (its limits and timeouts), on
    a free port."""
    runner = http_runner(create_app(settings), settings.broker)
    await runner.setup()
    await LimitedTCPSite.for_config(runner, settings.broker, port=0).start()
    port = runner.addresses[0][1]
    return runner, f"http://{settings.broker.bindAddress}:{port}"


async def _json(response: aiohttp.ClientResponse, expected: int) -> object:
    if response.status != expected:
        raise AssertionError(
            f"{response.method} {response.url}: {response.status} {await response.text()}"
        )
    return await response.json() if response.status != 204 else None


async def _drain(
    session: aiohttp.ClientSession, base: str, consumer: str, want: int
) -> list[dict[str, object]]:
    got: list[dict[str, object]] = []
    deadline = time.monotonic() + 60
    while len(got) < want and time.monotonic() < deadline:
        async with session.get(
            f"{base}/consumers/{consumer}/messages", params={"maxMessages": 1000, "timeoutMs": 500}
        ) as response:
            body = await _json(response, 200)
        assert isinstance(body, dict)
        got += body["messages"]
    return got


async def run_self_check(settings: Settings) -> int:
    with tempfile.TemporaryDirectory(prefix="brokerlab-self-check-") as scratch:
        settings = dataclasses.replace(settings, data_dir=pathlib.Path(scratch))
        print(f"self-check: scratch data dir {scratch}, syncMode={settings.storage.syncMode}")
        payload = base64.b64encode(b"x" * 1024).decode()
        body = {"messages": [{"payload": payload, "key": "k"} for _ in range(BATCH)]}
        runner, base = await _start(settings)
        async with aiohttp.ClientSession() as session:
            async with session.post(
                f"{base}/consumers/persistent/{TOPIC}/check",
                json={"subscriptionInitialPosition": "Earliest"},
            ) as response:
                consumer = (await _json(response, 200))["consumerId"]  # type: ignore[index]
            started = time.perf_counter()
            ids: list[str] = []
            for _ in range(MESSAGES // BATCH):
                async with session.post(f"{base}/topics/persistent/{TOPIC}", json=body) as response:
                    result = await _json(response, 200)
                ids += [r["messageId"] for r in result["messagePublishResults"]]  # type: ignore[index]
            produce_s = time.perf_counter() - started
            got = await _drain(session, base, consumer, len(ids))
            assert [m["messageId"] for m in got] == ids, "consumer saw every message in order"
            half = ids[len(ids) // 2 - 1]
            async with session.post(
                f"{base}/consumers/{consumer}/ack",
                json={"messageIds": [half], "ackType": "Cumulative"},
            ) as response:
                await _json(response, 204)
        await runner.cleanup()
        print(
            f"self-check: produced {len(ids)} x 1 KiB in {produce_s:.2f}s, "
            "consumed all in order, acked half"
        )

        runner, base = await _start(settings)
        try:
            async with aiohttp.ClientSession() as session:
                async with session.get(f"{base}/admin/v2/persistent/{TOPIC}/stats") as response:
                    stats = await _json(response, 200)
                backlog = stats["subscriptions"]["check"]["msgBacklog"]  # type: ignore[index]
                async with session.post(
                    f"{base}/consumers/persistent/{TOPIC}/check", json={}
                ) as response:
                    consumer = (await _json(response, 200))["consumerId"]  # type: ignore[index]
                again = await _drain(session, base, consumer, len(ids) // 2)
        finally:
            await runner.cleanup()
        expected = ids[len(ids) // 2 :]
        ok = backlog == len(expected) and [m["messageId"] for m in again] == expected
        print(
            f"self-check: after restart backlog={backlog} (expected {len(expected)}), "
            f"redelivered {len(again)} unacked in order: {'OK' if ok else 'FAILED'}"
        )
        return 0 if ok else 1
