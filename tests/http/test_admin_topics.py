"""What pulsar-admin and Pulsar Manager do to a topic's messages, against ``brokerlab
serve`` with the official client producing and consuming: create a topic, peek a backlog
with Pulsar's headers, skip, clear and expire it, answered with Pulsar's statuses."""

from __future__ import annotations

from typing import Any

import pulsar
import pytest

from tests.conftest import ServedBrokerFactory
from tests.harness import ServedBroker, eventually, new_topic, persistent

pytestmark = pytest.mark.slow


def admin(topic: str, rest: str = "") -> str:
    return f"/admin/v2/persistent/{topic}{rest}"


def status(broker: ServedBroker, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    answer = broker.request(method, path, body)
    return answer.status, answer.body


def error(broker: ServedBroker, method: str, path: str, body: Any = None) -> tuple[int, str]:
    answer = broker.request(method, path, body)
    assert answer.status >= 400 and answer.body["reason"], answer
    return answer.status, answer.body["code"]


def produce(client: pulsar.Client, topic: str, count: int, **send: Any) -> None:
    producer = client.create_producer(persistent(topic), batching_enabled=False)
    for index in range(count):
        producer.send(f"m{index}".encode(), **send)
    producer.close()


def backlog(broker: ServedBroker, topic: str, subscription: str) -> int:
    stats = broker.ok("GET", admin(topic, "/stats"))
    return int(stats["subscriptions"][subscription]["msgBacklog"])


def subscription_on(broker: ServedBroker, topic: str, name: str) -> None:
    broker.ok("PUT", admin(topic, f"/subscription/{name}?messageId=earliest"))


# ---------------------------------------------------------------------- create


def test_a_topic_is_created_once_even_with_auto_creation_off(
    shared_served_broker: ServedBrokerFactory,
) -> None:
    broker = shared_served_broker(allowAutoTopicCreation=False)
    topic = new_topic("created")
    assert error(broker, "GET", admin(topic, "/stats")) == (404, "not-found")
    assert status(broker, "PUT", admin(topic)) == (204, None)
    assert persistent(topic) in broker.ok("GET", "/admin/v2/persistent/public/default")
    assert broker.ok("GET", admin(topic, "/stats"))["subscriptions"] == {}
    assert error(broker, "PUT", admin(topic)) == (409, "conflict")

    partitioned = new_topic("partitioned")
    broker.ok("PUT", admin(partitioned, "/partitions"), 2)
    assert error(broker, "PUT", admin(partitioned)) == (409, "conflict")
    assert error(broker, "PUT", admin(f"{partitioned}-partition-0")) == (409, "conflict")
    assert error(broker, "PUT", admin(f"{partitioned}-partition-5")) == (409, "conflict")
    assert error(broker, "PUT", admin("public/default/bad%20name")) == (400, "invalid-request")
    assert error(broker, "PUT", admin(new_topic("body")), ["not", "a", "map"]) == (
        400,
        "invalid-request",
    )
    assert status(broker, "DELETE", admin(topic))[0] == 204
    assert error(broker, "GET", admin(topic, "/stats")) == (404, "not-found")


# ---------------------------------------------------------------------- peek


def test_peek_shows_the_nth_unacknowledged_message_with_pulsars_headers(
    broker: ServedBroker, client: pulsar.Client
) -> None:
    topic = new_topic("peek")
    consumer = client.subscribe(
        persistent(topic), "s", initial_position=pulsar.InitialPosition.Earliest
    )
    producer = client.create_producer(
        persistent(topic), producer_name="peeker", batching_enabled=False
    )
    for index in range(4):
        producer.send(
            f"m{index}".encode(),
            properties={"trace": f"t{index}"},
            partition_key=f"k{index}",
            event_timestamp=1_700_000_000_000 + index,
        )
    consumer.acknowledge(consumer.receive(10_000))  # m0
    eventually(lambda: backlog(broker, topic, "s") == 3, "the ack of m0")

    answer = broker.request("GET", admin(topic, "/subscription/s/position/2"))
    assert answer.status == 200
    assert answer.body == "m2"  # m1 is the first unacknowledged, m2 the second
    headers = answer.headers
    assert headers["Content-Type"] == "application/octet-stream"
    ledger, entry = headers["X-Pulsar-Message-ID"].split(":")
    assert int(ledger) >= 0 and int(entry) >= 0
    assert headers["X-Pulsar-producer-name"] == "peeker"
    assert headers["X-Pulsar-sequence-id"] == "2"
    assert headers["X-Pulsar-partition-key"] == "k2"
    assert headers["X-Pulsar-PROPERTY-trace"] == "t2"
    assert headers["X-Pulsar-event-time"] == "2023-11-14T22:13:20.002Z"
    assert headers["X-Pulsar-publish-time"].endswith("Z")
    assert "X-Pulsar-num-batch-message" not in headers

    # peeking moves nothing
    assert backlog(broker, topic, "s") == 3
    assert broker.request("GET", admin(topic, "/subscription/s/position/1")).body == "m1"
    assert error(broker, "GET", admin(topic, "/subscription/s/position/4")) == (404, "not-found")
    assert error(broker, "GET", admin(topic, "/subscription/s/position/0")) == (
        400,
        "invalid-request",
    )
    assert error(broker, "GET", admin(topic, "/subscription/none/position/1")) == (
        404,
        "not-found",
    )
    producer.close()
    consumer.close()


def test_peek_of_a_batch_says_how_many_messages_it_holds(
    broker: ServedBroker, client: pulsar.Client
) -> None:
    topic = new_topic("peek-batch")
    subscription_on(broker, topic, "s")
    producer = client.create_producer(
        persistent(topic), batching_enabled=True, batching_max_publish_delay_ms=50
    )
    for index in range(3):
        producer.send_async(f"b{index}".encode(), None)
    producer.flush()
    producer.close()
    answer = broker.request("GET", admin(topic, "/subscription/s/position/1"))
    assert answer.status == 200
    assert answer.headers["X-Pulsar-num-batch-message"] == "3"
    assert "b0" in answer.body and "b2" in answer.body


def test_peek_on_a_partitioned_topics_name_is_not_allowed(broker: ServedBroker) -> None:
    topic = new_topic("peek-partitioned")
    broker.ok("PUT", admin(topic, "/partitions"), 2)
    broker.ok("PUT", admin(topic, "/subscription/s"))
    assert error(broker, "GET", admin(topic, "/subscription/s/position/1")) == (
        405,
        "method-not-allowed",
    )


# ---------------------------------------------------------------------- skip, clear, expire


def test_skip_acknowledges_the_next_messages_and_skip_all_the_rest(
    broker: ServedBroker, client: pulsar.Client
) -> None:
    topic = new_topic("skip")
    subscription_on(broker, topic, "s")
    produce(client, topic, 10)
    assert status(broker, "POST", admin(topic, "/subscription/s/skip/3")) == (204, None)
    assert backlog(broker, topic, "s") == 7
    consumer = client.subscribe(persistent(topic), "s")
    first = consumer.receive(10_000)
    assert first.data() == b"m3"
    # the consumer holds m3.. unacknowledged; clearing the backlog acknowledges them all
    assert status(broker, "POST", admin(topic, "/subscription/s/skip_all"))[0] == 204
    assert backlog(broker, topic, "s") == 0
    consumer.close()
    consumer = client.subscribe(persistent(topic), "s")
    with pytest.raises(pulsar.Timeout):
        consumer.receive(300)  # nothing is redelivered
    # skipping more than the backlog holds stops at its end
    produce(client, topic, 2)
    assert status(broker, "POST", admin(topic, "/subscription/s/skip/100"))[0] == 204
    assert backlog(broker, topic, "s") == 0
    consumer.close()
    assert error(broker, "POST", admin(topic, "/subscription/s/skip/-1")) == (
        400,
        "invalid-request",
    )
    assert error(broker, "POST", admin(topic, "/subscription/none/skip_all")) == (
        404,
        "not-found",
    )


def test_expired_messages_are_acknowledged_and_young_ones_kept(
    broker: ServedBroker, client: pulsar.Client
) -> None:
    topic = new_topic("expire")
    subscription_on(broker, topic, "a")
    subscription_on(broker, topic, "b")
    produce(client, topic, 5)
    # an hour: nothing is that old
    assert status(broker, "POST", admin(topic, "/subscription/a/expireMessages/3600"))[0] == 204
    assert backlog(broker, topic, "a") == 5
    # 0 s: everything published before now; the broker's clock moves on by itself
    path = admin(topic, "/subscription/a/expireMessages/0")
    eventually(
        lambda: broker.ok("POST", path) is None and backlog(broker, topic, "a") == 0,
        "every message of a to expire",
    )
    assert backlog(broker, topic, "b") == 5
    every = admin(topic, "/all_subscription/expireMessages/0")
    eventually(
        lambda: broker.ok("POST", every) is None and backlog(broker, topic, "b") == 0,
        "every message of b to expire",
    )
    assert error(broker, "POST", admin(topic, "/subscription/a/expireMessages/x")) == (
        400,
        "invalid-request",
    )
    assert error(
        broker, "POST", admin(new_topic("none"), "/all_subscription/expireMessages/1")
    ) == (
        404,
        "not-found",
    )


def test_a_namespaces_backlogs_are_cleared_on_every_topic_and_partition(
    broker: ServedBroker, client: pulsar.Client
) -> None:
    namespace = broker.new_namespace("clear")
    plain = new_topic("plain", namespace)
    partitioned = new_topic("parts", namespace)
    broker.ok("PUT", admin(partitioned, "/partitions"), 2)
    for topic in (plain, partitioned):
        subscription_on(broker, topic, "s")
        subscription_on(broker, topic, "keep")
    produce(client, plain, 3)
    produce(client, partitioned, 4)
    assert status(broker, "POST", f"/admin/v2/namespaces/{namespace}/clearBacklog/s")[0] == 204
    assert backlog(broker, plain, "s") == 0
    assert backlog(broker, plain, "keep") == 3
    for index in range(2):
        assert backlog(broker, f"{partitioned}-partition-{index}", "s") == 0
    assert status(broker, "POST", f"/admin/v2/namespaces/{namespace}/clearBacklog")[0] == 204
    assert backlog(broker, plain, "keep") == 0
    assert error(broker, "POST", "/admin/v2/namespaces/public/nowhere/clearBacklog") == (
        404,
        "not-found",
    )


# ---------------------------------------------------------------------- stats


def test_stats_list_publishers_and_where_consumers_connect_from(
    broker: ServedBroker, client: pulsar.Client
) -> None:
    topic = new_topic("stats")
    producer = client.create_producer(
        persistent(topic),
        producer_name="writer",
        batching_enabled=False,
        properties={"app": "orders"},
    )
    consumer = client.subscribe(
        persistent(topic), "s", consumer_name="reader", properties={"team": "blue"}
    )
    for index in range(3):
        producer.send(f"m{index}".encode())
    stats = broker.ok("GET", admin(topic, "/stats"))
    [publisher] = stats["publishers"]
    assert publisher["producerName"] == "writer"
    assert publisher["metadata"] == {"app": "orders"}
    assert publisher["accessMode"] == "Shared"
    assert isinstance(publisher["producerId"], int)
    assert publisher["address"].startswith("/127.0.0.1:")
    assert publisher["connectedSince"].endswith("Z") and publisher["clientVersion"]
    assert {"msgRateIn", "msgThroughputIn", "averageMsgSize"} <= set(publisher)
    assert stats["waitingPublishers"] == 0
    assert stats["deduplicationStatus"] == "Disabled"
    assert isinstance(stats["averageMsgSize"], float)
    [reader] = stats["subscriptions"]["s"]["consumers"]
    assert reader["consumerName"] == "reader"
    assert reader["metadata"] == {"team": "blue"}
    assert reader["address"].startswith("/127.0.0.1:")
    assert reader["connectedSince"].endswith("Z") and reader["clientVersion"]
    producer.close()
    eventually(lambda: broker.ok("GET", admin(topic, "/stats"))["publishers"] == [], "the close")
    consumer.close()
