"""The drain's count of distinct messages (loadgen.deliveries): a message counts once per
subscription however often it comes, so a repeat (a restarted broker's redelivery with
redelivery count 0) cannot stand in for a message the broker lost."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pybase64
import pytest

from loadgen.deliveries import ID_BYTES, ID_PROPERTY, Deliveries
from loadgen.http_driver import ConsumerWorker, ProducerWorker
from loadgen.run import Run
from loadgen.runner import drain_results
from loadgen.scenario import Scenario


def test_a_message_counts_once_per_subscription_however_often_it_comes() -> None:
    deliveries = Deliveries(subscriptions=2, producers=2)
    slot = deliveries.producer("p-0-0")
    assert deliveries.producer("p-0-0") == slot and deliveries.slot_of("p-9") is None
    first = deliveries.issue(slot, 3)
    assert (first, deliveries.issue(slot)) == (0, 3)
    for sequence in range(3):
        deliveries.published(slot, sequence)
    deliveries.published(slot, 0)  # acknowledged twice (a resend): one message
    assert deliveries.published_count == 3 and deliveries.missing() == 6

    assert deliveries.delivered(slot, 0, 0)
    assert not deliveries.delivered(slot, 0, 0)  # a repeat
    assert deliveries.delivered(slot, 0, 1)  # the same message, the other subscription
    assert (deliveries.distinct, deliveries.missing()) == (2, 4)
    # delivered before its publish is acknowledged: owed, and counted once acknowledged
    assert deliveries.delivered(slot, 3, 0) and deliveries.distinct == 2
    deliveries.published(slot, 3)
    assert (deliveries.published_count, deliveries.distinct, deliveries.missing()) == (4, 3, 5)

    # identities pack slot and sequence; one this run never gave counts nothing
    other = deliveries.producer("p-0-1")
    assert deliveries.identity(slot, 1) == 2 and deliveries.identity(other, 0) == 1
    with pytest.raises(ValueError, match="2 producers"):
        deliveries.producer("p-0-2")
    for value in ("1", "9", "-2", "x", "", None):  # p-0-1 has sent nothing yet
        assert not deliveries.delivered_property(value, 1), value
    assert deliveries.delivered_property(str(deliveries.identity(slot, 1)), 1)
    assert deliveries.distinct == 4
    # a sequence past the first bytes grows the bitsets
    far = deliveries.issue(slot, 10_000) + 9_999
    deliveries.published(slot, far)
    assert deliveries.delivered_identity(deliveries.identity(slot, far), 1)
    assert deliveries.missing() == 5


class StoringClient:
    """The HTTP produce route, as far as a producer sees it: stores what it is sent
    (every message of a request, unless told which to refuse)."""

    def __init__(self) -> None:
        self.stored: list[dict[str, Any]] = []
        self.refuse: set[int] = set()

    async def produce_each(self, topic: str, body: bytes) -> list[bool]:
        messages = orjson.loads(body)["messages"]
        results = [index not in self.refuse for index in range(len(messages))]
        self.stored += [m for m, ok in zip(messages, results, strict=True) if ok]
        return results


def delivery(message: dict[str, Any], redelivery_count: int = 0) -> dict[str, Any]:
    """A stored message as the consume route returns it."""
    return {
        "messageId": "0:0",
        "payload": message["payload"],
        "properties": message.get("properties", {}),
        "publishTime": 0,
        "eventTime": 0,
        "redeliveryCount": redelivery_count,
    }


#: the HTTP producer's three ways of building a request: unkeyed (identity in the
#: payload), a payload too short for it (identity in a property), keyed with delays
HTTP_SHAPES = {
    "unkeyed": {},
    "short": {"messageSize": ID_BYTES - 1},
    "keyed-delayed": {
        "keyDistributor": "KEY_ROUND_ROBIN",
        "keys": 3,
        "delayedRatio": 0.5,
        "deliverAfterMs": 100,
    },
}


@pytest.mark.parametrize("fields", HTTP_SHAPES.values(), ids=HTTP_SHAPES.keys())
def test_a_repeat_hides_a_lost_message_from_the_backlog_but_not_from_the_drain(
    fields: dict[str, Any],
) -> None:
    """Through the HTTP driver's own producer and consumers: three messages stored, all
    reach subscription 0; subscription 1 gets the first two, then the second again with
    redelivery count 0 (its ack was not stored when the broker restarted) and never the
    third. The old counters balance (backlog 0); the drain does not catch up."""

    async def scenario() -> None:
        chosen = Scenario.model_validate(
            {
                "name": "lost",
                "topics": 1,
                "subscriptionsPerTopic": 2,
                "messagesPerRequest": 3,
                **fields,
            }
        )
        run = Run(chosen, driver=None, admin=None, broker=None)  # type: ignore[arg-type]
        client = StoringClient()
        producer = ProducerWorker(run, client, "p-0-0", run.topics, 1000.0, seed=1)  # type: ignore[arg-type]
        topic, body, count, first = producer._next_request()
        await producer._send(topic, body, count, first, run.clock.now_ns())
        stored = client.stored
        assert run.sent_ever == len(stored) == 3

        subscriptions = [
            ConsumerWorker(run, None, topic, index, f"c-{index}", 0.0)  # type: ignore[arg-type]
            for index in (0, 1)
        ]
        subscriptions[0]._record([delivery(m) for m in stored])
        subscriptions[1]._record([delivery(stored[0]), delivery(stored[1])])
        subscriptions[1]._record([delivery(stored[1])])  # the restarted broker's repeat
        run.acked_ever = run.first_deliveries_ever  # every delivery acknowledged

        # the counts the drain had: every message once per subscription, caught up
        assert run.first_deliveries_ever == run.sent_ever * 2 and run.backlog() == 0
        # ... which it was not: the third message never reached subscription 1
        assert run.deliveries.missing() == 1 and not run.caught_up()
        drain = drain_results(run, 0.0)
        assert not drain["caughtUp"], drain
        assert (drain["distinctDeliveries"], drain["missing"], drain["backlog"]) == (5, 1, 0)

        subscriptions[1]._record([delivery(stored[2], redelivery_count=1)])
        run.acked_ever += 1
        assert run.deliveries.missing() == 0 and run.caught_up()
        assert drain_results(run, 0.0)["distinctDeliveries"] == 6

    asyncio.run(scenario())


def test_a_message_the_broker_refused_is_not_owed_to_any_subscription() -> None:
    async def scenario() -> None:
        chosen = Scenario.model_validate(
            {"name": "refused", "topics": 1, "subscriptionsPerTopic": 1, "messagesPerRequest": 3}
        )
        run = Run(chosen, driver=None, admin=None, broker=None)  # type: ignore[arg-type]
        client = StoringClient()
        client.refuse = {1}
        producer = ProducerWorker(run, client, "p-0-0", run.topics, 1000.0, seed=1)  # type: ignore[arg-type]
        topic, body, count, first = producer._next_request()
        await producer._send(topic, body, count, first, run.clock.now_ns())
        assert run.sent_ever == 2 and run.counters.publish_errors == 1
        consumer = ConsumerWorker(run, None, topic, 0, "c-0", 0.0)  # type: ignore[arg-type]
        consumer._record([delivery(m) for m in client.stored])
        assert run.deliveries.missing() == 0 and run.deliveries.distinct == 2

    asyncio.run(scenario())


@pytest.mark.parametrize("size", [1024, ID_BYTES], ids=["long", "shortest"])
def test_an_http_message_carries_its_identity_in_its_payloads_first_bytes(size: int) -> None:
    """The payload keeps its size and is all the message holds (the broker's payload-only
    produce path, as before identities): its first bytes are the identity, the rest the
    producer's seeded bytes; a payload too short for them leaves it to a property."""

    async def scenario() -> None:
        chosen = Scenario.model_validate(
            {"name": "ids", "topics": 2, "messageSize": size, "messagesPerRequest": 4}
        )
        run = Run(chosen, driver=None, admin=None, broker=None)  # type: ignore[arg-type]
        producers = [
            ProducerWorker(run, None, f"p-{i}-0", run.partitions_of(i), 1000.0, seed=i)  # type: ignore[arg-type]
            for i in range(2)
        ]
        for _ in range(2):
            for producer in producers:
                _, body, count, first = producer._next_request()
                messages = orjson.loads(body)["messages"]
                assert len(messages) == count == 4
                slot = run.deliveries.slot_of(producer.name)
                assert slot is not None
                for number, message in enumerate(messages, first):
                    assert list(message) == ["payload"]
                    payload = pybase64.b64decode(message["payload"])
                    assert len(payload) == size
                    identity = run.deliveries.identity(slot, number)
                    assert payload[:ID_BYTES] == identity.to_bytes(ID_BYTES, "big")
        short = Scenario.model_validate({"name": "ids", "topics": 1, "messageSize": ID_BYTES - 1})
        run = Run(short, driver=None, admin=None, broker=None)  # type: ignore[arg-type]
        producer = ProducerWorker(run, None, "p-0-0", run.topics, 1000.0, seed=1)  # type: ignore[arg-type]
        _, body, _, first = producer._next_request()
        message = orjson.loads(body)["messages"][0]
        assert len(pybase64.b64decode(message["payload"])) == ID_BYTES - 1
        assert message["properties"] == {ID_PROPERTY: str(run.deliveries.identity(0, first))}

    asyncio.run(scenario())


class SentMessage:
    """What the official client hands a consumer, as far as the driver reads it."""

    def __init__(self, payload: bytes, properties: dict[str, str] | None) -> None:
        self._payload = payload
        self._properties = properties or {}

    def data(self) -> bytes:
        return self._payload

    def properties(self) -> dict[str, str]:
        return self._properties

    def publish_timestamp(self) -> int:
        return 0

    def redelivery_count(self) -> int:
        return 0


class ClientProducer:
    """A client producer that keeps what is sent and its callbacks."""

    def __init__(self) -> None:
        self.sent: list[tuple[SentMessage, Any]] = []

    def send_async(self, content: bytes, callback: Any, properties: Any = None, **_: Any) -> None:
        self.sent.append((SentMessage(content, properties), callback))


class Inbox:
    def post(self, function: Any, *args: Any) -> None:
        function(*args)


@pytest.mark.parametrize("size", [200, ID_BYTES - 1], ids=["payload", "property"])
def test_the_pulsar_driver_counts_each_message_once_per_subscription(size: int) -> None:
    pulsar_driver = pytest.importorskip("loadgen.pulsar_driver")

    async def scenario() -> None:
        chosen = Scenario.model_validate(
            {"name": "p", "topics": 1, "subscriptionsPerTopic": 2, "messageSize": size}
        )
        run = Run(chosen, driver=None, admin=None, broker=None)  # type: ignore[arg-type]
        driver = type("Driver", (), {"inbox": Inbox()})()
        producer = pulsar_driver.PulsarProducer(driver, run, "p-0-0", run.topics, 1000.0, 1)
        client = ClientProducer()
        producer._producers = [client]
        for _ in range(3):
            producer._send()
        for message, callback in client.sent:
            assert len(message.data()) == size
            callback(pulsar_driver.pulsar.Result.Ok, None)
        assert run.sent_ever == 3
        consumers = [
            pulsar_driver.PulsarConsumer(driver, run, run.topics[0], index, f"c-{index}", 0.0)
            for index in (0, 1)
        ]
        messages = [message for message, _ in client.sent]
        for message in messages:
            consumers[0]._record(message)
        for message in (messages[0], messages[1], messages[1]):  # a repeat, one lost
            consumers[1]._record(message)
        assert run.backlog() == 0 and run.deliveries.missing() == 1
        assert drain_results(run, 0.0)["distinctDeliveries"] == 5

    asyncio.run(scenario())
