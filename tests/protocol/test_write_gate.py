"""A binary connection's write gate (``pulsarChannelWriteBufferHighWaterMark``), driven
through a transport that stands in for the socket: output past the high water mark goes
to the transport at once and the gate stays open while the transport passes it on (a
client that reads), closes when the transport cannot (a client that does not read) and
opens again when the transport drains; output below the mark waits for the turn's one
write."""

from __future__ import annotations

import asyncio
import struct
from typing import Any

from broker.config import BrokerConfig
from broker.protocol.connection import Connection
from broker.protocol.frames import command_frame
from broker.protocol.server import ProtocolServer
from broker.pulsar_api import BaseCommand, Type


class Socket(asyncio.Transport):
    """Takes what is written; ``reading``: its client reads it all at once, else it
    stays buffered, and past the high water mark the protocol is paused, as uvloop's
    transport does."""

    def __init__(self, protocol: asyncio.BaseProtocol, reading: bool) -> None:
        super().__init__()
        self.protocol = protocol
        self.reading = reading
        self.written: list[bytes] = []
        self.buffered = 0
        self.high = self.low = 0
        self.paused = False
        #: the protocol turned reading off (pause_reading)
        self.reads_paused = False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 40000) if name == "peername" else default

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self.high, self.low = high or 0, low or 0

    def get_write_buffer_size(self) -> int:
        return self.buffered

    def writelines(self, data: Any) -> None:
        chunks = list(data)
        self.written += chunks
        if not self.reading:
            self.buffered += sum(len(chunk) for chunk in chunks)
            if self.buffered > self.high and not self.paused:
                self.paused = True
                self.protocol.pause_writing()

    def pause_reading(self) -> None:
        self.reads_paused = True

    def resume_reading(self) -> None:
        self.reads_paused = False

    def drain(self) -> None:
        """The client reads everything buffered."""
        self.buffered = 0
        if self.paused:
            self.paused = False
            self.protocol.resume_writing()

    def close(self) -> None:
        pass


def connect(reading: bool) -> tuple[Connection, Socket, list[bool]]:
    """A connection on a Socket, and every change of its gate, in order."""
    server = ProtocolServer(None, BrokerConfig(), Connection)  # type: ignore[arg-type]
    connection = Connection(server)
    socket = Socket(connection, reading)
    connection.connection_made(socket)
    changes: list[bool] = []
    set_writable = connection._set_writable

    def record(writable: bool) -> None:
        changes.append(writable)
        set_writable(writable)

    connection._set_writable = record  # type: ignore[method-assign]
    return connection, socket, changes


async def next_turn() -> None:
    """Return after the callbacks scheduled so far (the connection's flush) have run."""
    turn = asyncio.get_running_loop().create_future()
    asyncio.get_running_loop().call_soon(turn.set_result, None)
    await turn


def message(connection: Connection, size: int) -> bytes:
    """Queue a MESSAGE frame carrying ``size`` bytes; the bytes."""
    entry = bytes(size)
    command = BaseCommand(type=Type.MESSAGE)
    command.message.consumer_id = 1
    command.message.message_id.ledgerId = 1
    command.message.message_id.entryId = 0
    connection.write_payload(command, entry)
    return entry


async def test_output_past_the_mark_goes_out_at_once_and_the_gate_stays_open() -> None:
    connection, socket, changes = connect(reading=True)
    entry = message(connection, 2 * connection.high_water)
    assert socket.written[-1] is entry  # written now, not at the turn's flush
    assert connection.writable and connection.unsent_bytes() == 0
    await next_turn()
    assert changes == []  # never closed: the client reads
    assert connection.writable


async def test_a_client_that_does_not_read_closes_the_gate_until_it_drains() -> None:
    connection, socket, changes = connect(reading=False)
    message(connection, 2 * connection.high_water)
    assert not connection.writable  # the transport could not pass it on
    assert changes == [False]
    # pulsarChannelPauseReceivingRequestsIfUnwritable: no more requests read meanwhile
    assert socket.reads_paused
    message(connection, 100)  # more output while paused: queued for the turn's write
    await next_turn()
    assert not connection.writable  # the flush leaves it closed while paused
    socket.drain()
    assert connection.writable
    assert changes == [False, True]
    assert not socket.reads_paused


async def test_output_below_the_mark_waits_for_the_turns_one_write() -> None:
    connection, socket, changes = connect(reading=True)
    first = message(connection, 100)
    second = message(connection, 100)
    assert socket.written == []
    await next_turn()
    assert socket.written[1] is first and socket.written[3] is second
    assert changes == [] and connection.writable


class Namespace:
    """A broker service whose namespace lists ``count`` topics: every topic list answer
    is about 40 bytes a topic, far past the high water mark."""

    def __init__(self, count: int) -> None:
        self.topics = [f"persistent://public/default/topic-{i:06}" for i in range(count)]

    async def list_topics(self, _tenant: str, _namespace: str) -> list[str]:
        return list(self.topics)


async def settle() -> None:
    """Let every task that can run, run (no time passes): to see what did *not* happen."""
    for _ in range(20):
        await asyncio.sleep(0)


def answered(socket: Socket) -> list[int]:
    """The request ids of the GET_TOPICS_OF_NAMESPACE answers written so far."""
    data = b"".join(socket.written)
    ids = []
    offset = 0
    while offset < len(data):
        total, size = struct.unpack_from(">II", data, offset)
        command = BaseCommand.FromString(data[offset + 8 : offset + 8 + size])
        assert command.type == Type.GET_TOPICS_OF_NAMESPACE_RESPONSE, command
        ids.append(command.getTopicsOfNamespaceResponse.request_id)
        offset += 4 + total
    return ids


async def test_large_answers_the_client_does_not_read_wait_for_the_output_to_drain() -> None:
    """pulsarChannelPauseReceivingRequestsIfUnwritable: requests parsed before the
    output passed its mark (here all at once) do not all become answers nobody reads
    (4,000 topic lists of 10,000 topics each grew a broker by 950 MiB): one answer is
    made each time the output drains, in the order asked."""
    server = ProtocolServer(Namespace(5000), BrokerConfig(), Connection)  # type: ignore[arg-type]
    connection = Connection(server)
    socket = Socket(connection, reading=False)
    connection.connection_made(socket)
    connection.connected = True
    requests = []
    for request_id in range(30):
        command = BaseCommand(type=Type.GET_TOPICS_OF_NAMESPACE)
        command.getTopicsOfNamespace.namespace = "public/default"
        command.getTopicsOfNamespace.request_id = request_id
        requests.append(command_frame(command))
    connection.data_received(b"".join(requests))
    await settle()
    assert answered(socket) == [0]  # past the mark at once: the others wait
    for count in range(2, 31):
        socket.drain()  # the client reads what was written
        await settle()
        assert answered(socket) == list(range(count))
    assert not connection.closed
