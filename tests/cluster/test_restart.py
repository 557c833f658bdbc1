"""Restarting one broker of two, with the official client connected: a graceful restart
hands the owner's topics to the other broker and the client follows by itself, every
unacknowledged message redelivered and nothing acknowledged coming back; a kill, with
syncMode=always and a short session, loses no message the producer had a receipt for.
And the restart route's errors."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pulsar  # type: ignore[import-untyped, unused-ignore]
import pytest

from tests.cluster.conftest import owner_in_listing
from tests.conftest import ServedBrokerFactory
from tests.harness import (
    Answer,
    ServedBroker,
    eventually,
    pulsar_bundle,
    short,
    topics_in_distinct_bundles,
)

pytestmark = pytest.mark.slow

RECEIVE_MS = 20_000
#: long enough for the test to see broker 0 down and look its topic up meanwhile
DOWNTIME_MS = 2000
RESTART = "/admin/v2/brokerlab/brokers/{index}/restart"
FAULTS = "/admin/v2/brokerlab/faults"

ClientFactory = Callable[[str], pulsar.Client]


def owned_by_zero(cluster: ServedBroker, prefix: str) -> str:
    """A topic of broker 0: the first bundle looked up goes to broker 0."""
    topic = topics_in_distinct_bundles(prefix, 1)[0]
    assert cluster.owner(topic, asking=1) == 0
    assert owner_in_listing(cluster.listing(), pulsar_bundle(topic)) == 0
    return topic


def subscription(cluster: ServedBroker, broker: int, topic: str) -> dict[str, Any]:
    stats = cluster.ok("GET", f"/admin/v2/persistent/{short(topic)}/stats", broker=broker)
    result: dict[str, Any] = stats["subscriptions"]["shared"]
    return result


class Restart:
    """A restart asked of broker 1 in a thread (the route answers once broker 0 is up)."""

    def __init__(self, cluster: ServedBroker, mode: str, downtime_ms: int) -> None:
        self.cluster = cluster
        self.answer: Answer | None = None
        path = RESTART.format(index=0) + f"?mode={mode}&downtimeMs={downtime_ms}"
        self._thread = threading.Thread(target=self._run, args=(path,), daemon=True)
        self._thread.start()
        eventually(
            lambda: cluster.listing(1)[0]["state"] != "up", "broker 0 to go down", deadline_s=20
        )

    def _run(self, path: str) -> None:
        self.answer = self.cluster.request("POST", path, broker=1)

    def finished(self) -> Answer:
        self._thread.join(60)
        assert self.answer is not None
        return self.answer


class Sends:
    """Receipts of ``send_async``, by payload."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.results: dict[bytes, pulsar.Result] = {}

    def send(self, producer: pulsar.Producer, payload: bytes) -> None:
        def done(result: pulsar.Result, _message_id: pulsar.MessageId) -> None:
            with self._lock:
                self.results[payload] = result

        producer.send_async(payload, done)

    def done(self) -> dict[bytes, pulsar.Result]:
        with self._lock:
            return dict(self.results)


def receive_until(consumer: pulsar.Consumer, wanted: set[bytes]) -> list[pulsar.Message]:
    """Receive (acknowledging each) until every payload of ``wanted`` came."""
    got: list[pulsar.Message] = []
    while not wanted <= {message.data() for message in got}:
        message = consumer.receive(RECEIVE_MS)
        consumer.acknowledge(message)
        got.append(message)
    return got


def consume_then_ack_some(
    consumer: pulsar.Consumer, payloads: list[bytes]
) -> tuple[set[bytes], set[bytes]]:
    """Receive every payload once; ack the first eight and every third after them.
    Returns (acked, unacked)."""
    received = {}
    for _ in payloads:
        message = consumer.receive(RECEIVE_MS)
        received[message.data()] = message
    assert set(received) == set(payloads)
    acked = {p for i, p in enumerate(payloads) if i < 8 or i % 3 == 0}
    for payload in acked:
        consumer.acknowledge(received[payload])
    return acked, set(payloads) - acked


@pytest.mark.parametrize("mode", ["graceful", "kill"])
def test_a_restart_of_the_owner_moves_its_topic_and_loses_nothing(
    served_broker: ServedBrokerFactory, pulsar_client: ClientFactory, mode: str
) -> None:
    if mode == "kill":
        # every receipted add is on disk; the killed broker's bundles are free after 300 ms
        cluster = served_broker(
            brokers=2, storage={"syncMode": "always"}, metadataStoreSessionTimeoutMillis=300
        )
    else:
        cluster = served_broker(brokers=2)
    topic = owned_by_zero(cluster, mode)
    client = pulsar_client(cluster.service_url)
    consumer = client.subscribe(
        topic,
        "shared",
        consumer_type=pulsar.ConsumerType.Shared,
        initial_position=pulsar.InitialPosition.Earliest,
    )
    producer = client.create_producer(topic, batching_enabled=False)
    before = [f"before-{index}".encode() for index in range(20)]
    for payload in before:
        producer.send(payload)
    acked, unacked = consume_then_ack_some(consumer, before)

    def acks_applied() -> bool:
        stats = subscription(cluster, 0, topic)
        return stats["msgBacklog"] == len(unacked)

    def acks_durable() -> bool:
        # a consumer's unacked count drops once the cursor write carrying the ack is done
        stats = subscription(cluster, 0, topic)
        return acks_applied() and [c["unackedMessages"] for c in stats["consumers"]] == [
            len(unacked)
        ]

    # written: acks applied and not yet written when a graceful stop comes are lost (see
    # test_cluster_admin's test of an ack in flight during an unload)
    eventually(acks_durable, "the acks written at broker 0")

    restart = Restart(cluster, mode, DOWNTIME_MS)
    # sent while broker 0 is down: the client keeps them and sends them to the new owner
    sends = Sends()
    during = [f"during-{index}".encode() for index in range(10)]
    for payload in during:
        sends.send(producer, payload)
    # broker 0 is not live: a lookup gives the bundle to broker 1 (after a kill once the
    # session expired; until then broker 0 still owns it)
    eventually(lambda: cluster.owner(topic, asking=1) == 1, "the topic to move to broker 1")
    answer = restart.finished()
    assert answer.status == 200, answer
    assert answer.body["state"] == "up" and answer.body["restarts"] == 1
    producer.flush()
    results = eventually(lambda: len(sends.done()) == len(during) and sends.done(), "receipts")
    assert set(results.values()) == {pulsar.Result.Ok}

    # the topic stays at broker 1 with broker 0 back: listing and lookups say so
    listing = cluster.listing(0)
    assert [broker["state"] for broker in listing] == ["up", "up"]
    assert listing[0]["incarnation"] == 2
    assert owner_in_listing(listing, pulsar_bundle(topic)) == 1
    assert cluster.owner(topic, asking=0) == cluster.owner(topic, asking=1) == 1

    # the consumer reconnected by itself: every unacked message and every receipted one
    got = receive_until(consumer, unacked | set(during))
    payloads = [message.data() for message in got]
    assert not set(payloads) & acked, f"acknowledged messages came back; {cluster.log()}"
    assert sorted(payloads) == sorted(unacked | set(during)), "a message came twice"
    # the subscription at broker 1 holds nothing more: all 30 messages accounted for
    eventually(lambda: subscription(cluster, 1, topic)["msgBacklog"] == 0, "an empty backlog")
    internal = cluster.ok("GET", f"/admin/v2/persistent/{short(topic)}/internalStats", broker=1)
    assert internal["numberOfEntries"] == len(before) + len(during)
    # broker 0 redirects the topic's routes to broker 1 now
    answer = cluster.request("GET", f"/admin/v2/persistent/{short(topic)}/stats", broker=0)
    assert answer.status == 307, answer


def test_while_a_broker_stops_gracefully_new_clients_are_sent_on(
    served_broker: ServedBrokerFactory, pulsar_client: ClientFactory
) -> None:
    """A graceful stop unloads bundle by bundle. Until a bundle's turn it is still the
    stopping broker's: a lookup names that broker, which answers a new producer with
    ServiceNotReady (the client looks up again until the bundle has moved), and HTTP
    with 503."""
    cluster = served_broker(brokers=2)
    first, second, third = topics_in_distinct_bundles("stopping", 3)
    assert [cluster.owner(topic) for topic in (first, second, third)] == [0, 1, 0]
    client = pulsar_client(cluster.service_url)
    client.create_producer(first).send(b"loaded")  # broker 0 has a topic to close
    # closing it takes 1 s: broker 0 stays "stopping" with the third topic's bundle
    # while the test asks four questions of the cluster
    cluster.ok("PUT", FAULTS, {"operation": "closeLedger", "delayMs": 1000}, broker=1)
    restart = Restart(cluster, "graceful", 0)
    listing = cluster.listing(1)
    assert listing[0]["state"] == "stopping"
    assert owner_in_listing(listing, pulsar_bundle(third)) == 0
    answer = cluster.request("GET", f"/admin/v2/persistent/{short(third)}/stats", broker=0)
    assert answer.status == 503, answer
    assert answer.body["code"] == "unavailable"
    cluster.ok("DELETE", FAULTS, broker=1)  # the close under way keeps its delay
    producer = pulsar_client(cluster.service_url).create_producer(third)
    producer.send(b"third")
    assert restart.finished().status == 200
    owner = cluster.owner(third)
    stats = cluster.ok("GET", f"/admin/v2/persistent/{short(third)}/internalStats", broker=owner)
    assert stats["numberOfEntries"] == 1


#: the cluster the restart route's refusals are tried on (a module's shared one)
CLUSTER = {"brokers": 2}


def test_the_restart_route_refuses_unknown_brokers_and_modes(
    shared_served_broker: ServedBrokerFactory,
) -> None:
    # before the conflict test below, which leaves broker 0 of this cluster restarting
    cluster = shared_served_broker(**CLUSTER)
    for asking in (0, 1):
        for path in (
            RESTART.format(index=2),
            RESTART.format(index=99),
            RESTART.format(index="x"),
            RESTART.format(index=-1),
            RESTART.format(index=0) + "?mode=pause",
            RESTART.format(index=1) + "?mode=pause",
            RESTART.format(index=0) + "?mode=kill&downtimeMs=-1",
            RESTART.format(index=1) + "?downtimeMs=soon",
        ):
            answer = cluster.request("POST", path, broker=asking)
            assert answer.status == 400, (asking, path, answer)
            assert set(answer.body) == {"reason", "code"}
            assert answer.body["code"] == "invalid-request"
    listing = cluster.listing()
    assert [(b["state"], b["restarts"], b["incarnation"]) for b in listing] == [("up", 0, 1)] * 2


def test_a_second_restart_of_a_restarting_broker_is_a_conflict(
    shared_served_broker: ServedBrokerFactory,
) -> None:
    """Asked of the other broker or of the restarting one itself. (The last test of the
    module's cluster: broker 0 stays down.)"""
    cluster = shared_served_broker(**CLUSTER)
    # broker 0 restarts itself (202 at once) and stays down for a minute: the conflict
    # window is open for the rest of the test, however slow the machine
    first = cluster.request("POST", RESTART.format(index=0) + "?downtimeMs=60000", broker=0)
    assert first.status == 202, first
    assert first.body == {"broker": 0, "mode": "graceful", "state": "restarting"}
    eventually(lambda: cluster.listing(1)[0]["state"] == "restarting", "broker 0 restarting")
    for mode in ("graceful", "kill"):
        answer = cluster.request("POST", RESTART.format(index=0) + f"?mode={mode}", broker=1)
        assert answer.status == 409, answer
        assert set(answer.body) == {"reason", "code"} and answer.body["code"] == "conflict"
    # a broker asked to restart itself while it is restarting answers 409 too
    again = cluster.request("POST", RESTART.format(index=0), broker=0)
    assert again.status == 409, again
    # broker 1 is not restarting: it could be restarted (not done here), and it serves
    topic = topics_in_distinct_bundles("conflict", 1)[0]
    assert cluster.owner(topic, asking=1) == 1
