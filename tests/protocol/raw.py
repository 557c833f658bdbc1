"""Pulsar's binary protocol by hand, for tests that must send exactly the bytes they
mean (broken frames, commands the official client does not expose): frames, entries and
a client on a plain socket."""

from __future__ import annotations

import socket
import struct
import time
import zlib
from typing import Any

from crc32c import crc32c

from broker.pulsar_api import (
    COMPRESSION_ZLIB,
    BaseCommand,
    MessageMetadata,
    SingleMessageMetadata,
    Type,
)

#: a deadline on every read of the raw socket, not a wait
READ_DEADLINE_S = 20.0


def frame(command: Any) -> bytes:
    """``total size | command size | BaseCommand``, sizes big-endian."""
    body = command.SerializeToString()
    return struct.pack(">II", len(body) + 4, len(body)) + body


def send_frame(command: Any, entry: bytes) -> bytes:
    """A SEND: the command, then the entry, both counted in the total size."""
    body = command.SerializeToString()
    return struct.pack(">II", len(body) + 4 + len(entry), len(body)) + body + entry


def entry(payload: bytes, sequence_id: int, corrupt_checksum: bool = False) -> bytes:
    """``magic 0x0e01 | CRC32C | metadata size | MessageMetadata | payload``, the checksum
    over everything after it (one bit flipped when ``corrupt_checksum``)."""
    metadata = MessageMetadata(
        producer_name="raw", sequence_id=sequence_id, publish_time=int(time.time() * 1000)
    ).SerializeToString()
    size = struct.pack(">I", len(metadata))
    checksum = crc32c(size + metadata + payload) ^ (1 if corrupt_checksum else 0)
    return struct.pack(">HI", 0x0E01, checksum) + size + metadata + payload


def framed(metadata: bytes, payload: bytes) -> bytes:
    """An entry of exactly these metadata bytes and payload, its checksum right."""
    size = struct.pack(">I", len(metadata))
    return struct.pack(">HI", 0x0E01, crc32c(size + metadata + payload)) + size + metadata + payload


def _batch_metadata(sequence_id: int, count: int) -> bytes:
    return MessageMetadata(
        producer_name="raw",
        sequence_id=sequence_id,
        publish_time=int(time.time() * 1000),
        num_messages_in_batch=count,
    ).SerializeToString()


def _batch_message(payload: bytes, sequence_id: int) -> bytes:
    single = SingleMessageMetadata(payload_size=len(payload), sequence_id=sequence_id)
    encoded = single.SerializeToString()
    return struct.pack(">I", len(encoded)) + encoded + payload


# Poison entries: the checksum is right, what it covers cannot be trusted.


def lying_batch(payload: bytes, sequence_id: int, count: int) -> bytes:
    """A batch holding one message whose header says it holds ``count`` (2**31 - 1,
    0, -1: what no entry of its size can hold)."""
    return framed(_batch_metadata(sequence_id, count), _batch_message(payload, sequence_id))


def unparsable_metadata(payload: bytes) -> bytes:
    """An entry whose MessageMetadata does not parse (a field's length runs past it)."""
    return framed(b"\x0a\xff\xff\xff\x0f", payload)


def zlib_bomb(inflated_mib: int, declared: int) -> bytes:
    """An unbatched ZLIB entry of ``inflated_mib`` MiB of zeros (about 1 KiB compressed a
    MiB) whose metadata declares an ``uncompressed_size`` of ``declared`` bytes."""
    deflater = zlib.compressobj(9)
    zeros = bytes(1 << 20)
    body = b"".join(deflater.compress(zeros) for _ in range(inflated_mib))
    body += deflater.flush()
    metadata = MessageMetadata(
        producer_name="raw",
        sequence_id=0,
        publish_time=int(time.time() * 1000),
        compression=COMPRESSION_ZLIB,
        uncompressed_size=declared,
    )
    return framed(metadata.SerializeToString(), body)


def broken_batch_message(payload: bytes, sequence_id: int) -> bytes:
    """A batch of two messages (its header plausible for its size) whose second one's
    SingleMessageMetadata does not parse."""
    body = _batch_message(payload, sequence_id) + struct.pack(">I", 3) + b"\xff\xff\xff"
    return framed(_batch_metadata(sequence_id, 2), body + bytes(16))


def connect() -> Any:
    command = BaseCommand(type=Type.CONNECT)
    command.connect.client_version = "raw-socket-test"
    command.connect.protocol_version = 19
    return command


def ping() -> Any:
    command = BaseCommand(type=Type.PING)
    command.ping.SetInParent()
    return command


def producer(topic: str, producer_id: int, request_id: int) -> Any:
    command = BaseCommand(type=Type.PRODUCER)
    command.producer.topic = topic
    command.producer.producer_id = producer_id
    command.producer.request_id = request_id
    return command


def send(producer_id: int, sequence_id: int) -> Any:
    command = BaseCommand(type=Type.SEND)
    command.send.producer_id = producer_id
    command.send.sequence_id = sequence_id
    command.send.num_messages = 1
    return command


def flow(consumer_id: int, permits: int) -> Any:
    command = BaseCommand(type=Type.FLOW)
    command.flow.consumer_id = consumer_id
    command.flow.messagePermits = permits
    return command


class RawConnection:
    """A client of the binary protocol on a plain socket: what it sends is exactly the
    bytes given; what it reads is parsed frame by frame."""

    def __init__(self, service_url: str) -> None:
        host, port = service_url.removeprefix("pulsar://").rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=READ_DEADLINE_S)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.local = "{}:{}".format(*self.sock.getsockname())

    def close(self) -> None:
        self.sock.close()

    def write(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _exactly(self, size: int) -> bytes | None:
        """``size`` bytes; None at EOF before the first of them."""
        data = b""
        while len(data) < size:
            chunk = self.sock.recv(size - len(data))
            if not chunk:
                if data:
                    raise AssertionError(f"EOF inside a frame after {len(data)} bytes")
                return None
            data += chunk
        return data

    def read(self) -> Any | None:
        """The next command from the broker (a payload after it is skipped); None at EOF."""
        head = self._exactly(4)
        if head is None:
            return None
        (total,) = struct.unpack(">I", head)
        body = self._exactly(total)
        assert body is not None, "EOF right after a frame's size"
        (size,) = struct.unpack_from(">I", body)
        return BaseCommand.FromString(body[4 : 4 + size])

    def expect(self, kind: int) -> Any:
        command = self.read()
        assert command is not None, f"connection closed while waiting for command {kind}"
        assert command.type == kind, f"expected command {kind}, got {command}"
        return command

    def read_until_closed(self) -> list[Any]:
        """Every command the broker sends until it closes the connection (a read that
        returns EOF); fails if the connection stays open past the deadline."""
        commands = []
        try:
            while (command := self.read()) is not None:
                commands.append(command)
        except TimeoutError:
            raise AssertionError(
                f"the broker kept the connection open; it sent {commands}"
            ) from None
        return commands

    def handshake(self) -> Any:
        self.write(frame(connect()))
        return self.expect(Type.CONNECTED)
