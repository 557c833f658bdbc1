"""Publish throttling: a connection whose SENDs are not answered yet is not read further
past Pulsar's limits (maxPendingPublishRequestsPerConnection per connection,
maxMessagePublishBufferSizeInMB for all of them), so a producer faster than storage
cannot make the broker hold without bound what it sends.

Storage is held by a gate on the producers' writes (in-process broker): while it is
closed no SEND is answered. What proves a connection is not read is the order of the
broker's answers: a PING sent while reads are off is answered only after the receipts
that turned them on again. Read at once, its PONG would come before any receipt: an HTTP
round trip to the same broker after the PING (its event loop polls every socket with
data at once, and the PING's bytes were there first) is the barrier after which an
unthrottled connection's PING has been answered, before storage is let go."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from broker.protocol.binary_producer import BinaryProducer
from broker.protocol.connection import Connection
from broker.protocol.server import ProtocolServer
from broker.pulsar_api import BaseCommand, Type
from tests.harness import (
    Client,
    eventually_async,
    in_process_node,
    new_topic,
    persistent,
)
from tests.protocol.raw import connect, entry, frame, ping, producer, send, send_frame

DEADLINE_S = 20.0


class RawClient:
    """A binary-protocol client on asyncio streams: writes exact frames, reads commands."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.local = "{}:{}".format(*writer.get_extra_info("sockname"))

    @classmethod
    async def open(cls, port: int, topic: str) -> RawClient:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        client = cls(reader, writer)
        client.write(frame(connect()) + frame(producer(topic, 1, 1)))
        assert (await client.read()).type == Type.CONNECTED
        assert (await client.read()).type == Type.PRODUCER_SUCCESS
        return client

    def write(self, data: bytes) -> None:
        self.writer.write(data)

    def send(self, sequence_id: int, payload: bytes) -> None:
        self.write(send_frame(send(1, sequence_id), entry(payload, sequence_id)))

    async def read(self) -> Any:
        async with asyncio.timeout(DEADLINE_S):
            (total,) = struct.unpack(">I", await self.reader.readexactly(4))
            body = await self.reader.readexactly(total)
        (size,) = struct.unpack_from(">I", body)
        return BaseCommand.FromString(body[4 : 4 + size])

    async def until_pong(self) -> list[int]:
        """The sequence ids of the receipts read before the PONG."""
        receipts = []
        while (command := await self.read()).type != Type.PONG:
            assert command.type == Type.SEND_RECEIPT, command
            receipts.append(command.send_receipt.sequence_id)
        return receipts

    async def close(self) -> None:
        self.writer.close()
        await self.writer.wait_closed()


@pytest.fixture
def storage_gate(monkeypatch: pytest.MonkeyPatch) -> asyncio.Event:
    """While cleared, every binary producer's write waits before it reaches storage."""
    gate = asyncio.Event()
    publish: Callable[..., Any] = BinaryProducer.publish_sequenced

    async def gated(self: BinaryProducer, group: Any) -> Any:
        await gate.wait()
        return await publish(self, group)

    monkeypatch.setattr(BinaryProducer, "publish_sequenced", gated)
    return gate


async def broker(**keys: Any) -> AsyncIterator[tuple[ProtocolServer, Client]]:
    async with in_process_node(brokerServicePort=-1, **keys) as (http, node):
        assert node.protocol is not None
        yield node.protocol, http


async def barrier(http: Client) -> None:
    """An HTTP round trip to the broker: what a readable connection had sent before it
    has been read and answered (see the module's docstring)."""
    status, body = await http.request("GET", "/admin/v2/brokers/health")
    assert status == 200, body


def connection_of(protocol: ProtocolServer, index: int = 0) -> Connection:
    connections = sorted(protocol.connections, key=lambda c: c.peer)  # type: ignore[attr-defined]
    return connections[index]  # type: ignore[no-any-return]


async def not_reading(connection: Connection) -> None:
    transport = connection.transport
    assert transport is not None

    async def paused() -> bool:
        return not transport.is_reading()

    await eventually_async(paused, "the broker to stop reading the connection")


async def test_a_connection_is_not_read_past_its_pending_sends_until_half_are_answered(
    storage_gate: asyncio.Event,
) -> None:
    limit = 10
    async for protocol, http in broker(maxPendingPublishRequestsPerConnection=limit):
        client = await RawClient.open(protocol.port, persistent(new_topic("throttle")))
        try:
            for sequence_id in range(limit):
                client.send(sequence_id, b"x")
            connection = connection_of(protocol)
            await not_reading(connection)
            # a keep-alive round finding its PING unanswered: the PONG may be unread,
            # as Pulsar's keep-alive does not close a connection whose reads are off
            connection._heard, connection._ping_sent = False, True
            connection._check_alive()
            assert not connection.closed
            # read at once, these would be answered before anything stored: the PING's
            # PONG first
            for sequence_id in range(limit, limit + 5):
                client.send(sequence_id, b"x")
            client.write(frame(ping()))
            await barrier(http)
            storage_gate.set()
            before_pong = await client.until_pong()
            assert before_pong[:limit] == list(range(limit)), before_pong
            later = before_pong[limit:]  # the 5 read after the PING, answered in order
            while len(later) < 5:
                later.append((await client.read()).send_receipt.sequence_id)
            assert later == list(range(limit, limit + 5))
            assert connection.transport is not None and connection.transport.is_reading()
            assert protocol.publish_buffer.pending == 0
        finally:
            await client.close()


async def test_the_brokers_publish_buffer_stops_reading_every_connection_until_half_drained(
    storage_gate: asyncio.Event,
) -> None:
    payload = bytes(400 * 1024)
    async for protocol, http in broker(maxMessagePublishBufferSizeInMB=1):
        writer = await RawClient.open(protocol.port, persistent(new_topic("big")))
        bystander = await RawClient.open(protocol.port, persistent(new_topic("small")))
        try:
            writer_connection, bystander_connection = (
                connection_of(protocol, 0),
                connection_of(protocol, 1),
            )
            if writer_connection.peer != writer.local:
                writer_connection, bystander_connection = bystander_connection, writer_connection
            for sequence_id in range(3):  # 1.2 MiB unanswered: over the 1 MiB
                writer.send(sequence_id, payload)
            await not_reading(writer_connection)
            await not_reading(bystander_connection)  # it sent nothing: paused all the same
            writer.write(frame(ping()))
            bystander.write(frame(ping()))
            await barrier(http)
            storage_gate.set()
            assert await writer.until_pong() == [0, 1, 2]
            assert await bystander.until_pong() == []
            assert protocol.publish_buffer.pending == 0
            assert not protocol.publish_buffer.exceeded
        finally:
            await writer.close()
            await bystander.close()
