"""A connection that hangs up with more producers and consumers than COOPERATIVE_BATCH
lets them go a batch per turn of the loop; a SUBSCRIBE or PRODUCER another client sends
right after the hang-up still finds them gone, as when they all went in the hang-up's
turn: an Exclusive subscription or exclusive producer access the hung-up client held is
free for the next holder (Pulsar's clients do not retry a first subscribe or create that
fails busy)."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import AsyncIterator
from typing import Any

import pytest

from broker.dispatch.names import TopicName
from broker.dispatch.service import BrokerService
from broker.dispatch.service_config import ConsumerOptions
from broker.protocol.connection import Connection
from broker.pulsar_api import BaseCommand, Type
from broker.tasks import COOPERATIVE_BATCH
from tests.harness import in_process_node, new_topic
from tests.protocol.raw import connect, frame, producer

#: requests written before their answers are read (under the pending-requests bound)
CHUNK = 256
EXCLUSIVE = 0  # the subscription type; 1 is Shared
EXCLUSIVE_ACCESS = 1  # the producer access mode; 0 is Shared


def subscribe(topic: str, subscription: str, sub_type: int, consumer_id: int) -> Any:
    command = BaseCommand(type=Type.SUBSCRIBE)
    command.subscribe.topic = topic
    command.subscribe.subscription = subscription
    command.subscribe.subType = sub_type
    command.subscribe.consumer_id = consumer_id
    command.subscribe.request_id = consumer_id
    return command


def exclusive_producer(topic: str, producer_id: int) -> Any:
    command = producer(topic, producer_id, producer_id)
    command.producer.producer_access_mode = EXCLUSIVE_ACCESS
    return command


async def read(reader: asyncio.StreamReader) -> Any:
    total, size = struct.unpack(">II", await reader.readexactly(8))
    body = await reader.readexactly(total - 4)
    return BaseCommand.FromString(body[:size])


class Peers:
    """Two clients of one in-process broker (``a`` and ``b``), each a stream and the
    broker's Connection of it."""

    def __init__(self, service: BrokerService) -> None:
        self.service = service
        self.streams: dict[str, tuple[asyncio.StreamReader, asyncio.StreamWriter]] = {}
        self.served: dict[str, Connection] = {}

    async def ask(self, name: str, commands: list[Any]) -> None:
        """Send ``commands`` from ``name``, each answered SUCCESS or PRODUCER_SUCCESS."""
        reader, writer = self.streams[name]
        for start in range(0, len(commands), CHUNK):
            chunk = commands[start : start + CHUNK]
            writer.write(b"".join(frame(command) for command in chunk))
            for _ in chunk:
                answer = await read(reader)
                assert answer.type in (Type.SUCCESS, Type.PRODUCER_SUCCESS), answer

    async def hang_up_a_then_b_asks(self, command: Any) -> Any:
        """``a`` hangs up and, in the same turn of the loop, ``b``'s command arrives: its
        answer."""
        self.served["a"].connection_lost(None)
        self.served["b"].data_received(frame(command))
        return await read(self.streams["b"][0])


@pytest.fixture
async def peers() -> AsyncIterator[Peers]:
    async with in_process_node(brokerServicePort=-1) as (_, node):
        server = node.protocol
        assert server is not None
        assert node.service is not None
        peers = Peers(node.service)
        by_port = {}
        for name in "ab":
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            writer.write(frame(connect()))
            assert (await read(reader)).type == Type.CONNECTED
            peers.streams[name] = reader, writer
            by_port[writer.get_extra_info("sockname")[1]] = name
        for connection in server.connections:
            assert isinstance(connection, Connection) and connection.transport is not None
            peers.served[by_port[connection.transport.get_extra_info("peername")[1]]] = connection
        try:
            yield peers
        finally:
            for _, writer in peers.streams.values():
                writer.close()


async def a_holds_an_exclusive_subscription_behind_many(peers: Peers) -> str:
    """Client a subscribes many Shared consumers, then an Exclusive one of subscription
    "ex", last: the topic."""
    topic = new_topic("hang-up", full=True)
    shared = 2 * COOPERATIVE_BATCH
    commands = [subscribe(topic, "flood", 1, i) for i in range(shared)]
    await peers.ask("a", [*commands, subscribe(topic, "ex", EXCLUSIVE, shared)])
    return topic


async def test_an_exclusive_subscription_of_a_hung_up_connection_is_free_at_once(
    peers: Peers,
) -> None:
    topic = await a_holds_an_exclusive_subscription_behind_many(peers)
    answer = await peers.hang_up_a_then_b_asks(subscribe(topic, "ex", EXCLUSIVE, 1))
    assert answer.type == Type.SUCCESS, answer


async def test_an_exclusive_producer_access_of_a_hung_up_connection_is_free_at_once(
    peers: Peers,
) -> None:
    flood, exclusive = new_topic("hang-up", full=True), new_topic("hang-up", full=True)
    shared = 2 * COOPERATIVE_BATCH
    # the exclusive producer last, after many of another topic
    commands = [producer(flood, i, i) for i in range(shared)]
    await peers.ask("a", [*commands, exclusive_producer(exclusive, shared)])
    answer = await peers.hang_up_a_then_b_asks(exclusive_producer(exclusive, 1))
    assert answer.type == Type.PRODUCER_SUCCESS, answer


async def test_any_front_ends_consumer_finds_a_hung_up_connections_consumers_gone(
    peers: Peers,
) -> None:
    """The service's consumers of every front end (HTTP, WebSocket) wait as well."""
    topic = await a_holds_an_exclusive_subscription_behind_many(peers)
    peers.served["a"].connection_lost(None)
    consumer = await peers.service.create_consumer(
        TopicName.parse(topic), "ex", ConsumerOptions(subscription_type="Exclusive")
    )
    assert list(consumer.subscription.consumers) == [consumer]
