"""Poison entries already stored (written to the ledger directly, past every produce
check): HTTP and WebSocket consumers receive the good messages around them, every poll
answers 200, the WebSocket session keeps pushing, and the subscription goes on past
them (the dispatcher acknowledges an entry it cannot trust, as Pulsar's does with one
whose metadata it cannot read; a batch whose messages turn out not to decode, or a
ZLIB payload that does not inflate to its declared size, is acknowledged by the
session, as Pulsar's client discards a corrupt message)."""

from __future__ import annotations

import json
from typing import Any

import aiohttp
import pytest

from broker.dispatch.names import TopicName
from broker.dispatch.service import BrokerService
from broker.ledger.entry import check_entry, encode_message
from tests.harness import (
    Client,
    eventually_async,
    new_topic,
    persistent,
    unb64,
)
from tests.protocol.raw import (
    broken_batch_message,
    lying_batch,
    unparsable_metadata,
    zlib_bomb,
)

DEADLINE_S = 20.0
GOOD = [b"before", b"between", b"after the batch count of 0", b"after all"]


def good(payload: bytes) -> bytes:
    return encode_message(payload, 1_700_000_000_000, producer_name="good")


#: good messages with every kind of poison between them
STORED = [
    good(GOOD[0]),
    lying_batch(b"lie", 1, 2**31 - 1),
    good(GOOD[1]),
    unparsable_metadata(b"garbled"),
    lying_batch(b"lie", 2, 0),
    good(GOOD[2]),
    broken_batch_message(b"half", 3),
    # 8 MiB of zeros in 8 KiB that declares 8 bytes: inflated whole, it was delivered as
    # one message of 8 MiB (a 5 MiB entry inflated to 5 GiB)
    zlib_bomb(8, 8),
    good(GOOD[3]),
]


async def store_directly(service: BrokerService, topic: str) -> None:
    loaded = await service.get_topic(TopicName.parse(persistent(topic)), create=True)
    await loaded.ledger.add_entries(STORED)


async def drained(client: Client, topic: str, sub: str) -> None:
    """Wait until the subscription has nothing left: no backlog, nothing unacked."""

    async def probe() -> bool:
        stats = (await client.stats(topic))["subscriptions"][sub]
        return bool(stats["msgBacklog"] == 0 and stats["unackedMessages"] == 0)

    await eventually_async(probe, f"subscription {sub} to drain")


@pytest.mark.parametrize("sub_type", ["Exclusive", "Shared", "Key_Shared"])
async def test_an_http_consumer_receives_the_good_messages_around_poison_entries(
    broker_service: tuple[Client, BrokerService], sub_type: str
) -> None:
    client, service = broker_service
    topic = new_topic("poison-http")
    await store_directly(service, topic)
    options = {"subscriptionType": sub_type, "subscriptionInitialPosition": "Earliest"}

    first = await client.subscribe(topic, "s", **options)
    got = await client.receive_until(first, len(GOOD))  # every poll answers 200
    assert [unb64(m["payload"]) for m in got] == GOOD

    # a new consumer of the subscription (the first leaves without acking) gets them too
    status, _ = await client.request("DELETE", f"/consumers/{first}")
    assert status == 204
    second = await client.subscribe(topic, "s", **options)
    again = await client.receive_until(second, len(GOOD))
    assert [unb64(m["payload"]) for m in again] == GOOD
    await client.ack(second, [m["messageId"] for m in again])
    await drained(client, topic, "s")


async def test_a_websocket_consumer_keeps_pushing_the_good_messages_around_poison_entries(
    broker_service: tuple[Client, BrokerService],
) -> None:
    client, service = broker_service
    topic = new_topic("poison-ws")
    await store_directly(service, topic)
    url = client.base_url.replace("http://", "ws://", 1)
    path = f"/ws/v2/consumer/persistent/{topic}/s?subscriptionInitialPosition=Earliest"

    async with client.session.ws_connect(url + path) as ws:
        pushed = [await receive(ws) for _ in GOOD]
        assert [unb64(m["payload"]) for m in pushed] == GOOD
        for message in pushed:
            await ws.send_str(json.dumps({"messageId": message["messageId"]}))
        await drained(client, topic, "s")

        # the session is alive: what is produced next is pushed
        await client.produce(topic, ["later"])
        assert unb64((await receive(ws))["payload"]) == b"later"


async def receive(ws: aiohttp.ClientWebSocketResponse) -> dict[str, Any]:
    message = await ws.receive(timeout=DEADLINE_S)
    assert message.type == aiohttp.WSMsgType.TEXT, message
    return dict(json.loads(message.data))


async def test_what_http_and_websocket_producers_store_passes_the_produce_check(
    broker_service: tuple[Client, BrokerService],
) -> None:
    """The HTTP and WebSocket producers send fields, not metadata: the broker builds
    their entries, and the binary SEND's check (``check_entry``) finds nothing wrong
    with any of them, batches of many messages, keys and properties included."""
    client, service = broker_service
    topic = new_topic("poison-built")
    await client.produce(topic, ["plain", ""])
    status, body = await client.request(
        "POST",
        f"/topics/persistent/{topic}",
        json={
            "batch": True,
            "messages": [
                {"payload": "eA==", "key": f"k{i}", "properties": {"p": "v"}} for i in range(300)
            ]
            + [{"payload": ""}],
        },
    )
    assert status == 200, body
    url = client.base_url.replace("http://", "ws://", 1)
    path = f"/ws/v2/producer/persistent/{topic}?batchingEnabled=true&batchingMaxMessages=50"
    async with client.session.ws_connect(url + path) as ws:
        for index in range(120):
            await ws.send_str(json.dumps({"payload": "eQ==", "key": str(index % 3)}))
        answers = [await receive(ws) for _ in range(120)]
    assert all(answer["result"] == "ok" for answer in answers)

    loaded = await service.get_topic(TopicName.parse(persistent(topic)), create=False)
    ledger = loaded.ledger
    entries = await ledger.read_entries(ledger.first_position(), 1000, "")
    counts = [check_entry(stored.data) for stored in entries]
    assert sum(counts) == 2 + 301 + 120


async def test_a_reset_by_time_and_an_expiry_search_past_poison_entries(
    broker_service: tuple[Client, BrokerService],
) -> None:
    """Finding a position by publish time reads entries' metadata: one it cannot read
    counts as not published earlier (Pulsar's message finder), never a 500."""
    client, service = broker_service
    topic = new_topic("poison-seek")
    admin = f"/admin/v2/persistent/{topic}/subscription/s"
    await store_directly(service, topic)
    status, body = await client.request("PUT", admin, messageId="latest")
    assert status == 204, body
    # the good messages' publish time: the reset goes back to the first of them
    status, body = await client.request("POST", f"{admin}/resetcursor/1700000000000")
    assert status == 204, body
    consumer = await client.subscribe(topic, "s")
    got = await client.receive_until(consumer, len(GOOD))
    assert [unb64(m["payload"]) for m in got] == GOOD
    status, body = await client.request("POST", f"{admin}/expireMessages/1")
    assert status == 204, body


async def test_peeking_an_entry_whose_metadata_does_not_parse_says_so(
    broker_service: tuple[Client, BrokerService], caplog: pytest.LogCaptureFixture
) -> None:
    """Pulsar's admin answers an entry it cannot parse with a 500 carrying the parser's
    message; brokerlab answers the same status with ``{"reason", "code"}`` naming the
    entry, logs no traceback, and peeks the good entries around it as usual."""
    client, service = broker_service
    topic = new_topic("poison-peek")
    await store_directly(service, topic)
    peek = f"/admin/v2/persistent/{topic}/subscription/s/position"
    status, body = await client.request(
        "PUT", f"/admin/v2/persistent/{topic}/subscription/s", messageId="earliest"
    )
    assert status == 204, body
    status, body = await client.request("GET", f"{peek}/4")  # STORED[3]: unparsable
    assert status == 500, body
    assert body["code"] == "internal-error"
    assert "cannot be read" in body["reason"] and "metadata" in body["reason"]
    assert not [record for record in caplog.records if record.exc_info]
    status, body = await client.request("GET", f"{peek}/3")
    assert status == 200 and body == "between", body
