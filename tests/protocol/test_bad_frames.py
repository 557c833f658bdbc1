"""Frames that break Pulsar's binary protocol, sent over a raw socket: each closes its own
connection with the reason in the broker's log, while an official client connected at the
same time goes on producing and consuming. Well-formed frames are answered, however the
bytes are split across writes."""

from __future__ import annotations

import itertools
import re
import socket
import struct
from collections.abc import Iterator
from typing import Any

import pulsar
import pytest

from broker.pulsar_api import BaseCommand, ServerError, Type
from tests.conftest import ServedBrokerFactory
from tests.harness import (
    ServedBroker,
    eventually,
    new_topic,
    persistent,
    pulsar_bundle,
    short,
    topics_in_distinct_bundles,
)
from tests.protocol.raw import (
    RawConnection,
    connect,
    entry,
    frame,
    ping,
    producer,
    send,
    send_frame,
)

pytestmark = pytest.mark.slow

MAX_MESSAGE_SIZE = 1024 * 1024
#: Pulsar's frame limit: maxMessageSize plus room for the command and headers
MAX_FRAME = MAX_MESSAGE_SIZE + 10 * 1024

# ---------------------------------------------------------------------- the broker


class Bystander:
    """An official client with a producer and a consumer on their own topic, connected
    all the while: whatever a raw connection does must not touch it."""

    def __init__(self, broker: ServedBroker) -> None:
        self.client = pulsar.Client(broker.service_url, operation_timeout_seconds=20)
        topic = "persistent://public/default/bystander"
        self.consumer = self.client.subscribe(topic, "bystander")
        self.producer = self.client.create_producer(topic)
        self.rounds = itertools.count()

    def round_trip(self) -> None:
        """Three messages produced, then received in order and acked."""
        tag = next(self.rounds)
        sent = [f"{tag}-{index}".encode() for index in range(3)]
        for payload in sent:
            self.producer.send(payload)
        received = []
        for _ in sent:
            message = self.consumer.receive(20_000)
            self.consumer.acknowledge(message)
            received.append(message.data())
        assert received == sent

    def close(self) -> None:
        self.client.close()


@pytest.fixture(scope="module")
def broker_conf() -> dict[str, Any]:
    return {"maxMessageSize": MAX_MESSAGE_SIZE}


@pytest.fixture(scope="module")
def bystander(
    shared_served_broker: ServedBrokerFactory, broker_conf: dict[str, Any]
) -> Iterator[Bystander]:
    """An official client of the module's broker for all its tests (``broker`` is
    looked up per test)."""
    client = Bystander(shared_served_broker(**broker_conf))
    client.round_trip()
    yield client
    client.close()


def close_reason(broker: ServedBroker, connection: RawConnection) -> str:
    """The reason the broker logged for closing ``connection``, once it is logged."""
    line = re.compile(
        rf"closing pulsar connection from {re.escape(connection.local)}: (?P<reason>.*)"
    )

    def logged() -> str | None:
        found = line.search(broker.log())
        return found["reason"] if found else None

    reason: str = eventually(logged, f"the broker to log why it closed {connection.local}")
    return reason


# ---------------------------------------------------------------------- well-formed


def test_connect_is_answered_with_connected(broker: ServedBroker, raw: RawConnection) -> None:
    connected = raw.handshake().connected
    assert connected.server_version
    assert 1 <= connected.protocol_version <= 19
    assert connected.max_message_size == MAX_MESSAGE_SIZE


def test_ping_is_answered_with_pong_and_the_connection_stays_open(raw: RawConnection) -> None:
    raw.handshake()
    for _ in range(3):
        raw.write(frame(ping()))
        raw.expect(Type.PONG)


def test_frames_split_across_writes_or_sharing_one_are_all_answered(
    raw: RawConnection,
) -> None:
    for byte in frame(connect()):
        raw.write(bytes([byte]))
    raw.expect(Type.CONNECTED)
    raw.write(frame(ping()) * 3)
    for _ in range(3):
        raw.expect(Type.PONG)


def test_a_send_with_the_right_checksum_is_stored_and_receipted(
    broker: ServedBroker, raw: RawConnection
) -> None:
    raw.handshake()
    raw.write(frame(producer("persistent://public/default/raw-good", 1, 1)))
    raw.expect(Type.PRODUCER_SUCCESS)
    raw.write(send_frame(send(1, 0), entry(b"checked", 0)))
    receipt = raw.expect(Type.SEND_RECEIPT).send_receipt
    assert (receipt.producer_id, receipt.sequence_id) == (1, 0)
    stats = broker.ok("GET", "/admin/v2/persistent/public/default/raw-good/internalStats")
    assert stats["numberOfEntries"] == 1


#: entries a read's end cuts and whose rest is read into their own bytes (CutEntry:
#: 16-256 KiB), and one past that, whose parts are joined
CUT_ENTRIES = [20 * 1024, 130 * 1024, 250 * 1024, 300 * 1024]


@pytest.mark.parametrize("size", CUT_ENTRIES)
def test_a_large_send_whose_client_hangs_up_right_after_it_is_stored(
    broker: ServedBroker, client: pulsar.Client, size: int
) -> None:
    """A SEND cut at the end of a read whose last bytes come with the client's FIN (a
    client that sends and closes) is stored, as one that arrived in one read is. Its
    entry, completed by the read before the EOF, was handled at the loop's next
    callbacks, after the close had scheduled connection_lost: its producer's write then
    found the connection closed, and the message was lost."""
    topic = persistent(new_topic("hang-up"))
    consumer = client.subscribe(topic, "after")
    payload = bytes(range(256)) * (size // 256)
    data = send_frame(send(1, 0), entry(payload, 0))
    raw = RawConnection(broker.service_url)
    try:
        raw.handshake()
        raw.write(frame(producer(topic, 1, 1)))
        raw.expect(Type.PRODUCER_SUCCESS)
        raw.write(frame(ping()) + data[:-100])
        raw.expect(Type.PONG)  # the broker has read the frame's head: the frame is cut
        # the last bytes and the FIN go out together
        raw.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 1)
        raw.write(data[-100:])
        raw.sock.shutdown(socket.SHUT_WR)
    finally:
        raw.close()
    assert consumer.receive(20_000).data() == payload


# ---------------------------------------------------------------------- broken


BAD_FRAMES = [
    pytest.param(
        False, struct.pack(">I", 3) + b"\x08\x12\x00", r"frame size 3 .*too small", id="size-3"
    ),
    pytest.param(False, struct.pack(">I", 0), r"frame size 0 .*too small", id="size-0"),
    pytest.param(
        True,
        struct.pack(">II", 8, 100) + b"\x08\x12\x00\x00",
        r"command size 100 runs past the frame",
        id="command-past-the-frame",
    ),
    pytest.param(
        True,
        frame(BaseCommand(type=Type.NEW_TXN)),
        r"command type 50 without its newTxn field",
        id="NEW_TXN-without-its-body",
    ),
    pytest.param(
        True,
        frame(BaseCommand(type=Type.SEND_RECEIPT)),
        r"unknown or unsupported command type 7",
        id="SEND_RECEIPT-from-a-client",
    ),
    pytest.param(
        True, frame(BaseCommand(type=99)), r"unknown or unsupported command type 99", id="type-99"
    ),
    pytest.param(False, frame(ping()), r"ping before CONNECT", id="PING-before-CONNECT"),
    pytest.param(
        False,
        frame(producer("persistent://public/default/raw", 1, 1)),
        r"producer before CONNECT",
        id="PRODUCER-before-CONNECT",
    ),
    pytest.param(
        False,
        send_frame(send(1, 0), entry(b"early", 0)),
        r"SEND before CONNECT",
        id="SEND-before-CONNECT",
    ),
    pytest.param(
        False,
        struct.pack(">I", 64 * 1024 * 1024),
        rf"frame of {64 * 1024 * 1024} bytes is over the limit {MAX_FRAME}",
        id="64MiB-frame",
    ),
    pytest.param(
        True,
        struct.pack(">I", MAX_FRAME + 1),
        rf"frame of {MAX_FRAME + 1} bytes is over the limit {MAX_FRAME}",
        id="one-byte-over-the-limit",
    ),
    pytest.param(
        True,
        struct.pack(">II", 20, 16) + b"\xff" * 16,
        r"command does not parse",
        id="not-protobuf",
    ),
    pytest.param(
        True,
        frame(connect()),
        r"CONNECT on a connection that is connected already",
        id="second-CONNECT",
    ),
    pytest.param(
        True,
        frame(BaseCommand(type=Type.PRODUCER)),
        r"command type 5 without its producer field",
        id="PRODUCER-without-its-body",
    ),
]


@pytest.mark.parametrize(("connected", "data", "reason"), BAD_FRAMES)
def test_a_bad_frame_closes_its_connection_only(
    broker: ServedBroker,
    bystander: Bystander,
    raw: RawConnection,
    connected: bool,
    data: bytes,
    reason: str,
) -> None:
    if connected:
        raw.handshake()
    raw.write(data)
    assert raw.read_until_closed() == []
    assert re.search(reason, close_reason(broker, raw))
    bystander.round_trip()


def test_a_send_with_a_wrong_checksum_is_refused_then_its_connection_closed(
    broker: ServedBroker, bystander: Bystander, raw: RawConnection
) -> None:
    raw.handshake()
    raw.write(frame(producer("persistent://public/default/raw-corrupt", 7, 1)))
    raw.expect(Type.PRODUCER_SUCCESS)
    raw.write(send_frame(send(7, 42), entry(b"flipped", 42, corrupt_checksum=True)))

    answers = raw.read_until_closed()
    assert [command.type for command in answers] == [Type.SEND_ERROR]
    error = answers[0].send_error
    assert (error.producer_id, error.sequence_id) == (7, 42)
    assert error.error == ServerError.ChecksumError == 9
    assert "checksum" in close_reason(broker, raw)
    stats = broker.ok("GET", "/admin/v2/persistent/public/default/raw-corrupt/internalStats")
    assert stats["numberOfEntries"] == 0
    bystander.round_trip()


# ---------------------------------------------------------------------- producers


def test_a_send_for_a_producer_the_connection_does_not_have_closes_it(
    broker: ServedBroker, bystander: Bystander, raw: RawConnection
) -> None:
    # as Pulsar's ServerCnx: a client that sends for a producer it does not have is
    # broken, and its messages could be stored out of order; no SEND_ERROR is answered
    raw.handshake()
    raw.write(send_frame(send(99, 0), entry(b"nobody's", 0)))
    assert raw.read_until_closed() == []
    assert "SEND for producer 99" in close_reason(broker, raw)
    bystander.round_trip()


def test_a_send_in_flight_when_the_broker_closed_its_producer_is_dropped(
    broker: ServedBroker, bystander: Bystander, raw: RawConnection
) -> None:
    # a topic in a bundle of its own, so unloading it leaves the bystander's alone
    spared = pulsar_bundle("persistent://public/default/bystander")
    topic = next(
        t for t in topics_in_distinct_bundles("raw-unloaded") if pulsar_bundle(t) != spared
    )
    raw.handshake()
    raw.write(frame(producer(topic, 5, 1)))
    raw.expect(Type.PRODUCER_SUCCESS)
    broker.ok("PUT", f"/admin/v2/namespaces/public/default/{pulsar_bundle(topic)}/unload")
    assert raw.expect(Type.CLOSE_PRODUCER).close_producer.producer_id == 5
    # sent before the client saw the CLOSE_PRODUCER, as far as the broker can tell
    raw.write(send_frame(send(5, 0), entry(b"in flight", 0)))
    raw.write(frame(ping()))
    raw.expect(Type.PONG)  # the SEND was dropped unanswered; the connection is open
    # the client gets its producer back, and its resend is stored
    raw.write(frame(producer(topic, 5, 2)))
    raw.expect(Type.PRODUCER_SUCCESS)
    raw.write(send_frame(send(5, 0), entry(b"in flight", 0)))
    assert raw.expect(Type.SEND_RECEIPT).send_receipt.sequence_id == 0
    stats = broker.ok("GET", f"/admin/v2/persistent/{short(topic)}/internalStats")
    assert stats["numberOfEntries"] == 1
    bystander.round_trip()


def test_a_payload_over_max_message_size_is_refused_and_its_producer_goes_on(
    broker: ServedBroker, bystander: Bystander, raw: RawConnection
) -> None:
    # within the frame limit (maxMessageSize plus 10 KiB), so the frame itself is fine
    raw.handshake()
    raw.write(frame(producer("persistent://public/default/raw-oversize", 3, 1)))
    raw.expect(Type.PRODUCER_SUCCESS)
    raw.write(send_frame(send(3, 0), entry(b"x" * (MAX_MESSAGE_SIZE + 1), 0)))
    error = raw.expect(Type.SEND_ERROR).send_error
    assert (error.producer_id, error.sequence_id) == (3, 0)
    assert error.error == ServerError.NotAllowedError
    assert "maxMessageSize" in error.message
    raw.write(send_frame(send(3, 1), entry(b"x" * MAX_MESSAGE_SIZE, 1)))
    assert raw.expect(Type.SEND_RECEIPT).send_receipt.sequence_id == 1
    stats = broker.ok("GET", "/admin/v2/persistent/public/default/raw-oversize/internalStats")
    assert stats["numberOfEntries"] == 1  # the payload at the limit only
    bystander.round_trip()
