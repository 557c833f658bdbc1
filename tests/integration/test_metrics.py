"""GET /metrics under a scripted load, read with prometheus_client's own text parser:
the named series exist, and move as the load says they must."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import Client, LiveBroker

TOPIC = "public/default/metered"


async def scrape(client: Client) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    status, text = await client.request("GET", "/metrics")
    assert status == 200
    samples: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def value(samples: dict, name: str, **labels: str) -> float:  # type: ignore[type-arg]
    """The sample of ``name`` with ``labels``; every series carries the broker's index,
    0 for a broker alone."""
    labels.setdefault("broker", "0")
    return samples[(name, tuple(sorted(labels.items())))]


LIVE = {"design": "pip430", "role": "live"}


async def test_the_named_series_exist(live_broker: LiveBroker) -> None:
    client = await live_broker(brokerlabShadowCacheImplementations="legacy")
    consumer = await client.subscribe(TOPIC, "s")
    await client.produce(TOPIC, ["a"])
    await client.receive_until(consumer, 1)
    samples = await scrape(client)
    names = {name for name, _ in samples}
    for name in (
        "pulsar_ml_count",
        "pulsar_ml_cache_used_size",
        "pulsar_ml_cache_entries",
        "pulsar_ml_cache_hits_rate",
        "pulsar_ml_cache_misses_rate",
        "pulsar_ml_cache_hits_throughput",
        "pulsar_ml_cache_misses_throughput",
        "pulsar_ml_cache_evictions",
        "pulsar_ml_cache_inserted_entries_total",
        "pulsar_ml_cache_evicted_entries_total",
        "brokerlab_cache_hits_total",
        "brokerlab_cache_misses_total",
        "brokerlab_cache_evictions_total",
        "brokerlab_cache_size_bytes",
        "brokerlab_storage_read_entries_total",
        "brokerlab_bookie_last_entry_cache_hits_total",
        "brokerlab_bookie_floor_seeks_total",
        "brokerlab_bookie_read_only",
        "brokerlab_bookie_disk_usage_ratio",
        "brokerlab_messages_dispatched_total",
        "brokerlab_backlog_messages",
        "brokerlab_replay_queue_messages",
        "brokerlab_produce_latency_seconds_count",
        "brokerlab_dispatch_latency_seconds_count",
        "pulsar_msg_backlog",
    ):
        assert name in names, name
    assert value(samples, "brokerlab_cache_hits_total", design="legacy", role="shadow") >= 1
    assert value(samples, "brokerlab_produce_latency_seconds_count") == 1
    assert value(samples, "brokerlab_dispatch_latency_seconds_count") == 1


async def test_hits_grow_on_tailing_reads_and_misses_with_ttl_evictions_on_catch_up(
    live_broker: LiveBroker,
) -> None:
    client = await live_broker(managedLedgerCacheEvictionTimeThresholdMillis=50)
    consumer = await client.subscribe(TOPIC, "s")
    before = await scrape(client)
    ids = await client.produce(TOPIC, [f"m{i}" for i in range(20)])
    await client.receive_until(consumer, len(ids))
    await client.ack(consumer, [ids[-1]], "Cumulative")
    tailing = await scrape(client)
    assert value(tailing, "brokerlab_cache_hits_total", **LIVE) - value(
        before, "brokerlab_cache_hits_total", **LIVE
    ) == len(ids)
    assert value(tailing, "brokerlab_cache_misses_total", **LIVE) == 0
    # wait (polling, no sleep) for the TTL pass to evict them all
    for _ in range(200):
        samples = await scrape(client)
        if value(samples, "brokerlab_cache_entries", **LIVE) == 0:
            break
        await client.receive(consumer, 1, 20)
    assert value(samples, "brokerlab_cache_evictions_total", reason="ttl", **LIVE) == len(ids)
    await client.request(
        "POST",
        f"/admin/v2/persistent/{TOPIC}/subscription/s/resetcursor",
        json={"messageId": ids[0]},
    )
    await client.receive_until(consumer, len(ids))
    catch_up = await scrape(client)
    assert value(catch_up, "brokerlab_cache_misses_total", **LIVE) == len(ids)
    assert value(catch_up, "brokerlab_storage_read_entries_total", tier="bookie") == len(ids)
    assert value(catch_up, "brokerlab_messages_dispatched_total") == 2 * len(ids)


async def test_size_evictions_are_counted_by_reason(live_broker: LiveBroker) -> None:
    client = await live_broker(managedLedgerCacheSizeMB=1)
    consumer = await client.subscribe(TOPIC, "s", receiverQueueSize=10)
    payload = "x" * 50_000
    for _ in range(4):
        await client.produce(TOPIC, [payload] * 10)  # 2 MB in all: twice the cache
    samples = await scrape(client)
    assert value(samples, "brokerlab_cache_evictions_total", reason="size", **LIVE) > 0
    assert value(samples, "brokerlab_cache_size_bytes", **LIVE) <= 1024 * 1024
    assert value(samples, "brokerlab_backlog_messages") == 40
    await client.receive(consumer, 1, 0)


async def test_topic_series_only_when_exposed_else_per_namespace_as_pulsar(
    live_broker: LiveBroker,
) -> None:
    client = await live_broker(exposeTopicLevelMetricsInPrometheus=False)
    await client.request("PUT", f"/admin/v2/persistent/{TOPIC}/subscription/s")
    await client.request("PUT", "/admin/v2/persistent/public/default/other/subscription/s")
    await client.produce(TOPIC, ["a", "b"])
    await client.produce("public/default/other", ["c"])
    samples = await scrape(client)
    assert not [key for key in samples if "topic" in dict(key[1])]
    namespace = {"namespace": "public/default"}
    assert value(samples, "pulsar_msg_backlog", **namespace) == 3
    assert value(samples, "pulsar_topics_count", **namespace) == 2
    assert value(samples, "pulsar_storage_size", **namespace) > 0
    assert value(samples, "brokerlab_backlog_messages") == 3


async def test_with_topic_series_the_namespaces_count_their_topics(
    live_broker: LiveBroker,
) -> None:
    client = await live_broker(brokerlabMetricsMaxTopics=1)
    for name in ("a", "b", "c"):
        await client.produce(f"public/default/{name}", ["x"])
    samples = await scrape(client)
    assert value(samples, "pulsar_topics_count", namespace="public/default") == 3


async def test_a_poll_observes_the_dispatch_latency_of_every_message_it_returns(
    live_broker: LiveBroker,
) -> None:
    """A poll observes each run of messages with one publish time at once: every message
    still counts once."""
    client = await live_broker()
    consumer = await client.subscribe(TOPIC, "latency")
    before = await scrape(client)
    sizes = (3, 1, 4)
    for size in sizes:  # one publish time per request, perhaps the same for several
        await client.produce(TOPIC, [f"m{i}" for i in range(size)])
    assert len(await client.receive_until(consumer, sum(sizes))) == sum(sizes)
    after = await scrape(client)
    name = "brokerlab_dispatch_latency_seconds_count"
    assert value(after, name) - value(before, name) == sum(sizes)


async def test_delivery_counters_keep_what_closed_consumers_and_deleted_subscriptions_had(
    live_broker: LiveBroker,
) -> None:
    """As Pulsar keeps them: a subscription's msgOutCounter and bytesOutCounter hold
    what consumers that left were delivered, and the topic's what deleted
    subscriptions were."""
    client = await live_broker()
    topic = "public/default/out-counters"
    first = await client.subscribe(topic, "kept")
    gone = await client.subscribe(topic, "deleted")
    await client.produce(topic, ["aa", "bbb", "cccc"])
    for consumer in (first, gone):
        received = await client.receive_until(consumer, 3)
        assert len(received) == 3
        await client.ack(consumer, [received[-1]["messageId"]], "Cumulative")
        assert (await client.request("DELETE", f"/consumers/{consumer}"))[0] == 204
    stats = await client.stats(topic)
    entry_bytes = stats["subscriptions"]["kept"]["bytesOutCounter"]
    assert entry_bytes > 9  # the three entries, metadata and all
    for name in ("kept", "deleted"):
        assert stats["subscriptions"][name]["msgOutCounter"] == 3
        assert stats["subscriptions"][name]["bytesOutCounter"] == entry_bytes
    assert (stats["msgOutCounter"], stats["bytesOutCounter"]) == (6, 2 * entry_bytes)

    second = await client.subscribe(topic, "kept")
    await client.produce(topic, ["d"])
    assert len(await client.receive_until(second, 1)) == 1
    status, _ = await client.request("DELETE", f"/admin/v2/persistent/{topic}/subscription/deleted")
    assert status == 204
    stats = await client.stats(topic)
    assert set(stats["subscriptions"]) == {"kept"}
    assert stats["subscriptions"]["kept"]["msgOutCounter"] == 4
    assert stats["msgOutCounter"] == 7  # 3 + 1 to "kept", 3 to the deleted one
