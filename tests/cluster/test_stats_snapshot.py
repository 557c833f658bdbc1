"""The load generator's samples of a cluster's counters are of one instant: every
sample's cache misses (both brokers' summed) equal the storage's entries read, while
consumers catch up through storage reads that take their time and a broker restarts
gracefully under them. Asked separately (each broker's cache stats, then the storage
stats, as the sampler did), reads completing between the answers set the two apart:
live rolling-restart runs ended with misses off by 100-900 entries."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from loadgen.client import BrokerClient
from loadgen.sampler import Sampler
from tests.conftest import LocalClusterFactory
from tests.harness import short, topics_in_distinct_bundles

LOOKUP = "/lookup/v2/topic/persistent/{topic}"
MESSAGES = 300
SUBSCRIPTIONS = 3


async def test_each_sample_s_misses_equal_the_entries_read_from_storage(
    local_cluster: LocalClusterFactory,
) -> None:
    # no cache: every entry a consumer gets is read from storage, 1 ms a read
    local = await local_cluster(managedLedgerCacheSizeMB=0, storage={"readEntryLatency": "fixed:1"})
    topics = topics_in_distinct_bundles("snapshot", 2)
    for topic in topics:  # one topic per broker
        status, body = await local.clients[0].request("GET", LOOKUP.format(topic=short(topic)))
        assert status == 200, body
    assert sorted(local.owner_index(topic) for topic in topics) == [0, 1]
    for topic in topics:
        await local.clients[0].produce(short(topic), [f"m{i}" for i in range(MESSAGES)])

    admin = BrokerClient(local.urls[0], brokers=local.urls)
    run = SimpleNamespace(admin=admin, stats_error=None, now_s=lambda: 0.0)
    sampler = Sampler(run, 1.0, None)  # type: ignore[arg-type]
    samples: list[tuple[int, int]] = []
    wanted = len(topics) * SUBSCRIPTIONS * MESSAGES
    # each subscription's messages received, by id: an ack answered with an error may
    # still have been applied (its topic closing under it), so acks count nothing
    received: set[tuple[str, str, str]] = set()

    async def consume(topic: str, subscription: str) -> None:
        client = local.clients[0]
        consumer = None
        while len(received) < wanted:
            if consumer is None:
                status, body = await client.request(
                    "POST",
                    f"/consumers/persistent/{short(topic)}/{subscription}",
                    json={"subscriptionInitialPosition": "Earliest", "receiverQueueSize": 10},
                )
                if status != 200:  # its broker restarting: look again
                    await asyncio.sleep(0.01)
                    continue
                consumer = body["consumerId"]
            status, body = await client.request(
                "GET", f"/consumers/{consumer}/messages", maxMessages=10, timeoutMs=100
            )
            if status != 200:  # closed under it by the restart
                consumer = None
                continue
            ids = [message["messageId"] for message in body["messages"]]
            received.update((topic, subscription, message_id) for message_id in ids)
            if ids:
                await client.request("POST", f"/consumers/{consumer}/ack", json={"messageIds": ids})

    async def sample_until_done() -> None:
        while len(received) < wanted:
            await sampler.baseline()  # one sample of the broker's counters
            cache, storage = sampler.last_cache, sampler.last_storage
            read = storage["bookie"]["entriesRead"] + storage["tiered"]["entriesRead"]
            samples.append((cache["misses"], read))

    consumers = [
        asyncio.create_task(consume(topic, f"s{index}"))
        for topic in topics
        for index in range(SUBSCRIPTIONS)
    ]
    sampling = asyncio.create_task(sample_until_done())
    try:
        await asyncio.sleep(0.3)
        # broker 1 restarts under the reads: its topic moves to broker 0, and its cache
        # counters go on in its next incarnation
        await local.cluster.restart(1, "graceful", 0.05)
        await asyncio.wait_for(asyncio.gather(*consumers), 120)
        await sampling
    finally:
        for task in (*consumers, sampling):
            task.cancel()
        await admin.close()
    assert local.cluster.nodes[1].restarts == 1
    reads = {read for _, read in samples}
    assert len(reads) > 5, f"samples taken while consumers read from storage: {samples}"
    unequal = [(misses, read) for misses, read in samples if misses != read]
    assert not unequal, f"{len(unequal)} of {len(samples)} samples: {unequal[:10]}"
