"""An HTTP poll's answer holds a bounded amount of payload, however much its entries
inflate: the receiver queue bounds the bytes stored (maxUnwrittenBytesPerConsumer), but
a ZLIB entry of a few KiB may inflate to maxMessageSize, so one poll of 1,000 of them was
gigabytes (40 such entries sent as 200 KiB made one answer of 267 MiB, the broker's RSS
+539 MiB). What a poll does not answer stays at the head of the queue for the next."""

from __future__ import annotations

import time
import zlib
from collections.abc import AsyncIterator

import pytest

from broker.dispatch.names import TopicName
from broker.dispatch.service import BrokerService
from broker.http.app_state import NODE
from broker.pulsar_api import COMPRESSION_ZLIB, MessageMetadata
from tests.harness import Client, make_settings, new_topic, persistent, served, unb64, url_of
from tests.protocol.raw import framed

MIB = 1 << 20
#: maxMessageSize and maxUnwrittenBytesPerConsumer here: a poll answers at most about
#: this much payload past its first entry
BOUND = MIB
ENTRIES = 12


def inflating(index: int) -> bytes:
    """An entry of a few KiB whose payload inflates to BOUND bytes (its index first)."""
    payload = index.to_bytes(4, "big") + bytes(BOUND - 4)
    metadata = MessageMetadata(
        producer_name="zlib",
        sequence_id=index,
        publish_time=int(time.time() * 1000),
        compression=COMPRESSION_ZLIB,
        uncompressed_size=BOUND,
    )
    return framed(metadata.SerializeToString(), zlib.compress(payload))


@pytest.fixture
async def broker() -> AsyncIterator[tuple[Client, BrokerService]]:
    settings = make_settings(None, maxMessageSize=BOUND, maxUnwrittenBytesPerConsumer=BOUND)
    runner = await served(settings)
    client = Client(url_of(runner))
    service = runner.app[NODE].service
    assert service is not None
    try:
        yield client, service
    finally:
        await client.close()
        await runner.cleanup()


async def test_a_poll_answers_a_bounded_payload_and_the_next_polls_the_rest(
    broker: tuple[Client, BrokerService],
) -> None:
    client, service = broker
    topic = new_topic("inflating")
    consumer = await client.subscribe(topic, "s", subscriptionType="Exclusive")
    loaded = await service.get_topic(TopicName.parse(persistent(topic)), create=False)
    await loaded.ledger.add_entries([inflating(i) for i in range(ENTRIES)])
    received: list[int] = []
    polls = 0
    while len(received) < ENTRIES and polls < 5 * ENTRIES:
        status, body = await client.request(
            "GET", f"/consumers/{consumer}/messages?maxMessages=1000&timeoutMs=2000"
        )
        assert status == 200, body
        payloads = [unb64(message["payload"]) for message in body["messages"]]
        assert sum(len(p) for p in payloads) <= 2 * BOUND, len(payloads)
        received += [int.from_bytes(p[:4], "big") for p in payloads]
        polls += 1
        if body["messages"]:
            await client.ack(consumer, [message["messageId"] for message in body["messages"]])
    assert received == list(range(ENTRIES))  # every one once, in order


async def test_what_a_poll_gave_back_goes_to_the_next_consumer_when_its_holder_closes(
    broker: tuple[Client, BrokerService],
) -> None:
    """The entries a bounded poll left in the queue are still the consumer's unacked
    ones: when it closes, they are redelivered with the answered ones, none lost."""
    client, service = broker
    topic = new_topic("inflating")
    first = await client.subscribe(topic, "s", subscriptionType="Shared")
    loaded = await service.get_topic(TopicName.parse(persistent(topic)), create=False)
    await loaded.ledger.add_entries([inflating(i) for i in range(ENTRIES)])
    status, body = await client.request(
        "GET", f"/consumers/{first}/messages?maxMessages=1000&timeoutMs=2000"
    )
    assert status == 200 and 0 < len(body["messages"]) < ENTRIES, body
    assert (await client.request("DELETE", f"/consumers/{first}"))[0] == 204

    second = await client.subscribe(topic, "s", subscriptionType="Shared")
    received: set[int] = set()
    polls = 0
    while len(received) < ENTRIES and polls < 5 * ENTRIES:
        status, body = await client.request(
            "GET", f"/consumers/{second}/messages?maxMessages=1000&timeoutMs=500"
        )
        assert status == 200, body
        received |= {int.from_bytes(unb64(m["payload"])[:4], "big") for m in body["messages"]}
        polls += 1
        if body["messages"]:
            await client.ack(second, [message["messageId"] for message in body["messages"]])
    assert received == set(range(ENTRIES))
