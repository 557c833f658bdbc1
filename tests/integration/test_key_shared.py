"""Key_Shared against the real server: keys stick to consumers in order, a slow consumer's
replays are served from the cache, and a joining consumer waits for a key's earlier
messages to be acknowledged."""

from __future__ import annotations

from collections import defaultdict

from tests.conftest import Client, LiveBroker, unb64
from tests.harness import eventually_async

TOPIC = "public/default/keyed"


def index_of(message: dict[str, object]) -> int:
    return int(unb64(str(message["payload"])).decode().split("-")[1])


async def produce_keyed(client: Client, count: int, keys: int, start: int = 0) -> list[str]:
    ids: list[str] = []
    for base in range(start, start + count, 100):
        messages = [
            {
                "payload": __import__("base64").b64encode(f"m-{i}".encode()).decode(),
                "key": f"k{i % keys}",
            }
            for i in range(base, min(base + 100, start + count))
        ]
        status, body = await client.request(
            "POST", f"/topics/persistent/{TOPIC}", json={"messages": messages}
        )
        assert status == 200, body
        ids += [r["messageId"] for r in body["messagePublishResults"]]
    return ids


async def test_each_key_goes_to_one_consumer_in_order_and_nothing_is_lost(
    live_broker: LiveBroker,
) -> None:
    client = await live_broker()
    consumers = [
        await client.subscribe(TOPIC, "ks", subscriptionType="Key_Shared", receiverQueueSize=20)
        for _ in range(3)
    ]
    ids = await produce_keyed(client, 600, keys=30)
    seen: dict[str, list[int]] = defaultdict(list)
    owner: dict[str, str] = {}
    got: list[str] = []

    async def all_received() -> bool:
        for consumer in consumers:
            batch = await client.receive(consumer, 15, 20)
            for message in batch:
                key = str(message["key"])
                assert owner.setdefault(key, consumer) == consumer, f"{key} moved consumers"
                seen[key].append(index_of(message))
            got.extend(str(m["messageId"]) for m in batch)
            if batch:
                await client.ack(consumer, [str(m["messageId"]) for m in batch])
        return len(got) >= len(ids)

    await eventually_async(all_received, lambda: f"{len(ids)} messages (got {len(got)})", 30)
    assert sorted(got) == sorted(ids), "every message exactly once"
    assert all(indexes == sorted(indexes) for indexes in seen.values()), "per-key order"
    assert len(set(owner.values())) == 3, "keys spread over all three consumers"


async def test_a_slow_consumer_s_replays_come_from_the_cache_in_key_order(
    live_broker: LiveBroker,
) -> None:
    client = await live_broker(
        managedLedgerCacheSizeMB=100, managedLedgerCacheEvictionTimeThresholdMillis=30000
    )
    names = ["fast-1", "fast-2", "slow"]
    consumers = {
        name: await client.subscribe(
            TOPIC, "ks", subscriptionType="Key_Shared", receiverQueueSize=10, consumerName=name
        )
        for name in names
    }
    ids = await produce_keyed(client, 500, keys=100)
    seen: dict[str, list[int]] = defaultdict(list)
    received = 0
    rounds = 0

    async def all_received() -> bool:
        nonlocal received, rounds
        rounds += 1
        for name, consumer in consumers.items():
            if name == "slow" and rounds % 10:
                continue  # ten times slower than the others
            batch = await client.receive(consumer, 10, 10)
            for message in batch:
                seen[str(message["key"])].append(index_of(message))
            received += len(batch)
            if batch:
                await client.ack(consumer, [str(m["messageId"]) for m in batch])
        return received >= len(ids)

    await eventually_async(all_received, lambda: f"{len(ids)} messages (got {received})", 60)
    assert received == len(ids)
    assert all(indexes == sorted(indexes) for indexes in seen.values()), "per-key order"
    _, cache = await client.request("GET", "/admin/v2/broker-stats/cache")
    _, storage = await client.request("GET", "/admin/v2/broker-stats/storage")
    assert storage["bookie"]["entriesRead"] == 0, "every replay was served from the cache"
    assert cache["evicted"] == {"ttl": 0, "size": 0, "invalidated": 0}
    assert cache["hits"] > len(ids), "the slow consumer's messages were replayed (re-read)"


async def test_a_joining_consumer_gets_a_key_only_after_its_earlier_messages_are_acked(
    live_broker: LiveBroker,
) -> None:
    client = await live_broker()
    first = await client.subscribe(TOPIC, "ks", subscriptionType="Key_Shared")
    early = await produce_keyed(client, 40, keys=40)  # 40 keys, one message each
    held = await client.receive_until(first, len(early))
    assert len(held) == len(early)
    second = await client.subscribe(TOPIC, "ks", subscriptionType="Key_Shared")
    late = await produce_keyed(client, 40, keys=40, start=40)  # the same 40 keys again
    # the first consumer keeps its slots' new messages; the second's slots are draining
    got_first = await client.receive(first, 100, 300)
    assert await client.receive(second, 100, 300) == [], "draining: nothing before the acks"
    await client.ack(first, [str(m["messageId"]) for m in held + got_first])
    moved = await client.receive_until(second, len(late) - len(got_first))
    assert {str(m["messageId"]) for m in got_first + moved} == set(late)
    assert moved, "some keys moved to the second consumer"


async def test_a_stuck_consumer_bounds_how_far_the_dispatcher_reads_ahead(
    live_broker: LiveBroker,
) -> None:
    client = await live_broker(keySharedLookAheadMsgInReplayThresholdPerConsumer=10)
    stuck = await client.subscribe(TOPIC, "ks", subscriptionType="Key_Shared", receiverQueueSize=1)
    busy = await client.subscribe(TOPIC, "ks", subscriptionType="Key_Shared")
    # half of them the stuck consumer's, which then takes one a poll (its queue of 1)
    ids = await produce_keyed(client, 250, keys=50)
    got: list[str] = []
    for _ in range(20):  # the busy consumer drains whatever it is given
        batch = await client.receive(busy, 500, 25)
        got += [str(m["messageId"]) for m in batch]
        if batch:
            await client.ack(busy, [str(m["messageId"]) for m in batch])
    internal = await client.internal_stats(TOPIC)
    read_up_to = int(internal["cursors"]["ks"]["readPosition"].split(":")[1])
    # the stuck consumer's keys fill the replay queue up to 2 x 10, then reading stops
    assert read_up_to < len(ids) // 2, read_up_to
    assert 0 < len(got) < read_up_to
    # once the stuck consumer drains, everything flows
    for _ in range(300):
        for consumer in (stuck, busy):
            batch = await client.receive(consumer, 500, 5)
            got += [str(m["messageId"]) for m in batch]
            if batch:
                await client.ack(consumer, [str(m["messageId"]) for m in batch])
        if len(got) == len(ids):
            break
    assert sorted(got) == sorted(ids)
