"""Delayed delivery with the official client against ``brokerlab serve``: messages sent
with ``deliver_after`` / ``deliver_at`` are not delivered before their time on Shared
and Key_Shared, come at once on Exclusive, survive their consumer reconnecting, and a
deliver-at beyond ``delayedDeliveryMaxDelayInMillis`` is refused with NotAllowedError.

No test sleeps: each receives with a timeout and checks, with the machine's one wall
clock (client and broker share it), that nothing delayed arrived before its deliver-at
time. The broker runs with ``isDelayedDeliveryDeliverAtTimeStrict=true`` (never early)
and a 100 ms tick, so the waits stay short.
"""

from __future__ import annotations

import struct
import time
from datetime import timedelta
from typing import Any

import pulsar
import pytest
from crc32c import crc32c

from broker.pulsar_api import MessageMetadata, ServerError, Type
from tests.harness import ServedBroker, new_topic, persistent, short
from tests.protocol.test_bad_frames import RawConnection, frame, producer, send, send_frame

pytestmark = pytest.mark.slow

MAX_DELAY_MS = 3_600_000
#: a receive's timeout: a deadline, never a wait that the test's outcome depends on
RECEIVE_MS = 20_000


def now_ms() -> int:
    return time.time_ns() // 1_000_000


@pytest.fixture(scope="module")
def broker_conf() -> dict[str, Any]:
    return {
        "isDelayedDeliveryDeliverAtTimeStrict": True,
        "delayedDeliveryTickTimeMillis": 100,
        "delayedDeliveryMaxDelayInMillis": MAX_DELAY_MS,
    }


def received_at(consumer: pulsar.Consumer, count: int) -> dict[bytes, int]:
    """The next ``count`` messages, acknowledged, each with the wall time it came."""
    got: dict[bytes, int] = {}
    for _ in range(count):
        message = consumer.receive(RECEIVE_MS)
        got[message.data()] = now_ms()
        consumer.acknowledge(message)
    return got


@pytest.mark.parametrize("sub_type", [pulsar.ConsumerType.Shared, pulsar.ConsumerType.KeyShared])
@pytest.mark.parametrize("batching", [False, True])
def test_delayed_messages_come_not_before_their_time(
    client: pulsar.Client, sub_type: Any, batching: bool
) -> None:
    topic = new_topic("delayed")
    consumer = client.subscribe(topic, "sub", consumer_type=sub_type)
    producer = client.create_producer(
        topic, batching_enabled=batching, batching_max_publish_delay_ms=5
    )
    before = now_ms()
    # half a second apart (five ticks): the later one, sent first, comes second
    due = {b"after-1s": before + 1000, b"at-0.5s": before + 500}
    producer.send(b"after-1s", partition_key="a", deliver_after=timedelta(milliseconds=1000))
    producer.send(b"at-0.5s", partition_key="b", deliver_at=due[b"at-0.5s"])
    producer.send(b"now", partition_key="c")
    got = received_at(consumer, 3)
    # the undelayed message overtook both, and neither came before its time
    assert list(got) == [b"now", b"at-0.5s", b"after-1s"]
    for payload, deliver_at in due.items():
        assert got[payload] >= deliver_at, f"{payload!r} came {deliver_at - got[payload]} ms early"


def test_exclusive_delivers_at_once(client: pulsar.Client) -> None:
    topic = new_topic("delayed-exclusive")
    consumer = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Exclusive)
    producer = client.create_producer(topic)
    before = now_ms()
    producer.send(b"in-an-hour", deliver_after=timedelta(minutes=59))
    got = received_at(consumer, 1)
    assert got[b"in-an-hour"] < before + 59 * 60_000


def test_deliver_at_in_the_past_comes_at_once(client: pulsar.Client) -> None:
    topic = new_topic("delayed-past")
    consumer = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared)
    producer = client.create_producer(topic)
    producer.send(b"yesterday", deliver_at=now_ms() - 86_400_000)
    assert consumer.receive(RECEIVE_MS).data() == b"yesterday"


def test_delayed_messages_survive_a_consumer_reconnect(
    broker: ServedBroker, client: pulsar.Client
) -> None:
    topic = new_topic("delayed-reconnect")
    first = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared)
    producer = client.create_producer(topic)
    deliver_at = now_ms() + 1000
    producer.send(b"held", deliver_at=deliver_at)
    first.close()
    second = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared)
    got = received_at(second, 1)
    assert got[b"held"] >= deliver_at
    path = f"/admin/v2/persistent/{short(topic)}/stats"
    assert broker.ok("GET", path)["subscriptions"]["sub"]["msgDelayed"] == 0


def delayed_entry(payload: bytes, sequence_id: int, deliver_at: int, publish_time: int) -> bytes:
    metadata = MessageMetadata(
        producer_name="raw",
        sequence_id=sequence_id,
        publish_time=publish_time,
        deliver_at_time=deliver_at,
    ).SerializeToString()
    size = struct.pack(">I", len(metadata))
    return struct.pack(">HI", 0x0E01, crc32c(size + metadata + payload)) + size + metadata + payload


def test_a_deliver_at_beyond_the_max_delay_is_refused_and_not_stored(
    broker: ServedBroker, raw: RawConnection
) -> None:
    topic = persistent(new_topic("delayed-too-far"))
    raw.handshake()
    raw.write(frame(producer(topic, 1, 1)))
    raw.expect(Type.PRODUCER_SUCCESS)
    published = now_ms()
    too_far = delayed_entry(b"too-far", 0, published + MAX_DELAY_MS + 1, published)
    raw.write(send_frame(send(1, 0), too_far))
    error = raw.expect(Type.SEND_ERROR).send_error
    assert (error.sequence_id, error.error) == (0, ServerError.NotAllowedError)
    assert error.message == f"Exceeds max allowed delivery delay of {MAX_DELAY_MS} milliseconds"
    # the producer goes on: a message at the limit is taken
    at_limit = delayed_entry(b"at-limit", 1, published + MAX_DELAY_MS, published)
    raw.write(send_frame(send(1, 1), at_limit))
    assert raw.expect(Type.SEND_RECEIPT).send_receipt.sequence_id == 1
    path = f"/admin/v2/persistent/{short(topic)}/internalStats"
    assert broker.ok("GET", path)["numberOfEntries"] == 1
