"""The official Pulsar client drives brokerlab over the binary protocol: produce and
consume with batching on and off, the four subscription types, acks, nacks, seek."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from typing import Any

import pulsar
import pytest

from tests.conftest import ServedBrokerFactory
from tests.harness import ServedBroker, eventually, new_topic, persistent, short

pytestmark = pytest.mark.slow


def produce(
    client: pulsar.Client, topic: str, count: int, batching: bool, keys: int = 0
) -> list[str]:
    producer = client.create_producer(
        topic, batching_enabled=batching, batching_max_publish_delay_ms=5
    )
    sent = []
    for index in range(count):
        payload = f"m{index}"
        key = f"k{index % keys}" if keys else None
        if key is None:
            producer.send_async(payload.encode(), None)
        else:
            producer.send_async(payload.encode(), None, partition_key=key)
        sent.append(payload)
    producer.flush()
    producer.close()
    return sent


def receive(consumer: pulsar.Consumer, count: int, ack: bool = True) -> list[pulsar.Message]:
    got = []
    for _ in range(count):
        message = consumer.receive(20_000)
        got.append(message)
        if ack:
            consumer.acknowledge(message)
    return got


def nothing_more(consumer: pulsar.Consumer) -> bool:
    try:
        consumer.receive(300)
    except pulsar.Timeout:
        return True
    return False


@pytest.mark.parametrize("batching", [False, True], ids=["unbatched", "batched"])
def test_messages_produced_are_consumed_once_in_order(
    broker: ServedBroker, client: pulsar.Client, batching: bool
) -> None:
    topic = persistent(new_topic("client"))
    consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
    sent = produce(client, topic, 200, batching)
    got = receive(consumer, 200)
    assert [m.data().decode() for m in got] == sent
    assert nothing_more(consumer)
    stats = broker.ok("GET", f"/admin/v2/persistent/{short(topic)}/internalStats")
    if batching:
        # a batch is one entry: far fewer entries than messages
        assert stats["numberOfEntries"] < 200
        assert any(m.message_id().batch_index() >= 1 for m in got)
    else:
        assert stats["numberOfEntries"] == 200
    consumer.close()
    backlog = broker.ok("GET", f"/admin/v2/persistent/{short(topic)}/stats")
    assert backlog["subscriptions"]["s"]["msgBacklog"] == 0


def test_an_exclusive_subscription_refuses_a_second_consumer(client: pulsar.Client) -> None:
    topic = persistent(new_topic("client"))
    first = client.subscribe(topic, "excl", consumer_type=pulsar.ConsumerType.Exclusive)
    with pytest.raises(pulsar.ConsumerBusy):
        client.subscribe(topic, "excl", consumer_type=pulsar.ConsumerType.Exclusive)
    first.close()
    client.subscribe(topic, "excl", consumer_type=pulsar.ConsumerType.Exclusive).close()


def test_failover_switches_to_the_standby_when_the_active_consumer_closes(
    client: pulsar.Client,
) -> None:
    topic = persistent(new_topic("client"))
    kind = pulsar.ConsumerType.Failover
    first = client.subscribe(topic, "fo", consumer_type=kind, consumer_name="a")
    second = client.subscribe(topic, "fo", consumer_type=kind, consumer_name="b")
    sent = produce(client, topic, 20, batching=False)
    # "a" is active (the lowest name): it gets everything, "b" nothing
    got = receive(first, 10)
    assert [m.data().decode() for m in got] == sent[:10]
    assert nothing_more(second)
    first.close()
    rest = receive(second, 10)
    assert [m.data().decode() for m in rest] == sent[10:]


@pytest.mark.parametrize("batching", [False, True], ids=["unbatched", "batched"])
def test_shared_consumers_split_the_messages_and_lose_none(
    client: pulsar.Client, batching: bool
) -> None:
    topic = persistent(new_topic("client"))
    kind = pulsar.ConsumerType.Shared
    consumers = [
        client.subscribe(topic, "sh", consumer_type=kind, receiver_queue_size=10) for _ in range(3)
    ]
    sent = produce(client, topic, 300, batching)
    received: dict[int, list[str]] = defaultdict(list)
    remaining = set(sent)

    def drain() -> bool:
        for index, consumer in enumerate(consumers):
            while True:  # everything this consumer has now
                try:
                    message = consumer.receive(20)
                except pulsar.Timeout:
                    break
                payload = message.data().decode()
                received[index].append(payload)
                remaining.discard(payload)
                consumer.acknowledge(message)
        return not remaining

    eventually(drain, "every message received by some consumer")
    everything = [p for got in received.values() for p in got]
    assert sorted(everything) == sorted(sent)  # none lost, none twice
    if not batching:
        # one message per entry: the entries were spread (a batch goes whole to one)
        assert sum(1 for got in received.values() if got) >= 2


def test_shared_redelivers_after_a_nack_and_after_a_close(client: pulsar.Client) -> None:
    topic = persistent(new_topic("client"))
    kind = pulsar.ConsumerType.Shared
    first = client.subscribe(topic, "sh", consumer_type=kind, negative_ack_redelivery_delay_ms=100)
    sent = produce(client, topic, 6, batching=False)
    got = receive(first, 6, ack=False)
    first.acknowledge(got[0])
    first.negative_acknowledge(got[1])
    again = first.receive(20_000)
    assert again.data() == got[1].data()
    assert again.redelivery_count() == 1
    first.acknowledge(again)
    # messages 2..5 are unacked: closing hands them to the next consumer
    first.close()
    second = client.subscribe(topic, "sh", consumer_type=kind)
    rest = receive(second, 4)
    assert sorted(m.data().decode() for m in rest) == sorted(sent[2:])
    assert nothing_more(second)


def test_key_shared_keeps_each_keys_order_while_consumers_join_and_leave(
    client: pulsar.Client,
) -> None:
    topic = persistent(new_topic("client"))
    kind = pulsar.ConsumerType.KeyShared
    first = client.subscribe(topic, "ks", consumer_type=kind, receiver_queue_size=20)
    producer = client.create_producer(
        topic, batching_enabled=True, batching_type=pulsar.BatchingType.KeyBased
    )
    order: dict[str, list[int]] = defaultdict(list)
    consumers = [first]
    total = 400

    def send(start: int, end: int) -> None:
        for index in range(start, end):
            producer.send_async(str(index).encode(), None, partition_key=f"key{index % 7}")
        producer.flush()

    seen: set[int] = set()

    def take(upto: int) -> None:
        """Receive (and ack) until every message below ``upto`` was seen once."""

        def step() -> bool:
            for consumer in consumers:
                while True:
                    try:
                        message = consumer.receive(20)
                    except pulsar.Timeout:
                        break
                    number = int(message.data())
                    order[message.partition_key()].append(number)
                    seen.add(number)
                    consumer.acknowledge(message)
            return seen >= set(range(upto))

        eventually(step, f"the messages below {upto}")

    send(0, 100)
    take(100)
    consumers.append(client.subscribe(topic, "ks", consumer_type=kind, receiver_queue_size=20))
    send(100, 300)
    take(300)
    consumers.pop(0).close()
    send(300, total)
    take(total)
    delivered = {n for values in order.values() for n in values}
    assert delivered == set(range(total))
    for key, values in order.items():
        firsts = list(dict.fromkeys(values))  # a redelivery may repeat; order must hold
        assert firsts == sorted(firsts), f"{key} out of order"


def test_seek_moves_the_subscription_back(client: pulsar.Client) -> None:
    topic = persistent(new_topic("client"))
    consumer = client.subscribe(topic, "seek", initial_position=pulsar.InitialPosition.Earliest)
    sent = produce(client, topic, 10, batching=False)
    got = receive(consumer, 10)
    consumer.seek(got[3].message_id())
    again = receive(consumer, 6)
    assert [m.data().decode() for m in again] == sent[4:] or [
        m.data().decode() for m in again
    ] == sent[3:9]
    consumer.seek(pulsar.MessageId.earliest)
    assert receive(consumer, 1)[0].data().decode() == sent[0]


def test_a_reader_reads_from_a_message_id_and_leaves_no_subscription(
    broker: ServedBroker, client: pulsar.Client
) -> None:
    topic = persistent(new_topic("client"))
    produce(client, topic, 5, batching=False)
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    assert [reader.read_next(20_000).data() for _ in range(5)] == [
        f"m{i}".encode() for i in range(5)
    ]
    assert not reader.has_message_available()
    reader.close()
    eventually(
        lambda: not broker.ok("GET", f"/admin/v2/persistent/{short(topic)}/stats")["subscriptions"],
        "the reader's subscription to go",
    )


@pytest.mark.parametrize("broker_keeps_ack_sets", [True, False], ids=["enabled", "disabled"])
def test_batch_index_acks_redeliver_only_the_unacked_messages_of_a_batch(
    shared_served_broker: ServedBrokerFactory,
    pulsar_client: Callable[..., Any],
    broker_keeps_ack_sets: bool,
) -> None:
    # disabled is conf/broker.conf's default: that one is the module's shared broker
    broker = shared_served_broker(
        **({"acknowledgmentAtBatchIndexLevelEnabled": True} if broker_keeps_ack_sets else {})
    )
    client = pulsar_client(broker.service_url)
    topic = persistent(new_topic("client"))
    kind = pulsar.ConsumerType.Shared
    first = client.subscribe(topic, "bi", consumer_type=kind, batch_index_ack_enabled=True)
    producer = client.create_producer(
        topic, batching_enabled=True, batching_max_publish_delay_ms=60_000
    )
    for index in range(10):
        producer.send_async(f"m{index}".encode(), None)
    producer.flush()  # the ten messages go as one batch
    got = receive(first, 10, ack=False)
    assert {m.message_id().entry_id() for m in got} == {got[0].message_id().entry_id()}
    for message in got[::2]:
        first.acknowledge(message)
    first.close()  # flushes the acks; the unacked messages go back
    second = client.subscribe(topic, "bi", consumer_type=kind, batch_index_ack_enabled=True)
    if broker_keeps_ack_sets:
        again = receive(second, 5)
        assert [m.data().decode() for m in again] == [f"m{i}" for i in range(1, 10, 2)]
    else:
        # no ack sets on the broker: the whole batch comes back, as in Pulsar
        again = receive(second, 10)
        assert [m.data().decode() for m in again] == [f"m{i}" for i in range(10)]
    assert nothing_more(second)


def test_clients_reconnect_after_the_broker_unloads_the_topic(
    broker: ServedBroker, client: pulsar.Client
) -> None:
    topic = persistent(new_topic("client"))
    consumer = client.subscribe(topic, "u", initial_position=pulsar.InitialPosition.Earliest)
    producer = client.create_producer(topic, batching_enabled=False)
    for index in range(10):
        producer.send(f"before{index}".encode())
    first = receive(consumer, 5)

    def backlog() -> int:
        stats = broker.ok("GET", f"/admin/v2/persistent/{short(topic)}/stats")
        return int(stats["subscriptions"]["u"]["msgBacklog"])

    eventually(lambda: backlog() == 5, "the client's grouped acks to reach the broker")
    broker.ok("POST", "/admin/v2/namespaces/public/default/unload")
    # the broker closed both (CLOSE_PRODUCER, CLOSE_CONSUMER); the client reconnects
    # through lookup, and the same objects go on
    for index in range(10):
        producer.send(f"after{index}".encode())
    rest = receive(consumer, 15)
    payloads = [m.data().decode() for m in first + rest]
    assert payloads == [f"before{i}" for i in range(10)] + [f"after{i}" for i in range(10)]
    assert nothing_more(consumer)
    stats = broker.ok("GET", f"/admin/v2/persistent/{short(topic)}/stats")
    assert len(stats["subscriptions"]["u"]["consumers"]) == 1  # reconnected, once


@pytest.mark.parametrize("batching", [False, True], ids=["unbatched", "batched"])
def test_a_partitioned_topic_of_four_takes_the_clients_routing(
    broker: ServedBroker, client: pulsar.Client, batching: bool
) -> None:
    local = new_topic("parts")
    topic = persistent(local)
    broker.ok("PUT", f"/admin/v2/persistent/{local}/partitions", 4)
    assert client.get_topic_partitions(topic) == [f"{topic}-partition-{i}" for i in range(4)]
    consumer = client.subscribe(topic, "p", initial_position=pulsar.InitialPosition.Earliest)
    producer = client.create_producer(
        topic,
        batching_enabled=batching,
        message_routing_mode=pulsar.PartitionsRoutingMode.RoundRobinDistribution,
    )
    for index in range(40):
        producer.send_async(f"m{index}".encode(), None, partition_key=f"key{index % 8}")
    producer.flush()
    got = receive(consumer, 40)
    assert sorted(m.data().decode() for m in got) == sorted(f"m{i}" for i in range(40))
    assert nothing_more(consumer)
    # keyed messages are routed by the client's hash: each key lives in one partition,
    # and together they used more than one
    partitions_of_key: dict[str, set[str]] = defaultdict(set)
    for message in got:
        partitions_of_key[message.partition_key()].add(message.topic_name())
    assert all(len(names) == 1 for names in partitions_of_key.values())
    used = {name for names in partitions_of_key.values() for name in names}
    assert len(used) > 1
    for index in range(4):
        stats = broker.ok("GET", f"/admin/v2/persistent/{local}-partition-{index}/stats")
        assert "p" in stats["subscriptions"]
