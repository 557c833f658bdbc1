"""What the official client was told is stored and acknowledged stays so, once and in
order: across a crash (SIGKILL) and a graceful restart with syncMode=always, through a
storage outage the client rides out by resending, when a failed write had sends queued
behind it, and when a client leaves while its write is on its way to disk."""

from __future__ import annotations

import functools
import threading
from typing import Any

import pulsar
import pytest

from tests.conftest import ServedBrokerFactory
from tests.harness import ServedBroker, eventually, new_topic
from tests.protocol.conftest import ClientFactory

pytestmark = pytest.mark.slow

#: messages per batch of the batching producer (a full batch is sent at once)
BATCH = 5
RECEIVE_MS = 20_000

#: the module's shared broker: every receipted add on disk
ALWAYS = {"storage": {"syncMode": "always"}}


def admin_path(topic: str) -> str:
    return "/admin/v2/persistent/" + topic.removeprefix("persistent://")


class Sends:
    """The outcome of ``send_async`` calls, by payload, as the client reports them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.results: dict[bytes, tuple[pulsar.Result, pulsar.MessageId]] = {}

    def callback(self, payload: bytes) -> Any:
        def done(result: pulsar.Result, message_id: pulsar.MessageId) -> None:
            with self._lock:
                self.results[payload] = (result, message_id)

        return done

    def done(self) -> dict[bytes, tuple[pulsar.Result, pulsar.MessageId]]:
        with self._lock:
            return dict(self.results)


def producer_for(client: pulsar.Client, topic: str, batching: bool) -> pulsar.Producer:
    # a batch goes when it holds BATCH messages (or on flush), never on a timer, so the
    # batches are the same on every run
    return client.create_producer(
        topic,
        batching_enabled=batching,
        batching_max_messages=BATCH,
        batching_max_publish_delay_ms=600_000,
    )


def send_all(producer: pulsar.Producer, payloads: list[bytes]) -> list[Any]:
    """Send, flush, and return the ids the client's receipts give (all must be Ok)."""
    sends = Sends()
    for payload in payloads:
        producer.send_async(payload, sends.callback(payload))
    producer.flush()
    results = eventually(lambda: len(sends.done()) == len(payloads) and sends.done(), "receipts")
    assert all(result == pulsar.Result.Ok for result, _ in results.values())
    return [results[payload][1] for payload in payloads]


def produce(client: pulsar.Client, topic: str, count: int, batching: bool) -> list[Any]:
    """``count`` messages; their ids as the client's receipts give them."""
    producer = producer_for(client, topic, batching)
    ids = send_all(producer, [payload(topic, index) for index in range(count)])
    producer.close()
    return ids


def payload(topic: str, index: int) -> bytes:
    return f"{topic.rsplit('/', 1)[1]}-{index}".encode()


def entry(message_id: pulsar.MessageId) -> tuple[int, int]:
    return message_id.ledger_id(), message_id.entry_id()


def receive_until_sentinel(
    client: pulsar.Client, topic: str, subscription: str
) -> list[tuple[bytes, tuple[int, int]]]:
    """Produce a sentinel, then subscribe (from the earliest message if the subscription
    is new): an Exclusive subscription dispatches in order, so what comes before the
    sentinel is exactly what the subscription held. Payloads and entries."""
    producer = client.create_producer(topic)
    producer.send(b"sentinel")
    producer.close()
    consumer = client.subscribe(
        topic, subscription, initial_position=pulsar.InitialPosition.Earliest
    )
    got = []
    while (message := consumer.receive(RECEIVE_MS)).data() != b"sentinel":
        got.append((message.data(), entry(message.message_id())))
    consumer.close()  # nothing acked: the subscription keeps all it held
    return got


def payloads_until_sentinel(client: pulsar.Client, topic: str, subscription: str) -> list[bytes]:
    return [data for data, _ in receive_until_sentinel(client, topic, subscription)]


# ---------------------------------------------------------------------- restarts


class AckPlan:
    """One topic's messages, which of them the consumer acks, and what a later consumer
    must receive: every message not acked, and every message of a batch not wholly
    acked (without batch-index acks the client acks a batch only once all of its
    messages are acked, as Pulsar's clients do)."""

    def __init__(self, topic: str, ids: list[Any], acked: set[int]) -> None:
        self.topic = topic
        self.ids = ids
        self.acked = acked
        entries: dict[tuple[int, int], list[int]] = {}
        for index, message_id in enumerate(ids):
            entries.setdefault(entry(message_id), []).append(index)
        self.entries_left = [e for e, members in entries.items() if not acked >= set(members)]
        self.expected = [payload(topic, i) for e in self.entries_left for i in entries[e]]


def consume_and_ack(client: pulsar.Client, plan: AckPlan) -> None:
    consumer = client.subscribe(
        plan.topic, "durable", initial_position=pulsar.InitialPosition.Earliest
    )
    for index in range(len(plan.ids)):
        message = consumer.receive(RECEIVE_MS)
        assert message.data() == payload(plan.topic, index)
        if index in plan.acked:
            consumer.acknowledge(message)


def subscription_stats(broker: ServedBroker, topic: str) -> dict[str, Any]:
    stats: dict[str, Any] = broker.ok("GET", admin_path(topic) + "/stats")
    return stats["subscriptions"]["durable"]


def acks_are_seen(broker: ServedBroker, plan: AckPlan) -> bool:
    """The broker applied the acks: the backlog (entries) is what is left."""
    return subscription_stats(broker, plan.topic)["msgBacklog"] == len(plan.entries_left)


def acks_are_durable(broker: ServedBroker, plan: AckPlan) -> bool:
    """The acks are on disk: a consumer's unacked entries drop only once the cursor
    write that carries the ack is done."""
    stats = subscription_stats(broker, plan.topic)
    unacked = [consumer["unackedMessages"] for consumer in stats["consumers"]]
    return acks_are_seen(broker, plan) and unacked == [len(plan.entries_left)]


def plans(client: pulsar.Client, kind: str) -> list[AckPlan]:
    """Two topics, 30 messages each: unbatched, with the first ten acked and every third
    after them (holes after the mark-delete position); batched in six batches of five,
    with batches 0, 1 and 3 acked whole and two messages of batch 4."""
    unbatched = new_topic(f"{kind}-unbatched", full=True)
    batched = new_topic(f"{kind}-batched", full=True)
    unbatched_ids = produce(client, unbatched, 30, batching=False)
    batched_ids = produce(client, batched, 30, batching=True)
    assert len({entry(i) for i in batched_ids}) == 6
    holes = set(range(10)) | {index for index in range(10, 30) if index % 3 == 1}
    whole_batches = {i for i in range(30) if i // BATCH in (0, 1, 3)} | {20, 21}
    return [AckPlan(unbatched, unbatched_ids, holes), AckPlan(batched, batched_ids, whole_batches)]


@pytest.mark.parametrize("restart", ["crash", "graceful"])
def test_after_a_restart_the_subscription_holds_exactly_the_unacked_messages(
    shared_served_broker: ServedBrokerFactory, client_of: ClientFactory, restart: str
) -> None:
    broker = shared_served_broker(**ALWAYS)
    client = client_of(broker)
    topics = plans(client, restart)
    assert [len(plan.expected) for plan in topics] == [13, 15]
    for plan in topics:
        consume_and_ack(client, plan)
    if restart == "crash":
        for plan in topics:
            eventually(functools.partial(acks_are_durable, broker, plan), "durable acks")
        client.close()
        broker.kill()
    else:
        # applied by the broker, written or not yet: a graceful stop must not lose them
        for plan in topics:
            eventually(functools.partial(acks_are_seen, broker, plan), "acks applied")
        client.close()
        assert broker.stop() == 0
    broker.start()

    again = client_of(broker)
    for plan in topics:
        assert payloads_until_sentinel(again, plan.topic, "durable") == plan.expected


def test_batch_index_acks_survive_a_restart(
    shared_served_broker: ServedBrokerFactory, client_of: ClientFactory
) -> None:
    broker = shared_served_broker(**ALWAYS, acknowledgmentAtBatchIndexLevelEnabled=True)
    client = client_of(broker)
    topic = new_topic("batch-index", full=True)
    ids = produce(client, topic, BATCH, batching=True)
    assert len({entry(i) for i in ids}) == 1
    consumer = client.subscribe(
        topic,
        "durable",
        initial_position=pulsar.InitialPosition.Earliest,
        batch_index_ack_enabled=True,
    )
    for index in range(BATCH):
        message = consumer.receive(RECEIVE_MS)
        if index < 3:
            consumer.acknowledge(message)
    consumer.close()  # the client sends its pending acks before it closes
    left = [payload(topic, 3), payload(topic, 4)]
    assert payloads_until_sentinel(client, topic, "durable") == left  # the broker has them
    client.close()
    assert broker.stop() == 0
    broker.start()
    assert payloads_until_sentinel(client_of(broker), topic, "durable") == left


# ---------------------------------------------------------------------- storage faults


def set_fault(broker: ServedBroker, error_rate: float, delay_ms: float = 0) -> None:
    body = {"operation": "addEntries", "errorRate": error_rate, "delayMs": delay_ms}
    broker.ok("PUT", "/admin/v2/brokerlab/faults", body)


def injected_errors(broker: ServedBroker) -> int:
    """Adds the current fault setting made fail."""
    faults = broker.ok("GET", "/admin/v2/brokerlab/faults")
    return int(faults.get("addEntries", {}).get("injectedErrors", 0))


def bookie_stat(broker: ServedBroker, name: str) -> int:
    return int(broker.ok("GET", "/admin/v2/broker-stats/storage")["bookie"][name])


def add_calls(broker: ServedBroker) -> int:
    """Adds the bookie was asked for, counted as each begins."""
    return bookie_stat(broker, "addEntriesCalls")


@pytest.mark.parametrize("batching", [False, True], ids=["unbatched", "batched"])
def test_while_storage_refuses_writes_the_client_resends_and_each_message_is_stored_once(
    shared_served_broker: ServedBrokerFactory, client_of: ClientFactory, batching: bool
) -> None:
    broker = shared_served_broker(**ALWAYS)
    client = client_of(broker)
    topic = new_topic("outage", full=True)
    producer = producer_for(client, topic, batching)
    send_all(producer, [b"before"])

    set_fault(broker, 1.0)
    sends = Sends()
    payloads = [f"during-{index}".encode() for index in range(4 * BATCH)]
    for payload in payloads:
        producer.send_async(payload, sends.callback(payload))
    # a SEND_ERROR makes the client close its connection and resend what is pending;
    # every resend fails too while the fault lasts
    eventually(lambda: injected_errors(broker) >= 3, "the client's resends to fail")
    assert all(result != pulsar.Result.Ok for result, _ in sends.done().values())

    set_fault(broker, 0.0)
    producer.flush()
    results = eventually(lambda: len(sends.done()) == len(payloads) and sends.done(), "receipts")
    producer.close()
    # the outage was shorter than the send timeout: the client reports every send done
    assert {payload: result for payload, (result, _) in results.items()} == dict.fromkeys(
        payloads, pulsar.Result.Ok
    )

    stored = receive_until_sentinel(client, topic, "all")
    # each once, in the order sent, where the receipts said
    assert stored[1:] == [(p, entry(results[p][1])) for p in payloads]
    assert stored[0][0] == b"before"
    stats = broker.ok("GET", admin_path(topic) + "/internalStats")
    assert stats["numberOfEntries"] == len({e for _, e in stored}) + 1  # and the sentinel


def test_a_failed_write_fails_the_sends_queued_behind_it_so_the_resend_keeps_order(
    shared_served_broker: ServedBrokerFactory, client_of: ClientFactory
) -> None:
    broker = shared_served_broker(**ALWAYS)
    client = client_of(broker)
    topic = new_topic("queued", full=True)
    producer = producer_for(client, topic, batching=False)
    # the first write waits 1 s and then fails; the fault is gone before it ends, so a
    # write of the sends queued behind it would succeed: they must fail with it
    set_fault(broker, 1.0, delay_ms=1000)
    errors_before = bookie_stat(broker, "addEntriesErrors")
    before = add_calls(broker)
    sends = Sends()
    producer.send_async(b"first", sends.callback(b"first"))
    eventually(lambda: add_calls(broker) > before, "the first write to start")
    queued = [f"queued-{index}".encode() for index in range(4)]
    for payload in queued:
        producer.send_async(payload, sends.callback(payload))
    set_fault(broker, 0.0)
    producer.flush()
    results = eventually(lambda: len(sends.done()) == 5 and sends.done(), "receipts")
    # the first write, and only it
    assert bookie_stat(broker, "addEntriesErrors") == errors_before + 1
    assert all(result == pulsar.Result.Ok for result, _ in results.values())

    stored = receive_until_sentinel(client, topic, "all")
    assert stored == [(p, entry(results[p][1])) for p in [b"first", *queued]]


# ---------------------------------------------------------------------- a client leaves


@pytest.fixture
def slow_commit_broker(served_broker: ServedBrokerFactory) -> ServedBroker:
    """A broker whose bookie gathers adds for 1.5 s before writing them (syncMode=batch,
    journalMaxGroupWaitMSec=1500): a write stays on its way to disk long enough for a
    client to leave meanwhile."""
    return served_broker(storage={"syncMode": "batch", "journalMaxGroupWaitMSec": 1500})


def test_a_client_leaving_while_its_write_is_on_disk_does_not_stall_the_topic(
    slow_commit_broker: ServedBroker, client_of: ClientFactory
) -> None:
    broker = slow_commit_broker
    topic = new_topic("left", full=True)
    leaving = client_of(broker)
    producer = leaving.create_producer(topic)
    before = add_calls(broker)
    sends = Sends()
    producer.send_async(b"in flight", sends.callback(b"in flight"))
    eventually(lambda: add_calls(broker) > before, "the write to reach the bookie")
    leaving.close()  # fails the pending send at the client, closes the connection
    assert sends.done()[b"in flight"][0] != pulsar.Result.Ok

    staying = client_of(broker)
    receipt = staying.create_producer(topic).send(b"after")
    consumer = staying.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
    got = []
    try:
        while (message := consumer.receive(RECEIVE_MS)).data() != b"after":
            got.append(message.data())
    except pulsar.Timeout:
        stats = broker.ok("GET", admin_path(topic) + "/internalStats")
        pytest.fail(f"receipted {receipt} but never delivered; the ledger says {stats}")
    assert entry(message.message_id()) == entry(receipt)
    # the message the client gave up on may be stored (at least once), but only once
    assert got in ([], [b"in flight"])
    stats = broker.ok("GET", admin_path(topic) + "/internalStats")
    assert stats["lastConfirmedEntry"] == "{}:{}".format(*entry(receipt))
