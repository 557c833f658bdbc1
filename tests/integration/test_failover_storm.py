"""A failover storm: every topic of a namespace is unloaded and loaded again, and each
load asks the bookie for the last entry of its last ledger. The last-entry cache answers
what writes already told it; without it, each load is a floor seek on the index."""

from __future__ import annotations

import asyncio
import pathlib
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from tests.conftest import Client, LiveBroker, in_process_broker

#: enough topics that one seek per load stands out from the few a round may cost anyway
TOPICS = 100
NAMESPACE = "storm/ns"


async def in_chunks(calls: list[Callable[[], Awaitable[Any]]], size: int = 100) -> list[Any]:
    results: list[Any] = []
    for start in range(0, len(calls), size):
        results += await asyncio.gather(*(call() for call in calls[start : start + size]))
    return results


async def floor_seeks(client: Client) -> int:
    _, body = await client.request("GET", "/admin/v2/broker-stats/storage")
    return int(body["bookie"]["getFloorCalls"])


async def fill(client: Client) -> list[str]:
    topics = [f"{NAMESPACE}/t{i}" for i in range(TOPICS)]
    await in_chunks([lambda t=t: client.produce(t, ["data"]) for t in topics])  # type: ignore[misc]
    return topics


async def storm_round(client: Client, topics: list[str]) -> int:
    """Unload the namespace, load every topic again; floor seeks it cost."""
    before = await floor_seeks(client)
    status, _ = await client.request("POST", f"/admin/v2/namespaces/{NAMESPACE}/unload")
    assert status == 204
    answers = await in_chunks(
        [
            lambda t=t: client.request("GET", f"/admin/v2/persistent/{t}/lastMessageId")  # type: ignore[misc]
            for t in topics
        ]
    )
    assert all(status == 200 and body["entryId"] == 0 for status, body in answers)
    return await floor_seeks(client) - before


@pytest.mark.slow
@pytest.mark.parametrize("cache_size", [100000, 0], ids=["cache-on", "cache-off"])
async def test_a_failover_storm_costs_seeks_only_without_the_last_entry_cache(
    live_broker: LiveBroker, cache_size: int
) -> None:
    client = await live_broker(storage={"dbStorage_lastEntryCacheMaxSize": cache_size})
    topics = await fill(client)
    seeks = [await storm_round(client, topics) for _ in range(2)]
    if cache_size:
        assert sum(seeks) <= 10, seeks  # the writes filled the cache
    else:
        assert sum(seeks) >= 2 * TOPICS, seeks  # one seek per topic load at least


@pytest.mark.slow
async def test_after_a_restart_the_first_storm_round_seeks_once_per_topic_the_second_never(
    tmp_path: pathlib.Path,
) -> None:
    data_dir = tmp_path / "data"
    async with in_process_broker(data_dir, storage={"syncMode": "none"}) as first:
        topics = await fill(first)
    # a new broker over the same data: a cold bookie, a cold last-entry cache
    async with in_process_broker(data_dir, storage={"syncMode": "none"}) as client:
        cold = await storm_round(client, topics)
        warm = await storm_round(client, topics)
    assert TOPICS <= cold <= TOPICS + 10, cold
    assert warm <= 10, warm
