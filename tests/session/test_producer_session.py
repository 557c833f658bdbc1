"""The producer session the binary and WebSocket front ends share, driven directly."""

from __future__ import annotations

import pytest

from broker.dispatch.errors import ProducerLimitError
from broker.dispatch.names import TopicName
from broker.dispatch.service import BrokerService
from broker.ledger.entry import encode_message
from broker.session.producer import ProducerSession

TOPIC = TopicName("public", "default", "producers")


async def test_a_topic_counts_its_producers_until_they_leave(service: BrokerService) -> None:
    topic = await service.get_topic(TOPIC, create=True)
    first = ProducerSession(service, TOPIC, "p1")
    first.attach(topic)
    second = ProducerSession(service, TOPIC, "p2")
    with pytest.raises(ProducerLimitError):
        second.attach(topic)
    assert list(topic.producers) == [first]
    first.detach()
    second.attach(topic)
    assert list(topic.producers) == [second]


async def test_after_an_unload_the_next_write_counts_the_producer_on_the_new_topic(
    service: BrokerService,
) -> None:
    producer = ProducerSession(service, TOPIC, "p")
    old = await producer.current_topic()
    await service.unload_topic(TOPIC)
    assert producer.topic is None  # the topic forgot its producers
    first = await producer.publish([encode_message(b"x", 1)], 1)
    new = producer.topic
    assert new is not None and new is not old and list(new.producers) == [producer]
    assert new.ledger.last_confirmed == first


def test_sequence_ids_follow_on_from_the_first(service: BrokerService) -> None:
    producer = ProducerSession(service, TOPIC, "p", first_sequence_id=5)
    assert producer.sequence_ids(1) == 5
    assert producer.sequence_ids(3) == 6
    assert producer.sequence_ids(1) == 9
