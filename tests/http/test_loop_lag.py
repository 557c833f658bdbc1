"""``brokerlab_event_loop_lag_seconds``: the app's watcher counts how late the event
loop runs its timer; a deliberate block of the loop shows up as one late observation,
on /metrics and in the dashboard's history (``loopLagMaxUs``, its "Event loop lag"
panel)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client.parser import text_string_to_metric_families

from broker.http.app import create_app
from tests.harness import eventually_async, make_settings

LAG = "brokerlab_event_loop_lag_seconds"
#: how long the test holds the loop, and the bucket bound such a hold lands above
BLOCK_S = 0.6
BOUND = "0.5"


@pytest.fixture
async def client() -> AsyncIterator[TestClient[web.Request, web.Application]]:
    """The app on this test's own loop, so the test can hold that loop."""
    settings = make_settings(None, brokerlabDashboardSampleIntervalMs=100)
    test_client = TestClient(TestServer(create_app(settings)))
    await test_client.start_server()
    yield test_client
    await test_client.close()


async def lag_samples(client: TestClient[web.Request, web.Application]) -> dict[str, float]:
    response = await client.get("/metrics")
    assert response.status == 200
    samples = {}
    for family in text_string_to_metric_families(await response.text()):
        for sample in family.samples:
            if sample.name.startswith(LAG):
                key = sample.name + (f"le={sample.labels['le']}" if "le" in sample.labels else "")
                samples[key] = sample.value
    return samples


def hold_the_loop() -> None:
    held_until = time.monotonic() + BLOCK_S
    while time.monotonic() < held_until:  # the defect under test: work holding the loop
        pass


def late(samples: dict[str, float]) -> float:
    """Observations later than BOUND."""
    return samples[f"{LAG}_count"] - samples[f"{LAG}_bucketle={BOUND}"]


async def test_a_blocked_loop_shows_in_the_lag_histogram(
    client: TestClient[web.Request, web.Application],
) -> None:
    async def observed() -> bool:
        return (await lag_samples(client))[f"{LAG}_count"] >= 1

    await eventually_async(observed, "the watcher observes the loop")
    before = await lag_samples(client)
    hold_the_loop()

    async def late_once_more() -> bool:
        return late(await lag_samples(client)) >= late(before) + 1

    await eventually_async(late_once_more, "the block is observed as one late timer")


async def test_a_blocked_loop_shows_in_the_dashboard_history(
    client: TestClient[web.Request, web.Application],
) -> None:
    """A row's ``loopLagMaxUs`` is the longest lag since the row before: the block shows
    in one row, and the rows after it are back to small lags (not a running maximum)."""

    async def lags() -> list[int]:
        response = await client.get("/dashboard/history")
        assert response.status == 200
        history = await response.json()
        column = history["columns"].index("loopLagMaxUs")
        return [row[column] for row in history["rows"]]

    await eventually_async(lambda: _rows(lags, 2), "the sampler's first rows")
    hold_the_loop()

    async def seen_then_gone() -> bool:
        values = await lags()
        held = [i for i, lag in enumerate(values) if lag >= float(BOUND) * 1e6]
        return bool(held) and any(lag < float(BOUND) * 1e6 for lag in values[held[-1] + 1 :])

    await eventually_async(seen_then_gone, "the block in one row, smaller lags after it")


async def _rows(lags: Callable[[], Awaitable[list[int]]], count: int) -> bool:
    return len(await lags()) >= count
