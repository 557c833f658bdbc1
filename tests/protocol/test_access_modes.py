"""Producer access modes with the official client, as Pulsar's broker decides them:
Shared producers share a topic; an Exclusive one takes it only when no other producer is
there (ProducerFenced otherwise, and Shared ones get ProducerBusy while it holds it);
ExclusiveWithFencing takes it from whoever has it; WaitForExclusive waits until it is
free. A refused producer changes nothing: the holder goes on, nothing is stored."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import aiohttp
import pulsar
import pytest

from broker.pulsar_api import BaseCommand, ServerError, Type
from tests.harness import ServedBroker, eventually, new_topic, persistent
from tests.protocol.raw import RawConnection, frame

pytestmark = pytest.mark.slow

Mode = pulsar.ProducerAccessMode


def entries(broker: ServedBroker, topic: str) -> int:
    path = topic.removeprefix("persistent://")
    stats = broker.ok("GET", f"/admin/v2/persistent/{path}/internalStats")
    number: int = stats["numberOfEntries"]
    return number


def test_shared_producers_share_the_topic(broker: ServedBroker, client: pulsar.Client) -> None:
    topic = persistent(new_topic("access"))
    first = client.create_producer(topic, access_mode=Mode.Shared)
    second = client.create_producer(topic, access_mode=Mode.Shared)
    first.send(b"a")
    second.send(b"b")
    assert entries(broker, topic) == 2
    with pytest.raises(pulsar.ProducerFenced):
        client.create_producer(topic, access_mode=Mode.Exclusive)
    first.send(b"c")
    assert entries(broker, topic) == 3


def test_an_exclusive_producer_keeps_others_out(
    broker: ServedBroker, client: pulsar.Client
) -> None:
    topic = persistent(new_topic("access"))
    holder = client.create_producer(topic, access_mode=Mode.Exclusive)
    with pytest.raises(pulsar.ProducerFenced):
        client.create_producer(topic, access_mode=Mode.Exclusive)
    with pytest.raises(pulsar.ProducerBusy):
        client.create_producer(topic, access_mode=Mode.Shared)
    holder.send(b"mine")
    assert entries(broker, topic) == 1

    # once it closes, the topic is free again
    holder.close()
    shared = client.create_producer(topic, access_mode=Mode.Shared)
    shared.send(b"shared again")
    assert entries(broker, topic) == 2


def test_exclusive_with_fencing_takes_the_topic_and_fences_the_holder(
    broker: ServedBroker, client: pulsar.Client
) -> None:
    topic = persistent(new_topic("access"))
    old = client.create_producer(topic, access_mode=Mode.Exclusive, send_timeout_millis=5000)
    old.send(b"old")
    new = client.create_producer(topic, access_mode=Mode.ExclusiveWithFencing)
    new.send(b"new")
    # the old producer was closed by the broker; reconnecting with its topic epoch,
    # which has moved on, it is fenced for good
    with pytest.raises(pulsar.ProducerFenced):
        old.send(b"late")
    assert entries(broker, topic) == 2
    new.send(b"still mine")
    assert entries(broker, topic) == 3


def test_a_waiting_producer_gets_the_topic_when_the_exclusive_one_closes(
    broker: ServedBroker, client: pulsar.Client
) -> None:
    topic = persistent(new_topic("access"))
    holder = client.create_producer(topic, access_mode=Mode.Exclusive)
    created: list[pulsar.Producer] = []
    failed: list[BaseException] = []

    def wait_for_it() -> None:
        try:
            created.append(client.create_producer(topic, access_mode=Mode.WaitForExclusive))
        except BaseException as error:  # reported by the assertion below
            failed.append(error)

    mark = broker.mark()
    waiter = threading.Thread(target=wait_for_it)
    waiter.start()
    eventually(
        lambda: "waits for exclusive access to " + topic in broker.log(since=mark),
        "the waiting producer to be queued",
    )
    # while it waits, a Shared producer is busy and the holder goes on
    with pytest.raises(pulsar.ProducerBusy):
        client.create_producer(topic, access_mode=Mode.Shared)
    holder.send(b"holder")
    assert not created

    holder.close()
    waiter.join(timeout=30)
    assert not failed and len(created) == 1
    created[0].send(b"waiter")
    assert entries(broker, topic) == 2


def test_the_topic_epoch_moves_with_each_exclusive_producer(broker: ServedBroker) -> None:
    topic = persistent(new_topic("access-epoch"))
    raw = RawConnection(broker.service_url)
    try:
        raw.handshake()

        def create(producer_id: int, mode: int, epoch: int | None = None) -> Any:
            command = BaseCommand(type=Type.PRODUCER)
            body = command.producer
            body.topic = topic
            body.producer_id = producer_id
            body.request_id = 100 + producer_id
            body.producer_access_mode = mode
            if epoch is not None:
                body.topic_epoch = epoch
            raw.write(frame(command))
            return raw.read()

        def close(producer_id: int) -> None:
            command = BaseCommand(type=Type.CLOSE_PRODUCER)
            command.close_producer.producer_id = producer_id
            command.close_producer.request_id = 200 + producer_id
            raw.write(frame(command))
            raw.expect(Type.SUCCESS)

        first = create(1, 1)  # Exclusive
        assert first.producer_success.topic_epoch == 0 and first.producer_success.producer_ready
        close(1)
        second = create(2, 1)
        assert second.producer_success.topic_epoch == 1
        close(2)
        # a producer reconnecting with an epoch the topic has moved past is fenced
        stale = create(3, 1, epoch=0)
        assert stale.type == Type.ERROR and stale.error.error == ServerError.ProducerFenced
        # one that brings the current epoch (or a newer one) takes it
        current = create(4, 1, epoch=1)
        assert current.producer_success.topic_epoch == 1
        # a waiting producer is told it waits, then gets the next epoch
        waiting = create(5, 2)  # WaitForExclusive
        assert waiting.type == Type.PRODUCER_SUCCESS
        assert not waiting.producer_success.producer_ready
        close(4)
        ready = raw.expect(Type.PRODUCER_SUCCESS).producer_success
        assert ready.request_id == 105 and ready.producer_ready and ready.topic_epoch == 2
    finally:
        raw.close()


def test_a_websocket_producer_is_shared_and_busy_while_an_exclusive_one_holds_the_topic(
    broker: ServedBroker, client: pulsar.Client
) -> None:
    # Pulsar's WebSocket producer has no access mode: it is a Shared producer
    topic = persistent(new_topic("access-ws"))
    holder = client.create_producer(topic, access_mode=Mode.Exclusive)
    url = broker.http_url.replace("http", "ws", 1) + "/ws/v2/producer/" + topic.replace("://", "/")

    async def handshake() -> int:
        async with aiohttp.ClientSession() as session:
            try:
                async with session.ws_connect(url):
                    return 101
            except aiohttp.WSServerHandshakeError as error:
                return error.status

    assert asyncio.run(handshake()) == 409
    holder.close()
    assert asyncio.run(handshake()) == 101
