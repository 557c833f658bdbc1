"""A command flood cannot stall the broker: one connection sends FLOOD PRODUCER (or
SUBSCRIBE) commands for a topic still loading, then hangs up; meanwhile another client
of the same broker (the official one) keeps producing and consuming, every operation
answered within RESPONSIVE_S.

Before the fix, every request waiting for the topic's load was shielded, and the
hang-up cancelled them all, each scanning every other's callback: 32k requests held
the loop for minutes (the issue measured 45 s for 32k; here, on a busy 2-core machine,
the other client's worst send and receive took 133 s; 0.3 s after the fix).
A delay injected into the metadata store's reads keeps the flooded topic's load under
way while the flood arrives. The load is another connection's: cancelling the request
that started it fails the load, and every waiter with it at once (before the fix too)."""

from __future__ import annotations

import contextlib
import select
import struct
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pulsar
import pytest

from broker.pulsar_api import BaseCommand, ServerError, Type
from broker.tasks import COOPERATIVE_BATCH
from tests.conftest import ServedBrokerFactory
from tests.harness import (
    ServedBroker,
    b64,
    eventually,
    new_topic,
    new_topic_and_path,
    persistent,
    rss_mib,
)
from tests.protocol.raw import (
    READ_DEADLINE_S,
    RawConnection,
    entry,
    flow,
    frame,
    ping,
    producer,
    send,
    send_frame,
)

pytestmark = pytest.mark.slow

#: commands of one flood: past brokerlabMaxPendingRequestsPerConnection, so the broker
#: closes the connection itself, and enough that the old quadratic cancel took minutes
FLOOD = 32_000
#: the bound on every operation of the other client while the flood is handled; a
#: responsiveness bound, not a speed claim: the old code missed it by minutes
RESPONSIVE_S = 5.0
#: how long the other client keeps probing after the flood's connection closed: the
#: hang-up's cancellations start as the broker reads its end of the connection, right as
#: the first probe goes out, so a loop they hold misses RESPONSIVE_S on that first probe
PROBE_S = 1.5
#: a metadata read takes this long: the flooded topic's load stays under way while the
#: flood arrives (the bystander, loaded before, reads no metadata)
METADATA_GET_DELAY_MS = 20_000


def subscribe(topic: str, consumer_id: int, request_id: int) -> Any:
    command = BaseCommand(type=Type.SUBSCRIBE)
    command.subscribe.topic = topic
    command.subscribe.subscription = "flood"
    command.subscribe.subType = 1  # Shared
    command.subscribe.consumer_id = consumer_id
    command.subscribe.request_id = request_id
    return command


@pytest.fixture
def broker(served_broker: ServedBrokerFactory) -> ServedBroker:
    """A broker of its own per flood: one flood's aftermath never meets the next."""
    return served_broker()


@contextlib.contextmanager
def flood_then_hang_up(
    broker: ServedBroker, command: Callable[[str, int, int], Any]
) -> Iterator[None]:
    """One connection asks for a topic nobody used yet (its load starts, and stays under
    way); another sends FLOOD commands for it, then a PING, and once the broker has
    answered that (so it has read every command before it) or closed the connection,
    hangs up. The first stays for the block."""
    topic = persistent(new_topic("flooded"))
    loader = RawConnection(broker.service_url)
    try:
        loader.handshake()
        loader.write(frame(command(topic, 0, 0)))
        frames = b"".join(frame(command(topic, i, i)) for i in range(FLOOD)) + frame(ping())
        flooder = RawConnection(broker.service_url)
        try:
            flooder.handshake()
            with contextlib.suppress(OSError):  # the broker closed it first: past its bound
                flooder.write(frames)
                while (answer := flooder.read()) is not None and answer.type != Type.PONG:
                    pass
        finally:
            flooder.close()
        yield
    finally:
        loader.close()


@contextlib.contextmanager
def bystander(broker: ServedBroker) -> Iterator[tuple[pulsar.Producer, pulsar.Consumer]]:
    """Another client of ``broker``: a producer and a Shared consumer of a topic of its
    own, ready (creating them takes several slow metadata operations) and probed once
    before the flood, each operation bounded by RESPONSIVE_S."""
    client = pulsar.Client(broker.service_url, operation_timeout_seconds=int(RESPONSIVE_S))
    try:
        topic = persistent(new_topic("bystander"))
        producer_ = client.create_producer(
            topic, send_timeout_millis=int(RESPONSIVE_S * 1000), batching_enabled=False
        )
        consumer = client.subscribe(topic, "probe", consumer_type=pulsar.ConsumerType.Shared)
        probe(producer_, consumer, 0)
        yield producer_, consumer
    finally:
        client.close()


def probe(producer_: pulsar.Producer, consumer: pulsar.Consumer, until: float) -> int:
    """Produce and receive one message at a time until ``until``; every send and
    every receive must be answered within RESPONSIVE_S (the producer's send timeout,
    the receive's). Returns the round trips made."""
    rounds = 0
    while time.monotonic() < until or rounds < 3:
        payload = f"probe-{rounds}".encode()
        producer_.send(payload)  # raises pulsar.Timeout past the bound
        message = consumer.receive(timeout_millis=int(RESPONSIVE_S * 1000))
        assert message.data() == payload
        consumer.acknowledge(message)
        rounds += 1
    return rounds


def get_schema(topic: str, _id: int, request_id: int) -> Any:
    command = BaseCommand(type=Type.GET_SCHEMA)
    command.getSchema.topic = topic
    command.getSchema.request_id = request_id
    return command


def topics_of_namespace(_topic: str, _id: int, request_id: int) -> Any:
    command = BaseCommand(type=Type.GET_TOPICS_OF_NAMESPACE)
    command.getTopicsOfNamespace.namespace = "public/default"
    command.getTopicsOfNamespace.request_id = request_id
    return command


def partitioned_metadata_of(topic: str, _id: int, request_id: int) -> Any:
    return partitioned_metadata(topic, request_id)


#: the requests a flood is made of: those that wait for a topic's load (PRODUCER,
#: SUBSCRIBE), for its schema, for the metadata store (its reads slowed below)
FLOODS = {
    "PRODUCER": producer,
    "SUBSCRIBE": subscribe,
    "GET_SCHEMA": get_schema,
    "GET_TOPICS_OF_NAMESPACE": topics_of_namespace,
    "PARTITIONED_METADATA": partitioned_metadata_of,
}


@pytest.mark.parametrize("command", list(FLOODS.values()), ids=list(FLOODS))
def test_a_flood_then_a_hang_up_leaves_other_clients_served(
    broker: ServedBroker, command: Callable[[str, int, int], Any]
) -> None:
    # the bystander's topic, producer and consumer are ready before the flood (creating
    # them takes several slow metadata operations)
    with bystander(broker) as (producer_, consumer):
        fault = {"operation": "metadataGet", "delayMs": METADATA_GET_DELAY_MS}
        broker.ok("PUT", "/admin/v2/brokerlab/faults", fault)
        with flood_then_hang_up(broker, command):
            assert probe(producer_, consumer, time.monotonic() + PROBE_S) >= 3
    broker.ok("GET", "/admin/v2/brokers/health")


#: ACKs of the flood below: 26 MB of cheap commands; read a buffer after another in one
#: turn of the loop, 300,000 held it 2.7 s and 1,000,000 held another client's round
#: trips 10.7 s (0.1 s with the per-turn share)
ACK_FLOOD = 1_000_000


def test_a_flood_of_acks_then_a_hang_up_leaves_other_clients_served(
    broker: ServedBroker,
) -> None:
    """ACKs are no requests (no pending bound holds them) and each is cheap, but a
    connection sending them as fast as the broker reads gets a share of each turn of the
    loop (FRAMES_PER_TURN frames), so another client's sends and receives stay within
    RESPONSIVE_S while the flood is read, and after the hang-up."""
    with bystander(broker) as (producer_, consumer):
        flooder = RawConnection(broker.service_url)
        try:
            flooder.handshake()
            flooder.write(frame(subscribe(persistent(new_topic("acked")), 1, 1)))
            flooder.expect(Type.SUCCESS)
            acks = []
            for index in range(1000):  # a thousand kinds, over and over
                command = BaseCommand(type=Type.ACK)
                command.ack.consumer_id = 1
                command.ack.ack_type = 0  # individual
                message_id = command.ack.message_id.add()
                message_id.ledgerId, message_id.entryId = 1 + index % 7, index
                acks.append(frame(command))
            flood = b"".join(acks) * (ACK_FLOOD // 1000)
            sender = threading.Thread(target=flooder.sock.sendall, args=(flood,))
            sender.start()
            while sender.is_alive():  # the broker is reading the flood
                probe(producer_, consumer, 0)
            sender.join()
        finally:
            flooder.close()
        assert probe(producer_, consumer, time.monotonic() + PROBE_S) >= 3
    broker.ok("GET", "/admin/v2/brokers/health")


def partitioned_metadata(topic: str, request_id: int) -> Any:
    command = BaseCommand(type=Type.PARTITIONED_METADATA)
    command.partitionMetadata.topic = topic
    command.partitionMetadata.request_id = request_id
    return command


def test_lookups_past_max_concurrent_lookup_request_are_answered_too_many_requests(
    served_broker: ServedBrokerFactory,
) -> None:
    """As Pulsar's lookup semaphore: one lookup more than maxConcurrentLookupRequest in
    flight is refused at once with TooManyRequests; once the first is answered, the next
    one is served."""
    broker = served_broker(maxConcurrentLookupRequest=1)
    raw = RawConnection(broker.service_url)
    try:
        raw.handshake()
        slow_reads = {"operation": "metadataGet", "delayMs": 1000}  # the first stays in flight
        broker.ok("PUT", "/admin/v2/brokerlab/faults", slow_reads)
        topic = persistent(new_topic("looked-up"))
        raw.write(frame(partitioned_metadata(topic, 1)) + frame(partitioned_metadata(topic, 2)))
        first = raw.expect(Type.PARTITIONED_METADATA_RESPONSE).partitionMetadataResponse
        second = raw.expect(Type.PARTITIONED_METADATA_RESPONSE).partitionMetadataResponse
        assert (first.request_id, first.error) == (2, ServerError.TooManyRequests)
        assert second.request_id == 1 and not second.HasField("error")
        raw.write(frame(partitioned_metadata(topic, 3)))
        third = raw.expect(Type.PARTITIONED_METADATA_RESPONSE).partitionMetadataResponse
        assert third.request_id == 3 and not third.HasField("error")
    finally:
        raw.close()


def test_a_connection_past_its_pending_requests_is_closed_and_others_are_not(
    served_broker: ServedBrokerFactory,
) -> None:
    """brokerlabMaxPendingRequestsPerConnection=3: a fourth request while three wait
    for a loading topic closes that connection, unanswered; a connection with three
    pending stays."""
    broker = served_broker(brokerlabMaxPendingRequestsPerConnection=3)
    slow_reads = {"operation": "metadataGet", "delayMs": 60_000}
    broker.ok("PUT", "/admin/v2/brokerlab/faults", slow_reads)
    topic = persistent(new_topic("pending"))
    within, past = RawConnection(broker.service_url), RawConnection(broker.service_url)
    try:
        within.handshake()
        past.handshake()
        within.write(b"".join(frame(producer(topic, i, i)) for i in range(3)))
        past.write(b"".join(frame(producer(topic, i, i)) for i in range(4)))
        assert past.read_until_closed() == []
        within.write(frame(ping()))
        within.expect(Type.PONG)
    finally:
        within.close()
        past.close()


def test_a_hang_up_of_many_consumers_releases_each_and_their_messages_go_on(
    broker: ServedBroker,
) -> None:
    """One connection holds more consumers than the broker lets go in one turn of its
    loop (COOPERATIVE_BATCH), the first ones handed a message each; after it hangs up,
    every consumer is released (a batch a turn) and the messages they held reach the
    subscription's next consumer."""
    topic, path = new_topic_and_path("many-consumers")
    count, held = 3 * COOPERATIVE_BATCH + 1, 10
    raw = RawConnection(broker.service_url)
    try:
        raw.handshake()
        raw.write(b"".join(frame(subscribe(topic, i, i)) for i in range(count)))
        answered = 0
        while answered < count:
            answer = raw.read()
            assert answer is not None, "the broker closed the connection"
            assert answer.type == Type.SUCCESS, answer
            answered += 1
        for index in range(held):
            broker.ok("POST", f"/topics/{path}", {"messages": [{"payload": b64(f"m{index}")}]})
        raw.write(b"".join(frame(flow(i, 1)) for i in range(held)) + frame(ping()))
        delivered = 0
        while delivered < held:
            answer = raw.read()
            assert answer is not None, "the broker closed the connection"
            delivered += answer.type == Type.MESSAGE
    finally:
        raw.close()

    def consumers_left() -> int:
        stats = broker.ok("GET", f"/admin/v2/{path}/stats")
        return len(stats["subscriptions"]["flood"]["consumers"])

    eventually(lambda: consumers_left() == 0, lambda: f"{consumers_left()} consumers left")
    client = pulsar.Client(broker.service_url)
    try:
        consumer = client.subscribe(topic, "flood", consumer_type=pulsar.ConsumerType.Shared)
        got = {consumer.receive(timeout_millis=10_000).data() for _ in range(held)}
        assert got == {f"m{index}".encode() for index in range(held)}
    finally:
        client.close()


#: PINGs the client below may send (about 12 bytes each, as is each PONG): the broker
#: answering every one of them unread held some 170 MiB more (5,000,000: 420 MiB more)
UNREAD_PINGS = 2_000_000
#: how much the broker's resident memory may grow meanwhile: the output over the high
#: water mark (64 KiB), one read of requests held unparsed (256 KiB), allocator slack
UNREAD_BOUND_MIB = 24
#: no byte of the client's taken by the broker for this long: it has stopped reading (a
#: deadline, not a wait: a broker still reading moves the test on at once)
STOPPED_S = 3.0


def test_requests_whose_answers_are_not_read_stop_being_read(broker: ServedBroker) -> None:
    """pulsarChannelPauseReceivingRequestsIfUnwritable (PIP-434; apache/pulsar#24423): a
    client that keeps sending requests (PINGs here; lookups, topic lists and schemas
    alike) and reads none of the answers is not read once its unread output passes the
    high water mark, so the broker holds about that, not every answer; once the client
    reads, every request it sent is answered, in order, and the connection goes on."""
    pid = broker.process.pid  # type: ignore[union-attr]
    raw = RawConnection(broker.service_url)
    try:
        raw.handshake()
        ping_frame = frame(ping())
        chunk = ping_frame * 10_000
        total = len(ping_frame) * UNREAD_PINGS
        before = rss_mib(pid)
        peak = before
        sent = 0
        raw.sock.setblocking(False)
        while sent < total:
            if not select.select([], [raw.sock], [], STOPPED_S)[1]:
                break  # the broker stopped reading
            with contextlib.suppress(BlockingIOError):
                sent += raw.sock.send(chunk[: min(len(chunk), total - sent)])
            peak = max(peak, rss_mib(pid))
        raw.sock.setblocking(True)
        raw.sock.settimeout(READ_DEADLINE_S)
        broker.ok("GET", "/admin/v2/brokers/health")  # the broker is done with what it read
        peak = max(peak, rss_mib(pid))
        print(f"{sent // len(ping_frame):,} PINGs taken; broker RSS {before:.0f} -> {peak:.0f}")
        assert sent < total, "the broker read every request while none of its answers was"
        assert peak - before < UNREAD_BOUND_MIB, (before, peak)

        # the client reads: the rest of a PING cut by the stop goes out meanwhile, and
        # every PING sent is answered
        rest = -sent % len(ping_frame)
        finisher = threading.Thread(target=raw.sock.sendall, args=(ping_frame[-rest:],))
        if rest:
            finisher.start()
        expected = (sent + rest) // len(ping_frame)
        answered = 0
        pending = b""
        while answered < expected:
            data = raw.sock.recv(1 << 20)
            assert data, f"the broker closed the connection after {answered} PONGs"
            pending += data
            offset = 0
            while len(pending) - offset >= 4:
                (size,) = struct.unpack_from(">I", pending, offset)
                if len(pending) - offset - 4 < size:
                    break
                (command_size,) = struct.unpack_from(">I", pending, offset + 4)
                body = pending[offset + 8 : offset + 8 + command_size]
                assert BaseCommand.FromString(body).type == Type.PONG
                offset += 4 + size
                answered += 1
            pending = pending[offset:]
        if rest:
            finisher.join()
        assert pending == b""
        raw.write(ping_frame)
        raw.expect(Type.PONG)
    finally:
        raw.close()


@pytest.mark.parametrize("command", [producer, subscribe], ids=["producers", "consumers"])
def test_a_connection_past_its_producers_or_consumers_is_closed_and_others_are_not(
    served_broker: ServedBrokerFactory, command: Callable[[str, int, int], Any]
) -> None:
    """brokerlabMaxProducersPerConnection / brokerlabMaxConsumersPerConnection = 3: a
    connection holding three that asks for a fourth is closed, unanswered, and what it
    held is let go; so is one asking for four at once (those being created count); a
    connection with three goes on, and asking again for one it has is answered again."""
    broker = served_broker(
        brokerlabMaxProducersPerConnection=3, brokerlabMaxConsumersPerConnection=3
    )
    topic, path = new_topic_and_path("per-connection")
    within, past = RawConnection(broker.service_url), RawConnection(broker.service_url)
    success = Type.PRODUCER_SUCCESS if command is producer else Type.SUCCESS
    try:
        within.handshake()
        past.handshake()
        for connection in (within, past):
            connection.write(b"".join(frame(command(topic, i, i)) for i in range(3)))
            for _ in range(3):
                connection.expect(success)
        past.write(frame(command(topic, 3, 3)))
        assert past.read_until_closed() == []
        eager = RawConnection(broker.service_url)
        try:
            eager.handshake()
            eager.write(b"".join(frame(command(topic, i, i)) for i in range(4)))
            assert eager.read_until_closed() == []
        finally:
            eager.close()
        within.write(frame(command(topic, 2, 4)))  # one it has: answered again
        answer = within.expect(success)
        field = answer.producer_success if command is producer else answer.success
        assert field.request_id == 4

        def held() -> int:
            stats = broker.ok("GET", f"/admin/v2/{path}/stats")
            if command is producer:
                return len(stats["publishers"])
            return len(stats["subscriptions"]["flood"]["consumers"])

        eventually(lambda: held() == 3, lambda: f"{held()} held, not the 3 of the open one")
    finally:
        within.close()
        past.close()


#: connections below that each send the head of a SEND of a 256 KiB entry, and no more
HEADS = 600
#: how much the broker's resident memory may grow meanwhile: the connections' own
#: state, CUT_ENTRIES_MAX_BYTES (16 MiB) of entries read into, allocator slack; each
#: head made 256 KiB its connection's before (600: 150 MiB)
HEADS_BOUND_MIB = 48


def test_frames_that_never_finish_hold_about_what_arrived_of_them(broker: ServedBroker) -> None:
    """A frame cut at the end of a read whose large entry is read into bytes of its own
    (a CutEntry, made whole-sized when the frame's head arrives) costs the broker its
    entry's size before the rest comes: HEADS connections sending the head of a 256 KiB
    entry, and no more, hold only CUT_ENTRIES_MAX_BYTES of them; the others keep what
    arrived. Each connection's PING, in the same write as its head, is answered: the
    broker read both."""
    pid = broker.process.pid  # type: ignore[union-attr]
    topic = persistent(new_topic("heads"))
    head = send_frame(send(1, 0), entry(bytes(256 * 1024 - 100), 0))[:200]
    before = rss_mib(pid)
    connections = []
    try:
        for _ in range(HEADS):
            connection = RawConnection(broker.service_url)
            connections.append(connection)
            connection.handshake()
            connection.write(frame(producer(topic, 1, 1)))
            connection.expect(Type.PRODUCER_SUCCESS)
            connection.write(frame(ping()) + head)
            connection.expect(Type.PONG)
        grown = rss_mib(pid) - before
        print(f"{HEADS} heads of 256 KiB entries: broker RSS +{grown:.0f} MiB")
        assert grown < HEADS_BOUND_MIB, grown
    finally:
        for connection in connections:
            connection.close()
    broker.ok("GET", "/admin/v2/brokers/health")
