"""The producer session the binary and WebSocket front ends share, driven directly."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from broker.dispatch.errors import ProducerBusyError, ProducerFencedError, ProducerLimitError
from broker.dispatch.names import TopicName
from broker.dispatch.service import BrokerService, ServiceConfig
from broker.ledger.entry import encode_message
from broker.session.producer import (
    EXCLUSIVE,
    EXCLUSIVE_WITH_FENCING,
    WAIT_FOR_EXCLUSIVE,
    ProducerSession,
)
from tests.harness import eventually_async
from tests.session.conftest import in_memory_service

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


# ---------------------------------------------------------------------- access modes


@pytest.fixture
async def roomy() -> AsyncIterator[BrokerService]:
    async with in_memory_service(ServiceConfig()) as broker:
        yield broker


async def test_an_exclusive_producer_keeps_shared_and_exclusive_ones_out(
    roomy: BrokerService,
) -> None:
    topic = await roomy.get_topic(TOPIC, create=True)
    holder = ProducerSession(roomy, TOPIC, "holder", access_mode=EXCLUSIVE)
    assert await holder.attach_with_access(topic) == 0
    with pytest.raises(ProducerBusyError, match="existing exclusive producer: holder"):
        await ProducerSession(roomy, TOPIC, "shared").attach_with_access(topic)
    with pytest.raises(ProducerFencedError):
        await ProducerSession(roomy, TOPIC, "x", access_mode=EXCLUSIVE).attach_with_access(topic)
    assert list(topic.producers) == [holder]  # the refused ones changed nothing
    holder.detach()
    shared = ProducerSession(roomy, TOPIC, "shared")
    assert await shared.attach_with_access(topic) == 0  # Shared learns the epoch there is
    with pytest.raises(ProducerFencedError, match="existing shared producers"):
        await ProducerSession(roomy, TOPIC, "x", access_mode=EXCLUSIVE).attach_with_access(topic)


async def test_waiting_producers_get_the_topic_in_turn_and_an_unload_ends_a_wait(
    roomy: BrokerService,
) -> None:
    topic = await roomy.get_topic(TOPIC, create=True)
    holder = ProducerSession(roomy, TOPIC, "holder", access_mode=EXCLUSIVE)
    await holder.attach_with_access(topic)
    told: list[str] = []
    first = ProducerSession(roomy, TOPIC, "first", access_mode=WAIT_FOR_EXCLUSIVE)
    second = ProducerSession(roomy, TOPIC, "second", access_mode=WAIT_FOR_EXCLUSIVE)
    first_wait = asyncio.ensure_future(first.attach_with_access(topic, lambda: told.append("1")))
    second_wait = asyncio.ensure_future(second.attach_with_access(topic, lambda: told.append("2")))
    await eventually_async(lambda: len(told) == 2, "both producers queued")
    assert told == ["1", "2"] and list(topic.waiting_producers) == [first, second]

    holder.detach()
    assert await first_wait == 1 and list(topic.producers) == [first]
    assert not second_wait.done()

    await roomy.unload_topic(TOPIC)  # the topic goes: the waiting producer is told
    with pytest.raises(ProducerFencedError, match="closed while it waited"):
        await second_wait


async def test_exclusive_with_fencing_closes_the_holder_and_fails_the_waiting(
    roomy: BrokerService,
) -> None:
    topic = await roomy.get_topic(TOPIC, create=True)
    holder = ProducerSession(roomy, TOPIC, "holder", access_mode=EXCLUSIVE)
    await holder.attach_with_access(topic)
    waiter = ProducerSession(roomy, TOPIC, "waiter", access_mode=WAIT_FOR_EXCLUSIVE)
    wait = asyncio.ensure_future(waiter.attach_with_access(topic))
    await eventually_async(lambda: waiter.waiting, "the producer queued")
    fencer = ProducerSession(roomy, TOPIC, "fencer", access_mode=EXCLUSIVE_WITH_FENCING)
    assert await fencer.attach_with_access(topic) == 1
    assert holder.topic is None and list(topic.producers) == [fencer]
    with pytest.raises(ProducerFencedError, match="Fenced out"):
        await wait
    # the fenced holder, reconnecting with the epoch it had, is fenced for good
    again = ProducerSession(roomy, TOPIC, "holder", access_mode=EXCLUSIVE, topic_epoch=0)
    fencer.detach()
    with pytest.raises(ProducerFencedError, match="Topic epoch has already moved"):
        await again.attach_with_access(topic)
