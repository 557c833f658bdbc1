"""The binary protocol and the HTTP API are two doors to the same topics: what the official
client produces, batched or not, is read over HTTP with the same payloads, keys,
properties and event times (ids ``L:E``, or ``L:E:I`` inside a batch); what is produced
over HTTP reaches the client the same way; and a batch is one entry, in the ledger and in
the entry cache, whichever door it came through."""

from __future__ import annotations

import base64
import threading
from typing import Any

import pulsar
import pytest

from tests.harness import ServedBroker, eventually, new_topic_and_path

pytestmark = pytest.mark.slow

#: messages per batch of the batching producer (a full batch is sent at once)
BATCH = 4
RECEIVE_MS = 20_000

Sent = tuple[bytes, str | None, dict[str, str], int]
"""payload, key (None: no key), properties, event time (0: not set)"""

#: payloads of every kind of byte (an empty one too), with and without keys, properties
#: and event times (no empty key: the client sends a key of "" as no key at all)
MESSAGES: list[Sent] = [
    (b"plain text", None, {}, 0),
    (b"\x00\xff\xfebinary\x80", "key-a", {"kind": "binary"}, 0),
    (b"", "key-b", {}, 1_700_000_000_123),
    ("h\u00e9llo w\u00f6rld".encode(), None, {"a": "1", "b": "two words"}, 0),
    (b"x" * 3000, "key-a", {"big": "yes"}, 1_700_000_000_456),
    (b"{}", "k\u00e9y \u2603", {"unicode key": "yes"}, 0),
    (b"last of the second batch", "key-c", {}, 0),
    (b"\n", None, {"": "empty name"}, 1),
]


def client_produce(client: pulsar.Client, topic: str, batching: bool) -> list[Any]:
    """MESSAGES from the official client; the ids its receipts give, in order."""
    producer = client.create_producer(
        topic,
        batching_enabled=batching,
        batching_max_messages=BATCH,
        batching_max_publish_delay_ms=600_000,  # batches are full ones, on every run
    )
    lock = threading.Lock()
    ids: dict[int, Any] = {}

    def receipt(index: int) -> Any:
        def done(result: pulsar.Result, message_id: Any) -> None:
            assert result == pulsar.Result.Ok
            with lock:
                ids[index] = message_id

        return done

    for index, (payload, key, properties, event_time) in enumerate(MESSAGES):
        options: dict[str, Any] = {"properties": properties}
        if key is not None:
            options["partition_key"] = key
        if event_time:
            options["event_timestamp"] = event_time
        producer.send_async(payload, receipt(index), **options)
    producer.flush()
    eventually(lambda: len(ids) == len(MESSAGES), "every receipt")
    producer.close()
    return [ids[index] for index in range(len(MESSAGES))]


def http_produce(broker: ServedBroker, path: str, batch: bool) -> list[str]:
    """MESSAGES over HTTP (one request; one batch with ``batch``); the ids it answers."""
    messages = []
    for payload, key, properties, event_time in MESSAGES:
        message: dict[str, Any] = {"payload": base64.b64encode(payload).decode()}
        if key is not None:
            message["key"] = key
        if properties:
            message["properties"] = properties
        if event_time:
            message["eventTime"] = event_time
        messages.append(message)
    answer = broker.ok("POST", f"/topics/{path}", {"messages": messages, "batch": batch})
    results = answer["messagePublishResults"]
    assert [result["errorCode"] for result in results] == [0] * len(MESSAGES)
    return [result["messageId"] for result in results]


def http_id(message_id: Any) -> str:
    """A client's message id as the HTTP API writes it."""
    base = f"{message_id.ledger_id()}:{message_id.entry_id()}"
    index = message_id.batch_index()
    return base if index < 0 else f"{base}:{index}"


def http_consume(broker: ServedBroker, path: str, subscription: str, count: int) -> list[Any]:
    """``count`` messages from a new HTTP consumer reading from the earliest message."""
    consumer = broker.ok(
        "POST",
        f"/consumers/{path}/{subscription}",
        {"subscriptionType": "Exclusive", "subscriptionInitialPosition": "Earliest"},
    )["consumerId"]
    got: list[Any] = []

    def poll() -> bool:
        answer = broker.ok("GET", f"/consumers/{consumer}/messages?timeoutMs=1000")
        got.extend(answer["messages"])
        return len(got) >= count

    eventually(poll, f"{count} messages over HTTP")
    broker.ok("DELETE", f"/consumers/{consumer}")
    return got


def entries_of(ids: list[str]) -> set[str]:
    return {":".join(message_id.split(":")[:2]) for message_id in ids}


@pytest.mark.parametrize("batching", [False, True], ids=["unbatched", "batched"])
def test_what_the_client_sends_is_read_over_http_as_sent(
    broker: ServedBroker, client: pulsar.Client, batching: bool
) -> None:
    topic, path = new_topic_and_path("client-to-http")
    ids = [http_id(message_id) for message_id in client_produce(client, topic, batching)]
    assert all(message_id.count(":") == (2 if batching else 1) for message_id in ids)
    assert len(entries_of(ids)) == (len(MESSAGES) // BATCH if batching else len(MESSAGES))

    got = http_consume(broker, path, "http", len(MESSAGES))
    assert [message["messageId"] for message in got] == ids
    read = [
        (
            base64.b64decode(message["payload"]),
            message.get("key"),
            message["properties"],
            message["eventTime"],
        )
        for message in got
    ]
    assert read == MESSAGES


@pytest.mark.parametrize("batch", [False, True], ids=["unbatched", "batched"])
def test_what_is_produced_over_http_reaches_the_client_as_sent(
    broker: ServedBroker, client: pulsar.Client, batch: bool
) -> None:
    topic, path = new_topic_and_path("http-to-client")
    consumer = client.subscribe(topic, "binary", initial_position=pulsar.InitialPosition.Earliest)
    ids = http_produce(broker, path, batch)
    assert len(entries_of(ids)) == (1 if batch else len(MESSAGES))

    got = [consumer.receive(RECEIVE_MS) for _ in MESSAGES]
    consumer.close()
    assert [http_id(message.message_id()) for message in got] == ids
    read = [
        (message.data(), message.partition_key(), message.properties(), message.event_timestamp())
        for message in got
    ]
    # the client shows a message without a key as the empty key
    assert read == [(payload, key or "", props, time) for payload, key, props, time in MESSAGES]


def test_a_batch_is_one_entry_in_the_ledger_and_in_the_cache(
    broker: ServedBroker, client: pulsar.Client
) -> None:
    topic, path = new_topic_and_path("entries")
    inserted = broker.ok("GET", "/admin/v2/broker-stats/cache")["inserted"]

    from_client = client_produce(client, topic, batching=True)
    from_http_batch = http_produce(broker, path, batch=True)
    from_http = http_produce(broker, path, batch=False)

    entries = (
        entries_of([http_id(message_id) for message_id in from_client])
        | entries_of(from_http_batch)
        | entries_of(from_http)
    )
    batches = len(MESSAGES) // BATCH + 1  # the client's full batches and the HTTP batch
    assert len(entries) == batches + len(MESSAGES)
    cache = broker.ok("GET", "/admin/v2/broker-stats/cache")
    assert cache["inserted"] - inserted == len(entries)
    internal = broker.ok("GET", f"/admin/v2/{path}/internalStats")
    assert internal["numberOfEntries"] == internal["entriesAddedCounter"] == len(entries)
    stats = broker.ok("GET", f"/admin/v2/{path}/stats")
    assert stats["msgInCounter"] == 3 * len(MESSAGES)  # messages, not entries

    # and both doors read all of it back, message by message
    assert len(http_consume(broker, path, "http", 3 * len(MESSAGES))) == 3 * len(MESSAGES)
