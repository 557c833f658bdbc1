"""Consumers of one subscription from many connections, then every connection hanging up:
each detach is O(1) in the subscription's consumer list (``ConsumerList``) on every
subscription type. A list scanned at each detach (a membership test, then a remove) made
40,000 Shared consumers of 8 connections hold the loop 9.5 s to detach, and 16 clients
of 4,900 SUBSCRIBEs each hanging up held another client's send 8 s."""

from __future__ import annotations

import pytest

from broker.dispatch.consumer import Consumer
from broker.dispatch.names import TopicName
from broker.dispatch.service import BrokerService, ConsumerOptions

TOPIC = TopicName("public", "default", "churn")
CONNECTIONS = 8
PER_CONNECTION = 250


class Compared(Consumer):
    """A consumer that counts how often it is compared with another: a list's ``in`` and
    ``remove`` compare every consumer before the one they find."""

    __slots__ = ()
    comparisons = 0

    def __eq__(self, other: object) -> bool:
        Compared.comparisons += 1
        return self is other

    __hash__ = Consumer.__hash__


@pytest.mark.parametrize("sub_type", ["Shared", "Key_Shared", "Failover"])
async def test_connections_hanging_up_detach_their_consumers_in_linear_time(
    service: BrokerService, sub_type: str
) -> None:
    options = ConsumerOptions(subscription_type=sub_type)
    attached = [
        await service.create_consumer(TOPIC, "s", options, factory=Compared)
        for _ in range(CONNECTIONS * PER_CONNECTION)
    ]
    subscription = service.topics[TOPIC].subscriptions["s"]
    assert list(subscription.consumers) == attached  # in the order they attached
    Compared.comparisons = 0
    for connection in range(CONNECTIONS):  # the n-th connection had every n-th consumer
        for consumer in attached[connection::CONNECTIONS]:
            service.close_consumer(consumer)
        left = [c for i, c in enumerate(attached) if i % CONNECTIONS > connection]
        assert list(subscription.consumers) == left
    assert Compared.comparisons < 10 * len(attached), Compared.comparisons
