"""The live broker's entry cache, per design: tailing reads are served from the cache,
a catch-up read of evicted entries goes to storage, and the stats route says so."""

from __future__ import annotations

import pytest

from tests.conftest import Client, LiveBroker

TOPIC = "public/default/cached"


async def cache_stats(client: Client) -> dict[str, object]:
    status, body = await client.request("GET", "/admin/v2/broker-stats/cache")
    assert status == 200
    return dict(body)


async def storage_reads(client: Client) -> int:
    status, body = await client.request("GET", "/admin/v2/broker-stats/storage")
    assert status == 200
    return int(body["bookie"]["entriesRead"])


@pytest.mark.parametrize("design", ["pip430", "legacy", "segmented"])
async def test_tailing_consumers_read_from_the_cache(live_broker: LiveBroker, design: str) -> None:
    client = await live_broker(managedLedgerCacheImplementation=design)
    consumers = [await client.subscribe(TOPIC, f"tail-{i}") for i in range(3)]
    ids = await client.produce(TOPIC, [f"m{i}" for i in range(50)])
    for consumer in consumers:
        got = await client.receive_until(consumer, len(ids))
        assert [m["messageId"] for m in got] == ids
    stats = await cache_stats(client)
    assert stats["implementation"] == design
    assert stats["hits"] == 3 * len(ids) and stats["misses"] == 0
    assert await storage_reads(client) == 0, "no tailing read touched the bookie"
    assert int(str(stats["inserted"])) == len(ids)


async def test_a_catch_up_read_after_the_ttl_goes_to_storage(live_broker: LiveBroker) -> None:
    client = await live_broker(managedLedgerCacheEvictionTimeThresholdMillis=50)
    tail = await client.subscribe(TOPIC, "tail")
    ids = await client.produce(TOPIC, [f"m{i}" for i in range(20)])
    await client.receive_until(tail, len(ids))
    await client.ack(tail, [ids[-1]], "Cumulative")
    # poll the stats until the timestamp pass has evicted everything (no sleeping)
    for _ in range(200):
        stats = await cache_stats(client)
        if stats["entries"] == 0:
            break
        await client.receive(tail, 1, 20)
    assert stats["entries"] == 0 and stats["evicted"]["ttl"] == len(ids)  # type: ignore[index]
    status, _ = await client.request(
        "POST",
        f"/admin/v2/persistent/{TOPIC}/subscription/tail/resetcursor",
        json={"messageId": ids[0]},
    )
    assert status == 204
    again = await client.receive_until(tail, len(ids))
    assert [m["messageId"] for m in again] == ids
    stats = await cache_stats(client)
    assert stats["misses"] == len(ids)
    assert await storage_reads(client) == len(ids)


async def test_cache_size_zero_disables_caching(live_broker: LiveBroker) -> None:
    client = await live_broker(managedLedgerCacheSizeMB=0)
    consumer = await client.subscribe(TOPIC, "s")
    ids = await client.produce(TOPIC, ["a", "b"])
    await client.receive_until(consumer, 2)
    stats = await cache_stats(client)
    assert stats["implementation"] == "disabled" and stats["misses"] == len(ids)


async def test_shadows_count_what_their_own_designs_would_have_done(
    live_broker: LiveBroker,
) -> None:
    # a TTL longer than the test: what is evicted depends on the designs' rules alone
    client = await live_broker(
        brokerlabShadowCacheImplementations="legacy,segmented",
        managedLedgerCacheEvictionTimeThresholdMillis=60_000,
    )
    first = await client.subscribe(TOPIC, "first", subscriptionInitialPosition="Earliest")
    second = await client.subscribe(TOPIC, "second", subscriptionInitialPosition="Earliest")
    ids = await client.produce(TOPIC, [f"m{i}" for i in range(30)])
    for consumer in (first, second):
        assert len(await client.receive_until(consumer, len(ids))) == len(ids)
    stats = await cache_stats(client)
    shadows = stats["shadows"]
    assert set(shadows) == {"legacy", "segmented"}  # type: ignore[arg-type]
    # tailing reads: every design holds what was just written
    assert stats["hits"] == 2 * len(ids)
    for name in ("legacy", "segmented"):
        assert shadows[name]["hits"] == 2 * len(ids), name  # type: ignore[index]
        assert shadows[name]["misses"] == 0, name  # type: ignore[index]

    # after an unload a third subscription catches up, then a fourth reads the same range:
    # - pip430 (live) reads from storage once and caches what it read for the fourth;
    # - legacy never caches storage reads (backlog caching is off): both read storage;
    # - the ring keeps its segments across an unload (PIP-174's PR): both hit
    status, _ = await client.request("POST", "/admin/v2/namespaces/public/default/unload")
    assert status == 204
    for name in ("third", "fourth"):
        consumer = await client.subscribe(TOPIC, name, subscriptionInitialPosition="Earliest")
        assert len(await client.receive_until(consumer, len(ids))) == len(ids)
    stats = await cache_stats(client)
    shadows = stats["shadows"]
    assert (stats["hits"], stats["misses"]) == (3 * len(ids), len(ids))
    assert await storage_reads(client) == len(ids), "misses are the entries read from storage"
    legacy, ring = shadows["legacy"], shadows["segmented"]  # type: ignore[index]
    assert (legacy["hits"], legacy["misses"]) == (2 * len(ids), 2 * len(ids))
    assert (ring["hits"], ring["misses"]) == (4 * len(ids), 0)


async def test_the_dashboard_says_what_a_shadow_is(live_broker: LiveBroker) -> None:
    client = await live_broker()
    async with client.session.get(f"{client.base_url}/dashboard") as response:
        assert response.status == 200
        page = " ".join((await response.text()).split())
    sentence = "a shadow is another cache design run beside the live one on the same cache events"
    assert sentence in page
