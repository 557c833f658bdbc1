"""Each cache design is its whole policy wherever it runs, against the real server:

- design Y as a shadow beside any live design X counts what Y counts live on the same
  workload (within 1%) *on this workload*, where readers never meet at a storage read
  (the README's "Shadows" gives the measured difference on the presets, where they do),
  and a replay of the live trace through Y counts exactly what the shadow counted;
- ``misses`` is the number of entries read from storage, for every design, also with
  catch-up readers that share storage reads.

The workload is deterministic (zero storage latency, one reader at a time during the
catch-up, a TTL longer than the run, no periodic cursor checks): tailing readers on two
topics, an unload, then three catch-up subscriptions per topic over a 1 MiB cache.
"""

from __future__ import annotations

import asyncio
import itertools
import pathlib
from typing import Any

import pytest

from broker.cache import DESIGNS
from broker.cache.config import CacheConfig
from broker.trace.recorder import read_meta, read_trace
from pipeline.analyze import trace_settings
from pipeline.replay import ReplaySpec, replay
from pipeline.trace_io import rows_of
from tests.conftest import Client, in_process_broker

TOPICS = ("public/default/units-a", "public/default/units-b")
BATCHES, BATCH = 3, 100
PAYLOAD = "p" * 2000
DETERMINISTIC = {
    "managedLedgerCacheSizeMB": 1,
    "managedLedgerCacheEvictionTimeThresholdMillis": 120_000,
    "statsUpdateFrequencyInSecs": 3600,
}


async def _stats(client: Client, route: str) -> dict[str, Any]:
    status, body = await client.request("GET", f"/admin/v2/broker-stats/{route}")
    assert status == 200
    return dict(body)


async def _storage_entries_read(client: Client) -> int:
    storage = await _stats(client, "storage")
    return int(storage["bookie"]["entriesRead"]) + int(storage["tiered"]["entriesRead"])


async def _keep(client: Client, topic: str, subscription: str) -> None:
    """A subscription at the start with no consumer yet: what it has not read is kept."""
    status, _ = await client.request(
        "PUT", f"/admin/v2/persistent/{topic}/subscription/{subscription}?messageId=earliest"
    )
    assert status == 204


async def _drain(client: Client, topic: str, subscription: str, count: int) -> None:
    consumer = await client.subscribe(topic, subscription, subscriptionType="Shared")
    got = await client.receive_until(consumer, count)
    assert len(got) == count
    await client.ack(consumer, [m["messageId"] for m in got])
    status, _ = await client.request("DELETE", f"/consumers/{consumer}")
    assert status == 204


async def workload(client: Client) -> None:
    for topic in TOPICS:
        for reader in range(3):
            await _keep(client, topic, f"catch-up-{reader}")
    tailing = {
        topic: [await client.subscribe(topic, f"tail-{i}") for i in range(2)] for topic in TOPICS
    }
    for _ in range(BATCHES):
        for topic in TOPICS:
            ids = await client.produce(topic, [PAYLOAD] * BATCH)
            for consumer in tailing[topic]:
                assert len(await client.receive_until(consumer, BATCH)) == BATCH
                await client.ack(consumer, [ids[-1]], "Cumulative")
    status, _ = await client.request("POST", "/admin/v2/namespaces/public/default/unload")
    assert status == 204
    for topic in TOPICS:
        for reader in range(3):
            await _drain(client, topic, f"catch-up-{reader}", BATCHES * BATCH)


async def run(design: str, trace_dir: pathlib.Path) -> dict[str, Any]:
    """``design`` live, every other design as a shadow; the cache stats after the
    workload, with the storage entries read."""
    others = ",".join(name for name in DESIGNS if name != design)
    async with in_process_broker(
        managedLedgerCacheImplementation=design,
        brokerlabShadowCacheImplementations=others,
        brokerlabTraceDir=str(trace_dir),
        **DETERMINISTIC,
    ) as client:
        await workload(client)
        cache = await _stats(client, "cache")
        cache["storageEntriesRead"] = await _storage_entries_read(client)
    return cache


#: the module's tests on one xdist worker, which makes its run per design (a module fixture)
#: once: each worker running some of them made its own
pytestmark = pytest.mark.xdist_group("test_design_units")


@pytest.fixture(scope="module")
def runs(
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[str, tuple[dict[str, Any], pathlib.Path]]:
    """One run per live design (with the others as shadows) and its trace."""
    results = {}
    for design in DESIGNS:
        trace_dir = tmp_path_factory.mktemp(f"trace-{design}")
        results[design] = (asyncio.run(run(design, trace_dir)), trace_dir)
    return results


def test_the_designs_differ_on_this_workload(runs: dict[str, Any]) -> None:
    outcomes = {(cache["hits"], cache["misses"]) for cache, _ in runs.values()}
    assert len(outcomes) == len(DESIGNS)


@pytest.mark.parametrize("design", list(DESIGNS))
def test_misses_are_the_entries_read_from_storage(runs: dict[str, Any], design: str) -> None:
    cache, _ = runs[design]
    assert cache["misses"] > 0
    assert cache["misses"] == cache["storageEntriesRead"]


@pytest.mark.parametrize(("live", "shadow"), list(itertools.permutations(DESIGNS, 2)))
def test_on_this_workload_a_shadow_counts_within_one_percent_of_its_design_live(
    runs: dict[str, Any], live: str, shadow: str
) -> None:
    as_shadow = runs[live][0]["shadows"][shadow]
    as_live = runs[shadow][0]
    for counter in ("hits", "misses"):
        assert as_shadow[counter] == pytest.approx(as_live[counter], rel=0.01), counter


@pytest.mark.parametrize(("live", "shadow"), list(itertools.permutations(DESIGNS, 2)))
def test_a_replay_of_the_trace_counts_what_the_shadow_counted(
    runs: dict[str, Any], live: str, shadow: str
) -> None:
    cache, trace_dir = runs[live]
    meta = read_meta(trace_dir)
    settings = CacheConfig(**trace_settings(meta, str(trace_dir)))
    table = read_trace(trace_dir)
    result = replay(
        rows_of(table.to_batches()), ReplaySpec(shadow, settings.max_size_bytes, settings)
    )
    expected = cache["shadows"][shadow]
    assert (result.hits, result.misses) == (expected["hits"], expected["misses"])
    assert (result.hit_bytes, result.miss_bytes) == (expected["hitBytes"], expected["missBytes"])


@pytest.mark.parametrize("design", list(DESIGNS))
async def test_concurrent_catch_up_readers_count_one_miss_per_entry_read(design: str) -> None:
    """Three subscriptions catch up at once after an unload: they share storage reads
    where the design does (PIP-430, legacy), and every entry read counts one miss."""
    async with in_process_broker(
        managedLedgerCacheImplementation=design, **DETERMINISTIC
    ) as client:
        topic = TOPICS[0]
        for reader in range(3):
            await _keep(client, topic, f"together-{reader}")
        for _ in range(BATCHES):
            await client.produce(topic, [PAYLOAD] * BATCH)
        status, _ = await client.request("POST", "/admin/v2/namespaces/public/default/unload")
        assert status == 204
        await asyncio.gather(
            *(_drain(client, topic, f"together-{i}", BATCHES * BATCH) for i in range(3))
        )
        cache = await _stats(client, "cache")
        assert cache["misses"] > 0
        assert cache["misses"] == await _storage_entries_read(client)
