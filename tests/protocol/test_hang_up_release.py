"""A connection that hangs up with more consumers than COOPERATIVE_BATCH lets them go a
batch per turn of the loop; a SUBSCRIBE another client sends right after the hang-up
still finds them gone, as when they all went in the hang-up's turn: an Exclusive
subscription the hung-up client held is free for the next holder (a new holder's
subscribe failing ConsumerBusy is not retried by Pulsar's clients)."""

from __future__ import annotations

import asyncio
import struct
from typing import Any

from broker.protocol.connection import Connection
from broker.pulsar_api import BaseCommand, Type
from broker.tasks import COOPERATIVE_BATCH
from tests.harness import in_process_node, new_topic
from tests.protocol.raw import connect, frame

#: SUBSCRIBEs written before their answers are read (under the pending-requests bound)
CHUNK = 256


def subscribe(topic: str, subscription: str, sub_type: int, consumer_id: int) -> Any:
    command = BaseCommand(type=Type.SUBSCRIBE)
    command.subscribe.topic = topic
    command.subscribe.subscription = subscription
    command.subscribe.subType = sub_type  # 0 Exclusive, 1 Shared
    command.subscribe.consumer_id = consumer_id
    command.subscribe.request_id = consumer_id
    return command


async def read(reader: asyncio.StreamReader) -> Any:
    total, size = struct.unpack(">II", await reader.readexactly(8))
    body = await reader.readexactly(total - 4)
    return BaseCommand.FromString(body[:size])


async def test_an_exclusive_subscription_of_a_hung_up_connection_is_free_at_once() -> None:
    topic = new_topic("hang-up", full=True)
    shared = 2 * COOPERATIVE_BATCH
    async with in_process_node(brokerServicePort=-1) as (_, node):
        server = node.protocol
        assert server is not None
        opened = []
        for _ in range(2):
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            writer.write(frame(connect()))
            assert (await read(reader)).type == Type.CONNECTED
            opened.append((reader, writer))
        (reader_a, writer_a), (reader_b, writer_b) = opened
        # A: the Exclusive subscription's consumer last, after many Shared ones
        commands = [subscribe(topic, "flood", 1, i) for i in range(shared)]
        commands.append(subscribe(topic, "ex", 0, shared))
        for start in range(0, len(commands), CHUNK):
            chunk = commands[start : start + CHUNK]
            writer_a.write(b"".join(frame(command) for command in chunk))
            for _ in chunk:
                answer = await read(reader_a)
                assert answer.type == Type.SUCCESS, answer
        ports = {
            writer.get_extra_info("sockname")[1]: name
            for name, (_, writer) in zip("ab", opened, strict=True)
        }
        seen = {
            ports[connection.transport.get_extra_info("peername")[1]]: connection
            for connection in server.connections
            if isinstance(connection, Connection)
        }
        # A hangs up and, in the same turn of the loop, B's SUBSCRIBE arrives
        seen["a"].connection_lost(None)
        seen["b"].data_received(frame(subscribe(topic, "ex", 0, 1)))
        answer = await read(reader_b)
        assert answer.type == Type.SUCCESS, answer
        for writer in (writer_a, writer_b):
            writer.close()
