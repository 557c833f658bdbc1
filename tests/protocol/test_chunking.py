"""Chunked messages (PIP-37) with the official client: a producer with chunking on splits a
message larger than the broker's ``maxMessageSize`` (sent in CONNECTED) into chunks, each
stored as an entry of its own (so the cache designs see chunks, as in Pulsar); the
consumer's client puts them back together. The broker keeps no chunk state of its own."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pulsar
import pytest

from tests.harness import ServedBroker, eventually, new_topic, short

pytestmark = pytest.mark.slow

#: the broker's maxMessageSize here: small, so a chunked message stays small too
MAX_MESSAGE_SIZE = 64 * 1024


@pytest.fixture(scope="module")
def broker_conf() -> dict[str, Any]:
    return {"maxMessageSize": str(MAX_MESSAGE_SIZE)}


def test_a_message_larger_than_the_limit_arrives_whole_and_is_stored_as_chunks(
    broker: ServedBroker, pulsar_client: Callable[..., Any]
) -> None:
    topic = new_topic("chunked")
    client = pulsar_client(broker.service_url)
    consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
    producer = client.create_producer(topic, chunking_enabled=True, batching_enabled=False)
    big = bytes(range(256)) * (3 * MAX_MESSAGE_SIZE // 256)  # three chunks, or four
    sent = [big, b"small", big[::-1]]
    for payload in sent:
        producer.send(payload)
    got = []
    for _ in sent:
        message = consumer.receive(20_000)
        got.append(message.data())
        consumer.acknowledge(message)
    assert got == sent
    path = short(topic)
    internal = broker.ok("GET", f"/admin/v2/persistent/{path}/internalStats")
    # each big message is several entries; the small one is one
    assert internal["numberOfEntries"] >= 2 * 3 + 1, internal

    def backlog() -> int:
        stats = broker.ok("GET", f"/admin/v2/persistent/{path}/stats")
        count: int = stats["subscriptions"]["s"]["msgBacklog"]
        return count

    # the client acknowledges a chunked message by every chunk's id (acks are grouped)
    eventually(lambda: backlog() == 0, "every chunk acknowledged")
