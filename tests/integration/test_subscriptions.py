"""Produce and consume over HTTP on a real port: Exclusive order, Shared spreading,
nack redelivery, hand-over of a closed consumer's unacked messages."""

from __future__ import annotations

from collections import Counter

from tests.conftest import LiveBroker, unb64
from tests.harness import eventually_async

TOPIC = "public/default/orders"


async def test_exclusive_subscription_receives_every_message_in_publish_order(
    live_broker: LiveBroker,
) -> None:
    client = await live_broker()
    consumer = await client.subscribe(TOPIC, "audit", subscriptionType="Exclusive")
    sent: list[str] = []
    for batch in range(5):
        payloads = [f"order-{batch}-{i}" for i in range(40)]
        sent += payloads
        await client.produce(TOPIC, payloads, key=f"k{batch}")
    got = await client.receive_until(consumer, len(sent))
    assert [unb64(m["payload"]).decode() for m in got] == sent
    ids = [m["messageId"] for m in got]
    assert len(set(ids)) == len(ids)
    assert all(m["redeliveryCount"] == 0 for m in got)
    assert got[0]["key"] == "k0" and got[-1]["key"] == "k4"
    await client.ack(consumer, [ids[-1]], "Cumulative")
    stats = await client.stats(TOPIC)
    assert stats["subscriptions"]["audit"]["msgBacklog"] == 0
    assert stats["msgInCounter"] == len(sent)


async def test_second_exclusive_consumer_is_refused(live_broker: LiveBroker) -> None:
    client = await live_broker()
    await client.subscribe(TOPIC, "solo", subscriptionType="Exclusive")
    status, body = await client.request(
        "POST", f"/consumers/persistent/{TOPIC}/solo", json={"subscriptionType": "Exclusive"}
    )
    assert (status, body["code"]) == (409, "conflict")
    status, body = await client.request(
        "POST", f"/consumers/persistent/{TOPIC}/solo", json={"subscriptionType": "Shared"}
    )
    assert (status, body["code"]) == (409, "conflict")


async def test_shared_subscription_spreads_across_three_consumers_without_loss(
    live_broker: LiveBroker,
) -> None:
    client = await live_broker()
    consumers = [
        await client.subscribe(TOPIC, "workers", subscriptionType="Shared", receiverQueueSize=10)
        for _ in range(3)
    ]
    total = 300
    produced = []
    for start in range(0, total, 50):
        produced += await client.produce(TOPIC, [f"job-{i}" for i in range(start, start + 50)])

    received: dict[str, list[str]] = {c: [] for c in consumers}

    def count() -> int:
        return sum(len(v) for v in received.values())

    async def all_received() -> bool:
        for consumer in consumers:
            messages = await client.receive(consumer, 7, 50)
            ids = [m["messageId"] for m in messages]
            received[consumer] += ids
            if ids:
                await client.ack(consumer, ids)
        return count() >= total

    await eventually_async(all_received, lambda: f"{total} messages (got {count()})", 30)

    all_ids = [i for ids in received.values() for i in ids]
    assert sorted(all_ids) == sorted(produced), "every message exactly once"
    assert all(len(ids) >= 30 for ids in received.values()), {
        c: len(v) for c, v in received.items()
    }
    stats = await client.stats(TOPIC)
    assert stats["subscriptions"]["workers"]["msgBacklog"] == 0
    assert stats["subscriptions"]["workers"]["unackedMessages"] == 0


async def test_nack_redelivers_with_redelivery_count_plus_one(live_broker: LiveBroker) -> None:
    client = await live_broker()
    for sub_type in ("Shared", "Exclusive"):
        topic = f"{TOPIC}-nack-{sub_type}"
        consumer = await client.subscribe(
            topic, "retry", subscriptionType=sub_type, negativeAckRedeliveryDelayMillis=0
        )
        ids = await client.produce(topic, ["a", "b", "c"])
        first = await client.receive_until(consumer, 3)
        assert [m["redeliveryCount"] for m in first] == [0, 0, 0]
        await client.ack(consumer, [ids[0], ids[2]])
        status, _ = await client.request(
            "POST", f"/consumers/{consumer}/nack", json={"messageIds": [ids[1]]}
        )
        assert status == 204
        again = await client.receive_until(consumer, 1)
        assert [(m["messageId"], m["redeliveryCount"]) for m in again] == [(ids[1], 1)]
        await client.request("POST", f"/consumers/{consumer}/nack", json={"messageIds": [ids[1]]})
        third = await client.receive_until(consumer, 1)
        assert [(m["messageId"], m["redeliveryCount"]) for m in third] == [(ids[1], 2)]
        assert unb64(third[0]["payload"]) == b"b"


async def test_nack_waits_for_the_redelivery_delay(live_broker: LiveBroker) -> None:
    client = await live_broker()
    consumer = await client.subscribe(
        TOPIC, "slow-retry", subscriptionType="Shared", negativeAckRedeliveryDelayMillis=60000
    )
    ids = await client.produce(TOPIC, ["x"])
    assert len(await client.receive_until(consumer, 1)) == 1
    await client.request("POST", f"/consumers/{consumer}/nack", json={"messageIds": ids})
    assert await client.receive(consumer, 10, 300) == []
    stats = await client.stats(TOPIC)
    assert stats["subscriptions"]["slow-retry"]["unackedMessages"] == 1


async def test_closed_consumer_hands_unacked_messages_to_another(live_broker: LiveBroker) -> None:
    client = await live_broker()
    first = await client.subscribe(TOPIC, "handover", subscriptionType="Shared")
    second = await client.subscribe(TOPIC, "handover", subscriptionType="Shared")
    produced = await client.produce(TOPIC, [f"m{i}" for i in range(20)])
    seen = {first: await client.receive_until(first, 1), second: []}
    # the first consumer acks some of what it saw and disappears with the rest
    first_ids = [m["messageId"] for m in seen[first]]
    await client.ack(first, first_ids[:1])
    status, _ = await client.request("DELETE", f"/consumers/{first}")
    assert status == 204
    status, body = await client.request("GET", f"/consumers/{first}/messages")
    assert (status, body["code"]) == (404, "not-found")

    remaining = set(produced) - set(first_ids[:1])
    got: list[dict[str, object]] = []

    async def all_remaining() -> bool:
        batch = await client.receive(second, 100, 200)
        got.extend(batch)
        if batch:
            await client.ack(second, [str(m["messageId"]) for m in batch])
        return {m["messageId"] for m in got} == remaining

    await eventually_async(all_remaining, lambda: f"{sorted(remaining)} (got {got})", 20)
    assert {m["messageId"] for m in got} == remaining
    handed = [m for m in got if m["messageId"] in first_ids[1:]]
    assert all(m["redeliveryCount"] == 1 for m in handed)
    duplicates = [i for i, n in Counter(m["messageId"] for m in got).items() if n > 1]
    assert duplicates == []


async def test_subscription_created_earliest_sees_older_messages(live_broker: LiveBroker) -> None:
    client = await live_broker()
    await client.produce(TOPIC, ["old-1", "old-2"])
    status, _ = await client.request(
        "PUT", f"/admin/v2/persistent/{TOPIC}/subscription/replay", messageId="earliest"
    )
    assert status == 204
    status, body = await client.request("PUT", f"/admin/v2/persistent/{TOPIC}/subscription/replay")
    assert (status, body["code"]) == (409, "conflict")
    late = await client.subscribe(TOPIC, "late", subscriptionInitialPosition="Latest")
    consumer = await client.subscribe(TOPIC, "replay")
    got = await client.receive_until(consumer, 2)
    assert [unb64(m["payload"]) for m in got] == [b"old-1", b"old-2"]
    assert await client.receive(late, 10, 100) == []


async def test_messages_without_a_key_carry_no_key_field(live_broker: LiveBroker) -> None:
    client = await live_broker()
    consumer = await client.subscribe(TOPIC, "nokey")
    await client.produce(TOPIC, ["plain"])
    (message,) = await client.receive_until(consumer, 1)
    assert "key" not in message


async def test_shared_fills_higher_priority_consumers_first(live_broker: LiveBroker) -> None:
    client = await live_broker()
    high = await client.subscribe(
        TOPIC, "prio", subscriptionType="Shared", priorityLevel=0, receiverQueueSize=5
    )
    low = await client.subscribe(
        TOPIC, "prio", subscriptionType="Shared", priorityLevel=1, receiverQueueSize=100
    )
    ids = await client.produce(TOPIC, [f"p{i}" for i in range(20)])
    to_high = await client.receive_until(high, 5)
    to_low = await client.receive_until(low, 15)
    assert [m["messageId"] for m in to_high] == ids[:5], "the high-priority queue filled first"
    assert sorted(m["messageId"] for m in to_low) == sorted(ids[5:])
