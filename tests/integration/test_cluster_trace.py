"""A trace of a live 2-broker cluster, with restarts that move every topic, replayed
broker by broker: each broker's replay at the live design and size counts exactly the
hits and misses that broker's cache counted live, summed over its incarnations."""

from __future__ import annotations

import base64
import json
import pathlib
from typing import Any

import pytest

from broker.cache import DESIGNS
from broker.cache.config import CacheConfig
from broker.cluster import Cluster
from broker.dispatch.names import TopicName
from broker.trace.recorder import read_meta, read_trace
from loadgen.client import BrokerClient
from pipeline.analyze import trace_settings
from pipeline.replay import ReplaySpec, replay_trace_dir
from tests.harness import in_process_cluster

BATCH, PAYLOAD = 100, b"p" * 1500
#: a TTL longer than the test and no stats period in it: what is cached depends on the
#: events only, not on how fast this machine runs them
DETERMINISTIC = {
    "managedLedgerCacheSizeMB": 1,
    "managedLedgerCacheEvictionTimeThresholdMillis": 120_000,
    "statsUpdateFrequencyInSecs": 3600,
}


def topics_on_both(cluster: Cluster) -> list[str]:
    """Four topics, two of them in each of two different bundles (so each broker gets
    one bundle when they are first used)."""
    by_bundle: dict[tuple[str, str], list[str]] = {}
    index = 0
    while len(by_bundle) < 2 or any(len(names) < 2 for names in by_bundle.values()):
        name = f"persistent://public/default/trace-{index}"
        bundle = cluster.ownership.bundle_of(TopicName.parse(name))
        if len(by_bundle) < 2 or bundle in by_bundle:
            names = by_bundle.setdefault(bundle, [])
            if len(names) < 2:
                names.append(name)
        index += 1
    return [name for names in by_bundle.values() for name in names]


def body(count: int) -> bytes:
    payload = base64.b64encode(PAYLOAD).decode()
    return json.dumps({"messages": [{"payload": payload}] * count}).encode()


async def drain(client: BrokerClient, topic: str, subscription: str, count: int) -> None:
    spec = {"subscriptionType": "Shared", "subscriptionInitialPosition": "Earliest"}
    consumer = await client.create_consumer(topic, subscription, spec)
    got = 0
    while got < count:
        messages = await client.receive(consumer, count - got, 5000)
        assert messages, f"{topic} {subscription}: {got} of {count} received"
        await client.ack(consumer, [m["messageId"] for m in messages], False)
        got += len(messages)
    await client.close_consumer(consumer)


async def workload(cluster: Cluster) -> dict[int, dict[str, Any]]:
    """Catch-up readers on topics of both brokers, across two restarts that move every
    topic; returns each broker's live cache stats at the end."""
    urls = [node.address.http_url for node in cluster.nodes]
    async with BrokerClient(urls[0], brokers=urls) as client:
        topics = topics_on_both(cluster)
        for topic in topics:
            for reader in range(3):
                await client.create_subscription(topic, f"catch-up-{reader}", "earliest")
            assert await client.produce(topic, body(BATCH)) == BATCH
        owners = {cluster.ownership.owner(TopicName.parse(t)).index for t in topics}
        assert owners == {0, 1}
        for restarted in (0, 1):
            # every topic of the restarted broker moves to the other one, whose cache
            # never saw it; the readers catch up there
            await cluster.restart(restarted, "graceful", 0)
            for topic in topics:
                for reader in range(3):
                    await drain(client, topic, f"catch-up-{reader}", BATCH)
                assert await client.produce(topic, body(BATCH)) == BATCH
    return {node.index: node.cache_stats() for node in cluster.nodes}


@pytest.mark.parametrize("design", list(DESIGNS))
async def test_each_brokers_replay_counts_its_live_hits(
    tmp_path: pathlib.Path, design: str
) -> None:
    trace_dir = tmp_path / "trace"
    async with in_process_cluster(
        2,
        managedLedgerCacheImplementation=design,
        brokerlabTraceDir=str(trace_dir),
        **DETERMINISTIC,
    ) as local:
        live = await workload(local.cluster)
        assert [node.restarts for node in local.cluster.nodes] == [1, 1]
    # both brokers read from storage (legacy caches no storage read, so its hits may be 0)
    assert all(stats["misses"] > 0 for stats in live.values())
    if design == "pip430":
        assert all(stats["hits"] > 0 for stats in live.values())
    table = read_trace(trace_dir)
    kinds = table.column("kind").to_pylist()
    brokers = table.column("broker").to_pylist()
    assert {b for b, k in zip(brokers, kinds, strict=True) if k == "restart"} == {0, 1}
    meta = read_meta(trace_dir)
    assert meta["brokers"] == 2
    settings = CacheConfig(**trace_settings(meta, str(trace_dir)))
    results = replay_trace_dir(
        trace_dir, ReplaySpec(design, settings.max_size_bytes, settings, live=True)
    )
    assert sorted(results) == [0, 1]
    for broker, result in results.items():
        expected = live[broker]
        assert (result.hits, result.misses) == (expected["hits"], expected["misses"]), broker
        assert (result.hit_bytes, result.miss_bytes) == (
            expected["hitBytes"],
            expected["missBytes"],
        ), broker
