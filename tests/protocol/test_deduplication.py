"""Message deduplication with the official client against ``brokerlab serve``: a
producer's resends (the same sequence ids) are stored once and acknowledged with message
id -1:-1; a reopened producer learns its last sequence id; both survive a kill -9 and a
graceful restart of the broker; the namespace and topic policy routes turn it on and
off; the deduplication cursor's name is reserved."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pulsar
import pytest

from tests.conftest import ServedBrokerFactory
from tests.harness import ServedBroker, eventually, new_topic
from tests.protocol.conftest import ClientFactory

pytestmark = pytest.mark.slow

RECEIVE_MS = 20_000
#: every receipted add on disk before its receipt (so a kill -9 loses none), and
#: deduplication on for every topic
DEDUP = {"storage": {"syncMode": "always"}, "brokerDeduplicationEnabled": True}
#: a duplicate's message id, as Pulsar's receipt names it
DUPLICATE = (-1, -1)


def admin_path(topic: str) -> str:
    return "/admin/v2/persistent/" + topic.removeprefix("persistent://")


def entry(message_id: pulsar.MessageId) -> tuple[int, int]:
    return message_id.ledger_id(), message_id.entry_id()


def send_with_ids(
    producer: pulsar.Producer, sends: list[tuple[bytes, int]]
) -> list[tuple[int, int]]:
    """Send each payload with its sequence id, asynchronously, flush, and return the
    message ids the receipts gave (all Ok)."""
    lock = threading.Lock()
    results: dict[int, tuple[pulsar.Result, pulsar.MessageId]] = {}

    def callback(index: int) -> Any:
        def done(result: pulsar.Result, message_id: pulsar.MessageId) -> None:
            with lock:
                results[index] = (result, message_id)

        return done

    for index, (payload, sequence_id) in enumerate(sends):
        producer.send_async(payload, callback(index), sequence_id=sequence_id)
    producer.flush()
    eventually(lambda: len(results) == len(sends), "every receipt")
    assert [results[i][0] for i in range(len(sends))] == [pulsar.Result.Ok] * len(sends)
    return [entry(results[i][1]) for i in range(len(sends))]


def stored(client: pulsar.Client, topic: str) -> list[bytes]:
    """Every payload the topic holds, in order: a sentinel is produced (by a producer of
    its own) and a new subscription reads from the earliest message up to it."""
    producer = client.create_producer(topic)
    producer.send(b"sentinel")
    producer.close()
    consumer = client.subscribe(
        topic,
        f"check-{threading.get_ident()}-{id(topic)}",
        initial_position=pulsar.InitialPosition.Earliest,
    )
    got = []
    while (message := consumer.receive(RECEIVE_MS)).data() != b"sentinel":
        got.append(message.data())
    consumer.unsubscribe()
    return got


def stats(broker: ServedBroker, topic: str) -> dict[str, Any]:
    body: dict[str, Any] = broker.ok("GET", admin_path(topic) + "/stats")
    return body


# ---------------------------------------------------------------------- resends


def test_resends_of_the_same_sequence_ids_are_stored_once(
    shared_served_broker: ServedBrokerFactory, client_of: ClientFactory
) -> None:
    """The issue's case: 4 messages sent, then sent again with their sequence ids (and
    a stale id, 0 after 3, as bad input): 8 sends, 4 messages stored. The originals'
    receipts name their entries, the resends' -1:-1."""
    broker = shared_served_broker(**DEDUP)
    client = client_of(broker)
    topic = new_topic("resends", full=True)
    producer = client.create_producer(topic, producer_name="app", batching_enabled=False)
    originals = send_with_ids(producer, [(f"m{i}".encode(), i) for i in range(4)])
    resends = send_with_ids(producer, [(f"again{i}".encode(), i) for i in (0, 1, 2, 3, 0)])
    producer.close()
    assert DUPLICATE not in originals
    assert resends == [DUPLICATE] * 5
    assert stats(broker, topic)["msgInCounter"] == 4
    assert stored(client, topic) == [b"m0", b"m1", b"m2", b"m3"]


def test_a_reopened_producer_gets_its_last_sequence_id_and_goes_on_after_it(
    shared_served_broker: ServedBrokerFactory, client_of: ClientFactory
) -> None:
    broker = shared_served_broker(**DEDUP)
    client = client_of(broker)
    topic = new_topic("reopen", full=True)
    producer = client.create_producer(topic, producer_name="reopened")
    assert producer.last_sequence_id() == -1
    for index in range(5):  # the client numbers them 0..4
        producer.send(f"m{index}".encode())
    producer.close()
    producer = client.create_producer(topic, producer_name="reopened")
    assert producer.last_sequence_id() == 4
    producer.send(b"m5")  # the client goes on at 5: new, stored
    assert producer.last_sequence_id() == 5
    producer.close()
    other = client.create_producer(topic, producer_name="someone-else")
    assert other.last_sequence_id() == -1  # sequence ids are per producer name
    other.close()
    assert stored(client, topic) == [f"m{i}".encode() for i in range(6)]


# ---------------------------------------------------------------------- crashes


@pytest.mark.parametrize("restart", ["kill -9", "graceful"])
def test_deduplication_survives_a_restart_of_the_broker(
    served_broker: ServedBrokerFactory, client_of: ClientFactory, restart: str
) -> None:
    """A snapshot every 4 entries: 10 messages leave a snapshot at the 8th entry and 2
    entries after it, so the recovery uses both the snapshot and the replay."""
    broker = served_broker(brokerDeduplicationEntriesInterval=4, **DEDUP)
    client = client_of(broker)
    topic = new_topic("crash", full=True)
    producer = client.create_producer(topic, producer_name="survivor")
    # one at a time: one entry per write, so the snapshots fall at the 4th and 8th
    ids = [entry(producer.send(f"m{i}".encode(), sequence_id=i)) for i in range(10)]

    def snapshot_at_8th() -> bool:
        cursors = broker.ok("GET", admin_path(topic) + "/internalStats")["cursors"]
        mark_delete = cursors["pulsar.dedup"]["markDeletePosition"]
        return bool(mark_delete == "{}:{}".format(*ids[7]))

    eventually(snapshot_at_8th, "the snapshot at the 8th entry")
    producer.close()
    if restart == "kill -9":
        broker.kill()
    else:
        assert broker.stop() == 0
    broker.start()  # on the same binary port: the client reconnects
    producer = client.create_producer(topic, producer_name="survivor")
    assert producer.last_sequence_id() == 9
    resends = send_with_ids(producer, [(f"again{i}".encode(), i) for i in range(5, 10)])
    assert resends == [DUPLICATE] * 5
    (new,) = send_with_ids(producer, [(b"m10", 10)])
    assert new != DUPLICATE
    producer.close()
    assert stored(client, topic) == [f"m{i}".encode() for i in range(11)]


# ---------------------------------------------------------------------- policies


def namespace_path(namespace: str) -> str:
    return f"/admin/v2/namespaces/{namespace}/deduplication"


def status_is(broker: ServedBroker, topic: str, status: str) -> bool:
    return bool(stats(broker, topic)["deduplicationStatus"] == status)


def resend_twice(client: pulsar.Client, topic: str, name: str, first: int) -> list[tuple[int, int]]:
    """Send two messages with sequence id ``first`` and again with the same id."""
    producer = client.create_producer(topic, producer_name=name)
    ids = send_with_ids(producer, [(b"x", first), (b"x-again", first)])
    producer.close()
    return ids


def test_the_namespace_and_topic_policies_turn_deduplication_on_and_off(
    shared_served_broker: ServedBrokerFactory, client_of: ClientFactory
) -> None:
    broker = shared_served_broker()  # brokerDeduplicationEnabled=false
    client = client_of(broker)
    namespace = broker.new_namespace("dedup")
    topic = new_topic("policy", namespace, full=True)
    topic_path = admin_path(topic) + "/deduplicationEnabled"
    first = resend_twice(client, topic, "p", 0)  # off: the resend is stored again
    assert DUPLICATE not in first and first[0] != first[1]
    assert broker.request("GET", namespace_path(namespace)).status == 204  # unset
    assert broker.ok("GET", topic_path + "?applied=true") is False

    broker.ok("POST", namespace_path(namespace), True)
    assert broker.ok("GET", namespace_path(namespace)) is True
    assert broker.request("GET", topic_path).status == 204  # the topic sets nothing
    assert broker.ok("GET", topic_path + "?applied=true") is True
    eventually(lambda: status_is(broker, topic, "Enabled"), "deduplication on")
    assert resend_twice(client, topic, "p", 1)[1] == DUPLICATE

    broker.ok("POST", topic_path, False)  # the topic's own policy wins
    assert broker.ok("GET", topic_path) is False
    eventually(lambda: status_is(broker, topic, "Disabled"), "deduplication off")
    cursors = broker.ok("GET", admin_path(topic) + "/internalStats")["cursors"]
    assert "pulsar.dedup" not in cursors  # its state is dropped with its cursor
    assert DUPLICATE not in resend_twice(client, topic, "p", 2)

    broker.ok("DELETE", topic_path)
    assert broker.ok("GET", topic_path + "?applied=true") is True
    eventually(lambda: status_is(broker, topic, "Enabled"), "deduplication on again")
    assert resend_twice(client, topic, "p", 3)[1] == DUPLICATE

    broker.ok("DELETE", namespace_path(namespace))
    assert broker.request("GET", namespace_path(namespace)).status == 204
    eventually(lambda: status_is(broker, topic, "Disabled"), "the broker's default")
    assert stored(client, topic) == [b"x", b"x-again", b"x", b"x", b"x-again", b"x"]


def test_bad_policy_requests_get_pulsars_status_and_change_nothing(
    shared_served_broker: ServedBrokerFactory, client_of: ClientFactory
) -> None:
    broker = shared_served_broker()
    client = client_of(broker)
    topic = new_topic("bad-policy", full=True)
    client.create_producer(topic).close()  # the topic exists
    topic_path = admin_path(topic) + "/deduplicationEnabled"
    for body in ("yes", 1, "true", {"enabled": True}):
        for path in (namespace_path("public/default"), topic_path):
            answer = broker.request("POST", path, body)
            assert answer.status == 400, (path, body, answer)
            assert set(answer.body) == {"reason", "code"}
    json = {"Content-Type": "application/json"}
    empty = broker.request("POST", namespace_path("public/default"), headers=json)
    assert empty.status == 400  # the namespace's route requires its boolean
    # the topic's takes no body as Pulsar's null: a removal
    assert broker.request("POST", topic_path, headers=json).status == 204
    assert broker.request("GET", namespace_path("public/default")).status == 204
    assert broker.request("GET", topic_path).status == 204
    missing = broker.request("POST", namespace_path("public/no-such-namespace"), True)
    assert missing.status == 404 and set(missing.body) == {"reason", "code"}
    no_topic = admin_path(new_topic("never-created", full=True)) + "/deduplicationEnabled"
    assert broker.request("POST", no_topic, True).status == 404
    assert broker.request("GET", no_topic).status == 404
    assert status_is(broker, topic, "Disabled")


def test_the_deduplication_cursor_is_no_subscription_and_its_name_is_reserved(
    shared_served_broker: ServedBrokerFactory, pulsar_client: Callable[..., pulsar.Client]
) -> None:
    broker = shared_served_broker(**DEDUP)
    # the broker answers ProducerBusy (Pulsar's NamingException), which the client
    # retries until its operation timeout, as against Pulsar
    client = pulsar_client(broker.service_url, operation_timeout_seconds=2)
    topic = new_topic("reserved", full=True)
    producer = client.create_producer(topic, producer_name="owner")
    producer.send(b"m0")
    with pytest.raises((pulsar.ProducerBusy, pulsar.Timeout)):
        client.subscribe(topic, "pulsar.dedup")
    answer = broker.request("PUT", admin_path(topic) + "/subscription/pulsar.dedup", "latest")
    assert answer.status == 409 and set(answer.body) == {"reason", "code"}
    assert stats(broker, topic)["subscriptions"] == {}
    assert "pulsar.dedup" in broker.ok("GET", admin_path(topic) + "/internalStats")["cursors"]
    producer.close()
    producer = client.create_producer(topic, producer_name="owner")
    assert producer.last_sequence_id() == 0  # the state is untouched
    producer.close()
