"""The drain's count of distinct messages (loadgen.deliveries): a message counts once per
subscription however often it comes, so a repeat (a restarted broker's redelivery with
redelivery count 0) cannot stand in for a message the broker lost."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson

from loadgen.deliveries import Deliveries
from loadgen.http_driver import ConsumerWorker, ProducerWorker
from loadgen.run import Run
from loadgen.runner import drain_results
from loadgen.scenario import Scenario


def test_a_message_counts_once_per_subscription_however_often_it_comes() -> None:
    deliveries = Deliveries(subscriptions=2)
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
    # identities this run never gave, or that are not identities, count nothing
    for identity in ("0:4", "1:0", "-1:0", "0:-1", "0", "x:y", "", None):
        assert not deliveries.delivered_id(identity, 1), identity
    assert deliveries.delivered_id("0:1", 1) and deliveries.distinct == 4
    # a sequence past the first bytes grows the bitsets
    far = deliveries.issue(slot, 10_000) + 9_999
    deliveries.published(slot, far)
    assert deliveries.delivered(slot, far, 1) and deliveries.missing() == 5


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
        "properties": message["properties"],
        "publishTime": 0,
        "eventTime": 0,
        "redeliveryCount": redelivery_count,
    }


def test_a_repeat_hides_a_lost_message_from_the_backlog_but_not_from_the_drain() -> None:
    """Through the HTTP driver's own producer and consumers: three messages stored, all
    reach subscription 0; subscription 1 gets the first two, then the second again with
    redelivery count 0 (its ack was not stored when the broker restarted) and never the
    third. The old counters balance (backlog 0); the drain does not catch up."""

    async def scenario() -> None:
        chosen = Scenario.model_validate(
            {"name": "lost", "topics": 1, "subscriptionsPerTopic": 2, "messagesPerRequest": 3}
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
