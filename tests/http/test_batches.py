"""Batched entries over HTTP, against a real broker on a real port.

``"batch": true`` on produce stores the request's messages as ONE entry in Pulsar's
batch format; consumers see each message with its own id ``L:E:I``, ack or nack it on
its own, and the entry is acknowledged (durably) when its last message is.
"""

from __future__ import annotations

import pathlib
from typing import Any

import pytest

from tests.conftest import Client, LiveBroker, b64, in_process_broker, unb64
from tests.harness import eventually_async

TENANT_NS = "public/default"
TOPIC = f"{TENANT_NS}/batches"
SUB = "sub"


# ---------------------------------------------------------------------- helpers


def message(text: str, **fields: Any) -> dict[str, Any]:
    return {"payload": b64(text), **fields}


async def produce(client: Client, messages: list[dict[str, Any]], batch: Any = True) -> Any:
    """The raw answer of a produce request: (status, body)."""
    return await client.request(
        "POST", f"/topics/persistent/{TOPIC}", json={"messages": messages, "batch": batch}
    )


async def produce_batch(client: Client, messages: list[dict[str, Any]] | int) -> list[str]:
    """Store one batched entry (``n`` -> payloads b0..b{n-1}); its message ids."""
    if isinstance(messages, int):
        messages = [message(f"b{i}") for i in range(messages)]
    status, body = await produce(client, messages)
    assert status == 200, body
    return [result["messageId"] for result in body["messagePublishResults"]]


def entry_of(message_id: str) -> str:
    """``L:E`` of an ``L:E:I`` id."""
    ledger, entry, _ = message_id.split(":")
    return f"{ledger}:{entry}"


def ids_of(messages: list[dict[str, Any]]) -> list[str]:
    return [str(m["messageId"]) for m in messages]


async def post(client: Client, consumer: str, action: str, **body: Any) -> tuple[int, Any]:
    return await client.request("POST", f"/consumers/{consumer}/{action}", json=body or None)


async def backlog(client: Client, subscription: str = SUB) -> int:
    stats = await client.stats(TOPIC)
    return int(stats["subscriptions"][subscription]["msgBacklog"])


async def cache_stats(client: Client) -> dict[str, Any]:
    status, body = await client.request("GET", "/admin/v2/broker-stats/cache")
    assert status == 200, body
    return dict(body)


async def receive_all(client: Client, consumer: str, count: int) -> list[dict[str, Any]]:
    got = await client.receive_until(consumer, count)
    assert len(got) == count, ids_of(got)
    return got


async def nothing_more(client: Client, consumer: str) -> None:
    assert await client.receive(consumer, 100, 300) == []


# ---------------------------------------------------------------------- produce


async def test_a_batch_is_stored_as_one_entry_and_each_message_gets_its_own_id(
    live_broker: LiveBroker,
) -> None:
    client = await live_broker()
    consumer = await client.subscribe(TOPIC, SUB)
    before = await cache_stats(client)
    first = await produce_batch(client, 50)
    second = await produce_batch(client, 50)

    entry = entry_of(first[0])
    assert first == [f"{entry}:{i}" for i in range(50)]
    assert entry_of(second[0]) != entry
    assert second == [f"{entry_of(second[0])}:{i}" for i in range(50)]
    internal = await client.internal_stats(TOPIC)
    assert (internal["numberOfEntries"], internal["entriesAddedCounter"]) == (2, 2)
    assert internal["lastConfirmedEntry"] == entry_of(second[0])
    stats = await client.stats(TOPIC)
    assert stats["msgInCounter"] == 100, "msgInCounter counts messages, not entries"

    got = await receive_all(client, consumer, 100)
    assert ids_of(got) == first + second
    after = await cache_stats(client)
    assert after["inserted"] - before["inserted"] == 2, "the cache holds one entry per batch"
    assert after["entries"] - before["entries"] == 2
    reads = after["hits"] + after["misses"] - before["hits"] - before["misses"]
    assert reads == 2, "dispatching a batch reads its one entry once"


async def test_every_message_of_a_batch_arrives_with_its_key_properties_and_event_time(
    live_broker: LiveBroker,
) -> None:
    client = await live_broker()
    consumer = await client.subscribe(TOPIC, SUB)
    sent = [
        message("first", key="k-1", properties={"n": "1", "colour": "red"}, eventTime=1000),
        message("second"),
        message("", key="", eventTime=3),  # an empty payload and an empty key are values
        message("fourth", properties={"n": "4"}),
    ]
    ids = await produce_batch(client, sent)

    got = await receive_all(client, consumer, 4)
    assert ids_of(got) == ids
    assert [unb64(m["payload"]) for m in got] == [b"first", b"second", b"", b"fourth"]
    assert [m.get("key") for m in got] == ["k-1", None, "", None]
    assert "key" not in got[1], "a message without a key carries no key field"
    assert [m["properties"] for m in got] == [{"n": "1", "colour": "red"}, {}, {}, {"n": "4"}]
    assert [m["eventTime"] for m in got] == [1000, 0, 3, 0]
    assert len({m["publishTime"] for m in got}) == 1, "one entry, one publish time"
    assert {m["redeliveryCount"] for m in got} == {0}


async def test_batched_and_unbatched_entries_mix_and_max_messages_counts_entries(
    live_broker: LiveBroker,
) -> None:
    client = await live_broker()
    consumer = await client.subscribe(TOPIC, SUB)
    (plain_first,) = await client.produce(TOPIC, ["p0"])
    batch = await produce_batch(client, 4)
    status, body = await produce(client, [message("p5"), message("p6")], batch=False)
    assert status == 200, body
    plain_last = [r["messageId"] for r in body["messagePublishResults"]]
    assert len(plain_first.split(":")) == 2 and all(len(i.split(":")) == 2 for i in plain_last)

    # maxMessages counts entries: a batch is delivered whole
    assert ids_of(await client.receive(consumer, 1, 5000)) == [plain_first]
    assert ids_of(await client.receive(consumer, 1, 5000)) == batch
    assert ids_of(await client.receive_until(consumer, 2)) == plain_last

    await client.ack(consumer, [plain_first, *batch, *plain_last])
    assert await backlog(client) == 0
    assert (await client.internal_stats(TOPIC))["numberOfEntries"] == 4


# ---------------------------------------------------------------------- acks


@pytest.mark.parametrize("sub_type", ["Exclusive", "Shared"])
@pytest.mark.parametrize("redelivery", ["nack", "redeliverUnacknowledged", "close"])
async def test_after_acking_some_messages_of_a_batch_a_redelivery_brings_only_the_others(
    live_broker: LiveBroker, sub_type: str, redelivery: str
) -> None:
    client = await live_broker()
    options = {"subscriptionType": sub_type, "negativeAckRedeliveryDelayMillis": 0}
    consumer = await client.subscribe(TOPIC, SUB, **options)
    ids = await produce_batch(client, 5)
    await receive_all(client, consumer, 5)

    await client.ack(consumer, [ids[0], ids[2], ids[4]])
    assert await backlog(client) == 1, "the entry waits for its last message"
    if redelivery == "nack":
        # every unacked message of the batch: the entry is redelivered once
        assert (await post(client, consumer, "nack", messageIds=[ids[1], ids[3]]))[0] == 204
    elif redelivery == "redeliverUnacknowledged":
        assert (await post(client, consumer, "redeliverUnacknowledged"))[0] == 204
    else:
        status, _ = await client.request("DELETE", f"/consumers/{consumer}")
        assert status == 204
        consumer = await client.subscribe(TOPIC, SUB, **options)

    again = await receive_all(client, consumer, 2)
    assert ids_of(again) == [ids[1], ids[3]]
    assert [unb64(m["payload"]) for m in again] == [b"b1", b"b3"]
    assert {m["redeliveryCount"] for m in again} == {1}
    await nothing_more(client, consumer)

    await client.ack(consumer, [ids[1], ids[3]])
    assert await backlog(client) == 0
    assert (await client.internal_stats(TOPIC))["cursors"][SUB]["markDeletePosition"] == (
        entry_of(ids[0])
    )


async def test_nacking_a_message_of_a_batch_twice_redelivers_the_entry_once(
    live_broker: LiveBroker,
) -> None:
    client = await live_broker()
    consumer = await client.subscribe(
        TOPIC, SUB, subscriptionType="Shared", negativeAckRedeliveryDelayMillis=0
    )
    ids = await produce_batch(client, 3)
    await receive_all(client, consumer, 3)
    status, body = await post(client, consumer, "nack", messageIds=[ids[0], ids[0], ids[2]])
    assert status == 204, body
    again = await receive_all(client, consumer, 3)
    assert ids_of(again) == ids
    assert {m["redeliveryCount"] for m in again} == {1}
    await nothing_more(client, consumer)


async def test_the_last_ack_of_a_batch_acknowledges_its_entry_durably(
    tmp_path: pathlib.Path,
) -> None:
    async with in_process_broker(tmp_path) as client:
        consumer = await client.subscribe(TOPIC, SUB)
        ids = await produce_batch(client, 3)
        await receive_all(client, consumer, 3)
        for acked, message_id in enumerate(ids, 1):
            await client.ack(consumer, [message_id])
            assert await backlog(client) == (0 if acked == len(ids) else 1)
        internal = await client.internal_stats(TOPIC)
        assert internal["cursors"][SUB]["markDeletePosition"] == entry_of(ids[0])

    async with in_process_broker(tmp_path) as client:
        assert await backlog(client) == 0
        consumer = await client.subscribe(TOPIC, SUB)
        (later,) = await client.produce(TOPIC, ["after the restart"])
        assert ids_of(await client.receive_until(consumer, 1)) == [later]
        await nothing_more(client, consumer)


async def test_acks_of_part_of_a_batch_are_durable_so_a_restart_redelivers_only_the_rest(
    tmp_path: pathlib.Path,
) -> None:
    async with in_process_broker(tmp_path) as client:
        consumer = await client.subscribe(TOPIC, SUB)
        ids = await produce_batch(client, 3)
        await receive_all(client, consumer, 3)
        await client.ack(consumer, ids[:2])

    async with in_process_broker(tmp_path) as client:
        consumer = await client.subscribe(TOPIC, SUB)
        again = await client.receive_until(consumer, 1)
        assert ids_of(again) == [ids[2]], "the cursor kept the batch's ack set"
        await nothing_more(client, consumer)
        await client.ack(consumer, [ids[2]])
        assert await backlog(client) == 0


async def test_a_namespace_unload_keeps_acks_of_part_of_a_batch(
    live_broker: LiveBroker,
) -> None:
    client = await live_broker()
    consumer = await client.subscribe(TOPIC, SUB)
    ids = await produce_batch(client, 3)
    await receive_all(client, consumer, 3)
    await client.ack(consumer, [ids[1]])
    status, _ = await client.request("POST", f"/admin/v2/namespaces/{TENANT_NS}/unload")
    assert status == 204
    consumer = await client.subscribe(TOPIC, SUB)
    again = await client.receive_until(consumer, 2)
    assert ids_of(again) == [ids[0], ids[2]]
    assert {m["redeliveryCount"] for m in again} == {0}, "counts live in memory"


@pytest.mark.parametrize("sub_type", ["Exclusive", "Failover"])
async def test_cumulative_ack_of_a_batch_message_acks_it_its_predecessors_and_earlier_entries(
    live_broker: LiveBroker, sub_type: str
) -> None:
    client = await live_broker()
    consumer = await client.subscribe(TOPIC, SUB, subscriptionType=sub_type)
    first = await produce_batch(client, 3)
    second = await produce_batch(client, 3)
    (plain,) = await client.produce(TOPIC, ["plain"])
    await receive_all(client, consumer, 7)

    await client.ack(consumer, [second[1]], "Cumulative")
    internal = await client.internal_stats(TOPIC)
    assert internal["cursors"][SUB]["markDeletePosition"] == entry_of(first[0])
    assert await backlog(client) == 2, "the second batch (one message left) and the plain entry"
    assert (await post(client, consumer, "redeliverUnacknowledged"))[0] == 204
    again = await receive_all(client, consumer, 2)
    assert ids_of(again) == [second[2], plain]

    await client.ack(consumer, [second[2]], "Cumulative")
    assert await backlog(client) == 1
    await client.ack(consumer, [plain], "Cumulative")
    assert await backlog(client) == 0


@pytest.mark.parametrize("sub_type", ["Shared", "Key_Shared"])
async def test_cumulative_ack_of_a_batch_message_on_shared_types_is_400_and_acks_nothing(
    live_broker: LiveBroker, sub_type: str
) -> None:
    client = await live_broker()
    consumer = await client.subscribe(TOPIC, SUB, subscriptionType=sub_type)
    ids = await produce_batch(client, 3)
    await receive_all(client, consumer, 3)
    status, body = await post(client, consumer, "ack", messageIds=[ids[2]], ackType="Cumulative")
    assert (status, body["code"]) == (400, "invalid-request")
    assert "cumulative" in body["reason"].lower()
    assert await backlog(client) == 1
    assert (await post(client, consumer, "redeliverUnacknowledged"))[0] == 204
    assert ids_of(await receive_all(client, consumer, 3)) == ids


async def test_key_shared_sends_each_batch_whole_to_the_consumer_of_its_key(
    live_broker: LiveBroker,
) -> None:
    client = await live_broker()
    consumers = [
        await client.subscribe(TOPIC, SUB, subscriptionType="Key_Shared", consumerName=f"c{n}")
        for n in range(2)
    ]
    keys = [f"key-{n}" for n in range(8)]
    sent: dict[str, list[str]] = {key: [] for key in keys}
    for round_ in range(3):
        for key in keys:
            sent[key] += await produce_batch(
                client, [message(f"{key}/{round_}/{i}", key=key) for i in range(4)]
            )
    total = sum(map(len, sent.values()))

    owner: dict[str, str] = {}
    seen: dict[str, list[str]] = {key: [] for key in keys}

    async def all_received() -> bool:
        for consumer in consumers:
            got = await client.receive(consumer, 100, 50)
            for m in got:
                assert owner.setdefault(m["key"], consumer) == consumer, "a key moved"
                seen[m["key"]].append(m["messageId"])
            if got:
                await client.ack(consumer, ids_of(got))
        return sum(map(len, seen.values())) >= total

    await eventually_async(all_received, lambda: f"{total} messages (got {seen})", 20)
    assert seen == sent, "every message, each key's in order, each batch whole"
    assert len(set(owner.values())) == 2, "the keys are spread over both consumers"
    assert await backlog(client) == 0


async def test_key_shared_routes_a_batch_by_the_key_of_its_first_message(
    live_broker: LiveBroker,
) -> None:
    client = await live_broker()
    consumers = [
        await client.subscribe(TOPIC, SUB, subscriptionType="Key_Shared", consumerName=f"c{n}")
        for n in range(2)
    ]
    owner: dict[str, str] = {}  # message id -> consumer

    async def deliver_all(count: int) -> None:
        wanted = len(owner) + count

        async def all_delivered() -> bool:
            for consumer in consumers:
                got = await client.receive(consumer, 100, 50)
                owner.update((m["messageId"], consumer) for m in got)
                if got:
                    await client.ack(consumer, ids_of(got))
            return len(owner) >= wanted

        await eventually_async(all_delivered, lambda: f"{wanted} messages (got {owner})", 20)

    keys = [f"k{n}" for n in range(16)]
    status, body = await client.request(
        "POST",
        f"/topics/persistent/{TOPIC}",
        json={"messages": [message(key, key=key) for key in keys]},
    )
    assert status == 200, body
    await deliver_all(len(keys))
    key_owner = {
        key: owner[result["messageId"]]
        for key, result in zip(keys, body["messagePublishResults"], strict=True)
    }
    a = keys[0]
    b = next(key for key in keys if key_owner[key] != key_owner[a])

    a_first = await produce_batch(client, [message("1", key=a), message("2", key=b)])
    b_first = await produce_batch(client, [message("3", key=b), message("4", key=a)])
    await deliver_all(4)
    assert {owner[i] for i in a_first} == {key_owner[a]}
    assert {owner[i] for i in b_first} == {key_owner[b]}


# ---------------------------------------------------------------------- bad ids


@pytest.mark.parametrize("action", ["ack", "nack"])
@pytest.mark.parametrize("suffix", ["x", "-1", "", " 1", "1:0"])
async def test_a_malformed_batch_index_is_400_and_changes_nothing(
    live_broker: LiveBroker, action: str, suffix: str
) -> None:
    client = await live_broker()
    consumer = await client.subscribe(
        TOPIC, SUB, subscriptionType="Shared", negativeAckRedeliveryDelayMillis=0
    )
    ids = await produce_batch(client, 3)
    await receive_all(client, consumer, 3)
    bad = f"{entry_of(ids[0])}:{suffix}"
    status, body = await post(client, consumer, action, messageIds=[ids[0], bad])
    assert (status, body["code"]) == (400, "invalid-request"), body
    await nothing_more(client, consumer)  # a nack did not redeliver
    await client.ack(consumer, ids[1:])
    assert await backlog(client) == 1, "the ack before the bad id was not applied"


async def test_a_batch_index_beyond_the_batch_is_ignored_as_an_unknown_id(
    live_broker: LiveBroker,
) -> None:
    client = await live_broker()
    consumer = await client.subscribe(
        TOPIC, SUB, subscriptionType="Shared", negativeAckRedeliveryDelayMillis=0
    )
    ids = await produce_batch(client, 3)
    await receive_all(client, consumer, 3)
    beyond = f"{entry_of(ids[0])}:3"
    assert (await post(client, consumer, "ack", messageIds=[beyond]))[0] == 204
    assert (await post(client, consumer, "nack", messageIds=[beyond]))[0] == 204
    await nothing_more(client, consumer)  # the nack redelivered nothing
    assert await backlog(client) == 1
    await client.ack(consumer, ids[:2])
    assert await backlog(client) == 1, "acks of 0..1 leave message 2: index 3 acked nothing"
    await client.ack(consumer, [ids[2]])
    assert await backlog(client) == 0


async def test_a_batch_index_on_an_unbatched_entry_names_the_entry_only_when_it_is_zero(
    live_broker: LiveBroker,
) -> None:
    client = await live_broker()
    consumer = await client.subscribe(TOPIC, SUB, subscriptionType="Shared")
    ids = await client.produce(TOPIC, ["plain"])
    await receive_all(client, consumer, 1)
    await client.ack(consumer, [f"{ids[0]}:1"])
    assert await backlog(client) == 1
    await client.ack(consumer, [f"{ids[0]}:0"])
    assert await backlog(client) == 0


async def test_batch_indexes_of_a_batch_not_yet_received_are_unknown_ids(
    live_broker: LiveBroker,
) -> None:
    client = await live_broker()
    consumer = await client.subscribe(
        TOPIC, SUB, subscriptionType="Shared", negativeAckRedeliveryDelayMillis=0
    )
    ids = await produce_batch(client, 3)

    # dispatched into the receiver queue, never polled: its size is not known yet
    async def dispatched() -> bool:
        return bool((await client.stats(TOPIC))["msgOutCounter"])

    await eventually_async(dispatched)
    assert (await post(client, consumer, "ack", messageIds=[ids[0]]))[0] == 204
    assert await backlog(client) == 1, "acking message 0 by its id did not ack the whole batch"
    assert (await post(client, consumer, "nack", messageIds=[ids[0]]))[0] == 204
    got = await receive_all(client, consumer, 3)
    assert ids_of(got) == ids
    assert {m["redeliveryCount"] for m in got} == {0}


# ---------------------------------------------------------------------- bad produce


async def topic_exists(client: Client) -> bool:
    status, body = await client.request("GET", f"/admin/v2/persistent/{TENANT_NS}")
    assert status == 200, body
    return f"persistent://{TOPIC}" in body


@pytest.mark.parametrize("batch", ["yes", "true", 1, 0, None, [], {}])
async def test_a_batch_field_that_is_not_a_boolean_is_400_and_stores_nothing(
    live_broker: LiveBroker, batch: Any
) -> None:
    client = await live_broker()
    status, body = await produce(client, [message("never stored")], batch=batch)
    assert (status, body["code"]) == (400, "invalid-request"), body
    assert "batch" in body["reason"]
    assert not await topic_exists(client)


async def test_a_batch_over_max_message_size_is_413_and_stores_nothing(
    live_broker: LiveBroker,
) -> None:
    client = await live_broker(maxMessageSize=1024)
    await client.produce(TOPIC, ["seed"])
    each_fits = [message("x" * 400) for _ in range(3)]  # 1200 bytes together
    status, body = await produce(client, each_fits)
    assert (status, body["code"]) == (413, "too-large"), body
    one_too_large = [message("x"), message("x" * 1025)]
    status, body = await produce(client, one_too_large)
    assert (status, body["code"]) == (413, "too-large"), body
    internal = await client.internal_stats(TOPIC)
    assert (internal["numberOfEntries"], internal["entriesAddedCounter"]) == (1, 1)
    assert (await client.stats(TOPIC))["msgInCounter"] == 1

    ids = await produce_batch(client, [message("x" * 300) for _ in range(3)])
    assert len(ids) == 3 and len({entry_of(i) for i in ids}) == 1
