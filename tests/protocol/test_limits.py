"""The binary protocol's limits, driven by the official Pulsar client against a served
broker: connections over brokerMaxConnections or brokerMaxConnectionsPerIp are closed at
accept; maxProducersPerTopic answers ProducerBusy; maxConsumersPerTopic and
maxConsumersPerSubscription ConsumerBusy; maxSubscriptionsPerTopic and
maxTopicsPerNamespace NotAllowedError. Each count goes down again when what it counts
goes away, and the next one is admitted."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator

import pulsar
import pytest

from broker.protocol.frames import command_frame, parse_command
from broker.pulsar_api import BaseCommand, Type
from tests.conftest import ServedBrokerFactory
from tests.harness import ServedBroker, eventually, new_topic

pytestmark = pytest.mark.slow

DEADLINE_S = 20
#: how long a client over a connection limit keeps trying before it gives up
REFUSED_CLIENT_TIMEOUT_S = 1  # whole seconds; an admitted one takes milliseconds

#: limits that do not get in each other's way in these tests: one broker serves them
PER_TOPIC_LIMITS = {
    "maxProducersPerTopic": 2,
    "maxConsumersPerSubscription": 2,
    "maxSubscriptionsPerTopic": 2,
}
#: and these (maxConsumersPerTopic's test uses three subscriptions)
PRODUCER_AND_CONSUMER_LIMITS = {"maxProducersPerTopic": 1, "maxConsumersPerTopic": 2}


@pytest.fixture
def clients() -> Iterator[list[pulsar.Client]]:
    """Clients made by a test; those it left open are closed at the end."""
    made: list[pulsar.Client] = []
    yield made
    for client in made:
        with contextlib.suppress(pulsar.AlreadyClosed):
            client.close()


def admin_path(topic: str) -> str:
    return "/admin/v2/persistent/" + topic.removeprefix("persistent://")


def open_client(
    broker: ServedBroker, made: list[pulsar.Client], timeout_s: int = DEADLINE_S
) -> pulsar.Client:
    client = pulsar.Client(broker.service_url, operation_timeout_seconds=timeout_s)
    made.append(client)
    return client


def raw_connection(broker: ServedBroker, source_ip: str) -> socket.socket:
    """A TCP connection to the binary port from ``source_ip`` (any 127.x.y.z is this
    host's loopback, so one machine can be several client addresses)."""
    host, port = broker.service_url.removeprefix("pulsar://").rsplit(":", 1)
    return socket.create_connection(
        (host, int(port)), timeout=DEADLINE_S, source_address=(source_ip, 0)
    )


def closed_without_a_word(connection: socket.socket) -> bool:
    """The broker closed ``connection`` before it sent anything (a TimeoutError after
    the deadline if it holds it open)."""
    return connection.recv(1) == b""


def answers_connect(connection: socket.socket) -> bool:
    """The broker answers CONNECT on ``connection`` with CONNECTED."""
    command = BaseCommand(type=Type.CONNECT)
    command.connect.client_version = "limits-test"
    command.connect.protocol_version = 19
    connection.sendall(command_frame(command))
    stream = connection.makefile("rb")
    size = int.from_bytes(stream.read(4), "big")
    answer, _ = parse_command(memoryview(stream.read(size)))
    return bool(answer.type == Type.CONNECTED)


def produces(client: pulsar.Client, topic: str) -> bool:
    producer = client.create_producer(topic)
    producer.send(b"admitted")
    producer.close()
    return True


# ---------------------------------------------------------------------- connections


def assert_client_refused(broker: ServedBroker, clients: list[pulsar.Client], topic: str) -> None:
    """A new client cannot get a connection: the official client retries the closed
    connection until its operation timeout, so that is all it reports."""
    refused = open_client(broker, clients, REFUSED_CLIENT_TIMEOUT_S)
    with pytest.raises((pulsar.Timeout, pulsar.ConnectError)):
        refused.create_producer(topic)
    refused.close()


def test_connections_over_broker_max_connections_are_closed_until_one_closes(
    served_broker: ServedBrokerFactory, clients: list[pulsar.Client]
) -> None:
    broker = served_broker(brokerMaxConnections=1)
    topic = new_topic("limits", full=True)
    first = open_client(broker, clients)
    producer = first.create_producer(topic)  # the client's one connection: the limit
    # another address is over the total limit too
    with raw_connection(broker, "127.0.0.2") as refused:
        assert closed_without_a_word(refused)
    eventually(
        lambda: "the listener has its maximum of 1 connections" in broker.log(),
        "the broker to log why it closed the connection",
    )
    assert_client_refused(broker, clients, topic)
    producer.send(b"the admitted connection still works")
    first.close()
    # the count went down: a new client gets the free connection (it retries while the
    # broker has not yet seen the first one close)
    assert produces(open_client(broker, clients), topic)


def test_broker_max_connections_per_ip_closes_a_second_connection_from_one_address(
    served_broker: ServedBrokerFactory, clients: list[pulsar.Client]
) -> None:
    broker = served_broker(brokerMaxConnectionsPerIp=1)
    topic = new_topic("limits", full=True)
    first = open_client(broker, clients)
    producer = first.create_producer(topic)  # from 127.0.0.1
    with raw_connection(broker, "127.0.0.1") as refused:
        assert closed_without_a_word(refused)
    eventually(
        lambda: "127.0.0.1 has its maximum of 1 connections" in broker.log(),
        "the broker to log why it closed the connection",
    )
    with raw_connection(broker, "127.0.0.2") as elsewhere:
        assert answers_connect(elsewhere)  # another address has a count of its own
    assert_client_refused(broker, clients, topic)
    producer.close()
    first.close()
    assert produces(open_client(broker, clients), topic)


# ---------------------------------------------------------------------- producers


def test_max_producers_per_topic_answers_producer_busy_until_a_producer_closes(
    shared_served_broker: ServedBrokerFactory, clients: list[pulsar.Client]
) -> None:
    broker = shared_served_broker(**PER_TOPIC_LIMITS)
    client = open_client(broker, clients)
    topic = new_topic("limits", full=True)
    producers = [client.create_producer(topic) for _ in range(2)]
    with pytest.raises(pulsar.ProducerBusy):
        client.create_producer(topic)
    assert produces(client, new_topic("limits", full=True))  # the limit is per topic
    producers[0].close()
    producers.append(client.create_producer(topic))
    for producer in producers[1:]:
        producer.send(b"both admitted producers publish")
    stats = broker.ok("GET", admin_path(topic) + "/stats")
    assert stats["msgInCounter"] == 2


def websocket_producer(broker: ServedBroker, topic: str) -> tuple[socket.socket, int, bytes]:
    """Ask for a WebSocket producer session of ``topic`` on a raw socket: the socket,
    the answer's status and its body (none for 101: the session is open while the
    socket is)."""
    address = broker.http_url.removeprefix("http://")
    host, port = address.rsplit(":", 1)
    connection = socket.create_connection((host, int(port)), timeout=DEADLINE_S)
    path = "/ws/v2/producer/persistent/" + topic.removeprefix("persistent://")
    connection.sendall(
        (
            f"GET {path} HTTP/1.1\r\nHost: {address}\r\nConnection: Upgrade\r\n"
            "Upgrade: websocket\r\nSec-WebSocket-Version: 13\r\n"
            "Sec-WebSocket-Key: bGltaXRzLXRlc3Qta2V5IQ==\r\n\r\n"
        ).encode()
    )
    stream = connection.makefile("rb")
    status = int(stream.readline().split()[1])
    length = 0
    while (line := stream.readline()) not in (b"\r\n", b""):
        name, _, value = line.decode().partition(":")
        if name.lower() == "content-length":
            length = int(value)
    return connection, status, stream.read(length) if status != 101 else b""


def test_binary_and_websocket_producers_share_max_producers_per_topic(
    shared_served_broker: ServedBrokerFactory, clients: list[pulsar.Client]
) -> None:
    broker = shared_served_broker(**PRODUCER_AND_CONSUMER_LIMITS)
    client = open_client(broker, clients)
    topic = new_topic("limits", full=True)
    producer = client.create_producer(topic)
    refused, status, body = websocket_producer(broker, topic)
    refused.close()
    assert status == 409 and b"maxProducersPerTopic=1" in body, (status, body)
    producer.close()
    session, status, _ = websocket_producer(broker, topic)
    with session:
        assert status == 101
        with pytest.raises(pulsar.ProducerBusy):
            client.create_producer(topic)

    def binary_admitted() -> bool:
        # the broker counts the session out once it has seen its socket close
        try:
            client.create_producer(topic).close()
        except pulsar.ProducerBusy:
            return False
        return True

    eventually(binary_admitted, "the closed session's place for a binary producer")


# ---------------------------------------------------------------------- consumers


def test_max_consumers_per_subscription_answers_consumer_busy_until_one_closes(
    shared_served_broker: ServedBrokerFactory, clients: list[pulsar.Client]
) -> None:
    broker = shared_served_broker(**PER_TOPIC_LIMITS)
    client = open_client(broker, clients)
    topic = new_topic("limits", full=True)
    shared = pulsar.ConsumerType.Shared
    consumers = [client.subscribe(topic, "s", consumer_type=shared) for _ in range(2)]
    with pytest.raises(pulsar.ConsumerBusy):
        client.subscribe(topic, "s", consumer_type=shared)
    client.subscribe(topic, "other", consumer_type=shared).close()  # per subscription
    consumers[0].close()
    client.subscribe(topic, "s", consumer_type=shared).close()


def test_max_consumers_per_topic_answers_consumer_busy_across_subscriptions(
    shared_served_broker: ServedBrokerFactory, clients: list[pulsar.Client]
) -> None:
    broker = shared_served_broker(**PRODUCER_AND_CONSUMER_LIMITS)
    client = open_client(broker, clients)
    topic = new_topic("limits", full=True)
    shared = pulsar.ConsumerType.Shared
    first = client.subscribe(topic, "a", consumer_type=shared)
    client.subscribe(topic, "b", consumer_type=shared)
    with pytest.raises(pulsar.ConsumerBusy):
        client.subscribe(topic, "a", consumer_type=shared)
    with pytest.raises(pulsar.ConsumerBusy):
        client.subscribe(topic, "c", consumer_type=shared)
    client.subscribe(new_topic("limits", full=True), "a", consumer_type=shared).close()  # per topic
    first.close()
    client.subscribe(topic, "c", consumer_type=shared).close()


# ---------------------------------------------------------------------- subscriptions, topics


def test_max_subscriptions_per_topic_answers_not_allowed_until_one_is_deleted(
    shared_served_broker: ServedBrokerFactory, clients: list[pulsar.Client]
) -> None:
    broker = shared_served_broker(**PER_TOPIC_LIMITS)
    client = open_client(broker, clients)
    topic = new_topic("limits", full=True)
    shared = pulsar.ConsumerType.Shared
    client.subscribe(topic, "a", consumer_type=shared)
    second = client.subscribe(topic, "b", consumer_type=shared)
    with pytest.raises(pulsar.NotAllowedError):
        client.subscribe(topic, "c")
    # a consumer of a subscription that exists is no new subscription
    client.subscribe(topic, "a", consumer_type=shared).close()
    # a closed consumer leaves its durable subscription behind: still two
    second.close()
    with pytest.raises(pulsar.NotAllowedError):
        client.subscribe(topic, "c")
    client.subscribe(topic, "b", consumer_type=shared).unsubscribe()
    client.subscribe(topic, "c").close()


def test_max_topics_per_namespace_answers_not_allowed_until_one_is_deleted(
    served_broker: ServedBrokerFactory, clients: list[pulsar.Client]
) -> None:
    broker = served_broker(maxTopicsPerNamespace=2)
    client = open_client(broker, clients)
    first, second, third = (
        new_topic("limits", full=True),
        new_topic("limits", full=True),
        new_topic("limits", full=True),
    )
    assert produces(client, first)
    assert produces(client, second)
    with pytest.raises(pulsar.NotAllowedError):
        client.create_producer(third)
    with pytest.raises(pulsar.NotAllowedError):
        client.subscribe(third, "s")
    assert produces(client, first)  # topics that exist are used as before
    names = broker.ok("GET", "/admin/v2/persistent/public/default")
    assert third not in names
    broker.ok("DELETE", admin_path(second))
    assert produces(client, third)
