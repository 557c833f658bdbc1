"""Pulsar's admin and lookup routes against a real broker on a real port: what Pulsar
clients and ``pulsar-admin`` call (partitioned topics, lookup, clusters, tenants,
namespaces, subscriptions, unloads, lastMessageId) answers as Pulsar does, and the
official Pulsar client works against brokerlab through an ``http://`` service URL."""

from __future__ import annotations

import asyncio
import json
import pathlib
import sys
from typing import Any

import pytest

from broker.cluster import http_url
from broker.http.pulsar_admin import lookup_data
from tests.conftest import Client, LiveBroker
from tests.harness import b64, in_process_broker, new_topic, unb64

MAX_LONG = 2**63 - 1
#: longest a client script may take (it normally takes about a second)
CLIENT_DEADLINE_S = 120


def admin(topic: str, rest: str = "") -> str:
    return f"/admin/v2/persistent/{topic}{rest}"


async def ok(client: Client, method: str, path: str, expected: int = 204, **kw: Any) -> Any:
    status, body = await client.request(method, path, **kw)
    assert status == expected, (method, path, status, body)
    return body


async def error_code(client: Client, method: str, path: str, **kw: Any) -> tuple[int, str]:
    status, body = await client.request(method, path, **kw)
    assert status >= 400 and isinstance(body, dict) and body["reason"], (status, body)
    return status, str(body["code"])


# ---------------------------------------------------------------------- partitioned topics


async def test_a_partitioned_topic_is_created_read_raised_and_deleted(
    live_broker: LiveBroker,
) -> None:
    client = await live_broker()
    topic = new_topic()
    await ok(client, "PUT", admin(topic, "/partitions"), json=3)
    assert await ok(client, "GET", admin(topic, "/partitions"), 200) == {
        "partitions": 3,
        "deleted": False,
    }
    assert await error_code(client, "PUT", admin(topic, "/partitions"), json=3) == (
        409,
        "conflict",
    )
    partitions = [f"persistent://{topic}-partition-{i}" for i in range(3)]
    listed = await ok(client, "GET", "/admin/v2/persistent/public/default", 200)
    assert [name for name in listed if name.startswith(f"persistent://{topic}-")] == partitions
    partitioned = await ok(client, "GET", "/admin/v2/persistent/public/default/partitioned", 200)
    assert f"persistent://{topic}" in partitioned

    await ok(client, "POST", admin(topic, "/partitions"), json=5)
    assert (await ok(client, "GET", admin(topic, "/partitions"), 200))["partitions"] == 5
    assert await error_code(client, "POST", admin(topic, "/partitions"), json=4) == (
        409,
        "conflict",
    )

    await client.produce(f"{topic}-partition-4", ["m"])
    await ok(client, "DELETE", admin(topic, "/partitions"))
    assert await error_code(client, "GET", admin(topic, "/partitions")) == (404, "not-found")
    listed = await ok(client, "GET", "/admin/v2/persistent/public/default", 200)
    assert not [name for name in listed if name.startswith(f"persistent://{topic}")]


@pytest.mark.parametrize("body", [b"", b"0", b"-2", b'"3"', b"true", b"2.0", b"{", b"[3]"])
async def test_a_partition_count_that_is_not_a_positive_integer_is_refused(
    live_broker: LiveBroker, body: bytes
) -> None:
    client = await live_broker()
    topic = new_topic()
    assert await error_code(client, "PUT", admin(topic, "/partitions"), data=body) == (
        400,
        "invalid-request",
    )
    assert await error_code(client, "GET", admin(topic, "/partitions")) == (404, "not-found")


async def test_the_count_limit_and_partition_like_names_are_refused(
    live_broker: LiveBroker,
) -> None:
    client = await live_broker(maxNumPartitionsPerPartitionedTopic=4)
    topic = new_topic()
    assert (await error_code(client, "PUT", admin(topic, "/partitions"), json=5))[0] == 400
    assert (await error_code(client, "PUT", admin(f"{topic}-partition-0", "/partitions"), json=2))[
        0
    ] == 400
    await ok(client, "PUT", admin(topic, "/partitions"), json=4)
    assert (await error_code(client, "POST", admin(topic, "/partitions"), json=5))[0] == 400


async def test_a_topic_and_a_partitioned_topic_never_share_a_name(
    live_broker: LiveBroker,
) -> None:
    client = await live_broker()
    plain, partitioned = new_topic(), new_topic()
    await client.produce(plain, ["m"])
    assert await error_code(client, "PUT", admin(plain, "/partitions"), json=2) == (
        409,
        "conflict",
    )
    await ok(client, "PUT", admin(partitioned, "/partitions"), json=2)
    status, body = await client.request(
        "POST", f"/topics/persistent/{partitioned}", json={"messages": [{"payload": b64("x")}]}
    )
    assert (status, body["code"]) == (409, "conflict") and "partition" in body["reason"]
    status, body = await client.request("POST", f"/consumers/persistent/{partitioned}/s", json={})
    assert status == 409, body
    assert await error_code(client, "GET", admin(partitioned, "/stats")) == (404, "not-found")
    # a partition past the count is not a topic either
    status, _ = await client.request(
        "POST",
        f"/topics/persistent/{partitioned}-partition-2",
        json={"messages": [{"payload": b64("x")}]},
    )
    assert status == 409


async def test_partitions_are_topics_even_with_auto_creation_off(live_broker: LiveBroker) -> None:
    client = await live_broker(allowAutoTopicCreation=False)
    topic = new_topic()
    status, _ = await client.request(
        "POST", f"/topics/persistent/{topic}", json={"messages": [{"payload": b64("x")}]}
    )
    assert status == 404
    await ok(client, "PUT", admin(topic, "/partitions"), json=2)
    ids = await client.produce(f"{topic}-partition-1", ["a", "b"])
    assert len(ids) == 2
    stats = await client.stats(f"{topic}-partition-0")  # never used, still a topic
    assert stats["msgInCounter"] == 0


async def test_get_partitions_tells_a_client_what_to_create(live_broker: LiveBroker) -> None:
    client = await live_broker()
    plain, missing = new_topic(), new_topic()
    await client.produce(plain, ["m"])
    assert (await ok(client, "GET", admin(plain, "/partitions"), 200))["partitions"] == 0
    assert await error_code(client, "GET", admin(missing, "/partitions")) == (404, "not-found")
    answer = await ok(
        client, "GET", admin(missing, "/partitions"), 200, checkAllowAutoCreation="true"
    )
    assert answer == {"partitions": 0, "deleted": False}
    assert (await error_code(client, "GET", admin(missing, "/partitions")))[0] == 404
    assert (
        await error_code(client, "GET", admin(missing, "/partitions"), checkAllowAutoCreation="1")
    )[0] == 400


async def test_with_auto_creation_type_partitioned_a_clients_question_creates_one(
    live_broker: LiveBroker,
) -> None:
    client = await live_broker(allowAutoTopicCreationType="partitioned", defaultNumPartitions=2)
    topic = new_topic()
    answer = await ok(
        client, "GET", admin(topic, "/partitions"), 200, checkAllowAutoCreation="true"
    )
    assert answer["partitions"] == 2
    assert (await ok(client, "GET", admin(topic, "/partitions"), 200))["partitions"] == 2


async def test_partitioned_stats_add_up_the_partitions(live_broker: LiveBroker) -> None:
    client = await live_broker()
    topic = new_topic()
    await ok(client, "PUT", admin(topic, "/partitions"), json=2)
    await ok(client, "PUT", admin(topic, "/subscription/s"))
    await client.produce(f"{topic}-partition-0", ["a", "b"])
    await client.produce(f"{topic}-partition-1", ["c"])
    stats = await ok(client, "GET", admin(topic, "/partitioned-stats"), 200)
    assert stats["msgInCounter"] == 3
    assert stats["metadata"] == {"partitions": 2, "deleted": False}
    assert stats["subscriptions"]["s"]["msgBacklog"] == 3
    assert sorted(stats["partitions"]) == [f"persistent://{topic}-partition-{i}" for i in (0, 1)]
    assert stats["partitions"][f"persistent://{topic}-partition-0"]["msgInCounter"] == 2
    brief = await ok(client, "GET", admin(topic, "/partitioned-stats"), 200, perPartition="false")
    assert brief["partitions"] == {} and brief["msgInCounter"] == 3
    assert (await error_code(client, "GET", admin(new_topic(), "/partitioned-stats")))[0] == 404


# ---------------------------------------------------------------------- lookup


def test_lookup_data_has_the_fields_pulsar_clients_read() -> None:
    data = lookup_data(http_url("broker.example", 8080), "pulsar://broker.example:6650")
    assert data == {
        "brokerUrl": "pulsar://broker.example:6650",
        "brokerUrlTls": None,
        "httpUrl": "http://broker.example:8080",
        "httpUrlTls": None,
        "nativeUrl": "pulsar://broker.example:6650",
        "brokerUrlSsl": "",
    }
    assert lookup_data(http_url("::1", 80), None)["httpUrl"] == "http://[::1]:80"


async def test_lookup_without_the_binary_protocol_gives_the_http_url_only(
    live_broker: LiveBroker,
) -> None:
    client = await live_broker()  # brokerServicePort=0: the protocol is off
    topic = new_topic()
    data = await ok(client, "GET", f"/lookup/v2/topic/persistent/{topic}", 200)
    assert data["brokerUrl"] is None and data["nativeUrl"] is None
    assert data["httpUrl"] == client.base_url  # the port this request came in on


async def test_lookup_names_the_binary_port_and_knows_missing_topics(
    live_broker: LiveBroker,
) -> None:
    client = await live_broker(brokerServicePort=-1, allowAutoTopicCreation=False)
    missing, partitioned = new_topic(), new_topic()
    assert await error_code(client, "GET", f"/lookup/v2/topic/persistent/{missing}") == (
        404,
        "not-found",
    )
    await ok(client, "PUT", admin(partitioned, "/partitions"), json=2)
    for name in (partitioned, f"{partitioned}-partition-1"):
        data = await ok(client, "GET", f"/lookup/v2/topic/persistent/{name}", 200)
        host, port = data["brokerUrl"].removeprefix("pulsar://").rsplit(":", 1)
        assert host == "127.0.0.1" and int(port) > 0
        assert data["nativeUrl"] == data["brokerUrl"] and data["brokerUrlSsl"] == ""
    assert (await error_code(client, "GET", f"/lookup/v2/topic/persistent/{missing}/x"))[0] == 404


#: The official client, in a child process: a client that crashes on a bad answer (the
#: C++ core segfaults on some malformed lookups) fails its test, not the whole run.
CLIENT_PARTITIONS = """
import json, sys, pulsar
client = pulsar.Client(sys.argv[1], operation_timeout_seconds=10,
                       logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
print(json.dumps([client.get_topic_partitions(topic) for topic in sys.argv[2:]]))
client.close()
"""

CLIENT_PRODUCE_CONSUME = """
import json, sys, pulsar
url, topic, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
client = pulsar.Client(url, operation_timeout_seconds=20,
                       logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
producer = client.create_producer(topic)
for index in range(count):
    producer.send(f"m{index}".encode(), partition_key=f"k{index}")
received = []
for _ in range(count):
    message = consumer.receive(20_000)
    received.append(message.data().decode())
    consumer.acknowledge(message)
client.close()
print(json.dumps(received))
"""


async def run_client(script: str, *args: str) -> Any:
    """Run a Pulsar client script; its JSON output. Fails with its output if it fails."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        script,
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), CLIENT_DEADLINE_S)
    assert process.returncode == 0, f"client exited {process.returncode}:\n{err.decode()}"
    return json.loads(out.decode().strip().splitlines()[-1])


async def test_the_official_client_reads_partitions_over_http(live_broker: LiveBroker) -> None:
    client = await live_broker()
    topic, plain = new_topic(), new_topic()
    await ok(client, "PUT", admin(topic, "/partitions"), json=3)
    await client.produce(plain, ["m"])
    names = await run_client(
        CLIENT_PARTITIONS, client.base_url, f"persistent://{topic}", f"persistent://{plain}"
    )
    assert names == [
        [f"persistent://{topic}-partition-{i}" for i in range(3)],
        [f"persistent://{plain}"],
    ]


@pytest.mark.slow
async def test_the_official_client_produces_and_consumes_a_partitioned_topic_via_http_lookup(
    live_broker: LiveBroker,
) -> None:
    client = await live_broker(brokerServicePort=-1)
    topic = new_topic()
    await ok(client, "PUT", admin(topic, "/partitions"), json=3)
    received = await run_client(
        CLIENT_PRODUCE_CONSUME, client.base_url, f"persistent://{topic}", "30"
    )
    assert sorted(received) == sorted(f"m{i}" for i in range(30))
    stats = await ok(client, "GET", admin(topic, "/partitioned-stats"), 200)
    assert stats["msgInCounter"] == 30
    # the keys went to more than one partition, each found through an HTTP lookup
    assert len([p for p in stats["partitions"].values() if p["msgInCounter"]]) > 1


# ---------------------------------------------------------------------- clusters, tenants, ns


async def test_standalone_has_its_cluster_tenant_and_namespace(live_broker: LiveBroker) -> None:
    client = await live_broker(clusterName="lab")
    assert await ok(client, "GET", "/admin/v2/clusters", 200) == ["lab"]
    assert await ok(client, "GET", "/admin/v2/tenants", 200) == ["public"]
    assert await ok(client, "GET", "/admin/v2/tenants/public", 200) == {
        "adminRoles": [],
        "allowedClusters": ["lab"],
    }
    assert await ok(client, "GET", "/admin/v2/namespaces/public", 200) == ["public/default"]


async def test_tenants_and_namespaces_are_created_listed_and_deleted(
    live_broker: LiveBroker,
) -> None:
    client = await live_broker()
    await ok(client, "PUT", "/admin/v2/tenants/acme", json={"adminRoles": ["ops"]})
    assert await ok(client, "GET", "/admin/v2/tenants/acme", 200) == {
        "adminRoles": ["ops"],
        "allowedClusters": ["standalone"],
    }
    assert await error_code(client, "PUT", "/admin/v2/tenants/acme") == (409, "conflict")
    bad = {"allowedClusters": ["elsewhere"]}
    assert (await error_code(client, "PUT", "/admin/v2/tenants/other", json=bad))[0] == 400
    assert await ok(client, "GET", "/admin/v2/tenants", 200) == ["acme", "public"]

    assert await ok(client, "GET", "/admin/v2/namespaces/acme", 200) == []
    await ok(client, "PUT", "/admin/v2/namespaces/acme/orders", json={})
    await ok(client, "PUT", "/admin/v2/namespaces/acme/billing")
    assert await error_code(client, "PUT", "/admin/v2/namespaces/acme/orders") == (
        409,
        "conflict",
    )
    assert await error_code(client, "PUT", "/admin/v2/namespaces/nobody/ns") == (404, "not-found")
    assert await ok(client, "GET", "/admin/v2/namespaces/acme", 200) == [
        "acme/billing",
        "acme/orders",
    ]
    assert await error_code(client, "GET", "/admin/v2/namespaces/nobody") == (404, "not-found")

    await client.produce("acme/orders/o1", ["m"])
    await ok(client, "PUT", admin("acme/orders/p1", "/partitions"), json=2)
    assert await ok(client, "GET", "/admin/v2/namespaces/acme/orders/topics", 200) == [
        "persistent://acme/orders/o1",
        "persistent://acme/orders/p1-partition-0",
        "persistent://acme/orders/p1-partition-1",
    ]
    assert await error_code(client, "DELETE", "/admin/v2/namespaces/acme/orders") == (
        409,
        "conflict",
    )
    assert await error_code(client, "DELETE", "/admin/v2/tenants/acme") == (409, "conflict")
    await ok(client, "DELETE", "/admin/v2/namespaces/acme/orders", force="true")
    assert await ok(client, "GET", "/admin/v2/namespaces/acme/orders/topics", 200) == []
    assert await error_code(client, "GET", admin("acme/orders/p1", "/partitions")) == (
        404,
        "not-found",
    )
    await ok(client, "DELETE", "/admin/v2/tenants/acme", force="true")
    assert await ok(client, "GET", "/admin/v2/tenants", 200) == ["public"]
    assert await error_code(client, "DELETE", "/admin/v2/tenants/acme") == (404, "not-found")
    assert await error_code(client, "DELETE", "/admin/v2/namespaces/acme/billing") == (
        404,
        "not-found",
    )


async def test_topics_need_no_registered_namespace(live_broker: LiveBroker) -> None:
    client = await live_broker()
    await client.produce("nowhere/adhoc/t", ["m"])
    assert await ok(client, "GET", "/admin/v2/namespaces/nowhere/adhoc/topics", 200) == [
        "persistent://nowhere/adhoc/t"
    ]
    assert (
        await ok(
            client, "GET", "/admin/v2/namespaces/nowhere/adhoc/topics", 200, mode="NON_PERSISTENT"
        )
        == []
    )
    assert await error_code(client, "GET", "/admin/v2/tenants/nowhere") == (404, "not-found")


async def test_the_registry_survives_a_restart_and_deleted_defaults_stay_deleted(
    tmp_path: pathlib.Path,
) -> None:
    data_dir = tmp_path / "data"
    async with in_process_broker(data_dir) as first:
        await ok(first, "PUT", "/admin/v2/tenants/acme")
        await ok(first, "DELETE", "/admin/v2/namespaces/public/default")
        await ok(first, "PUT", admin("acme/ns/t", "/partitions"), json=2)
    async with in_process_broker(data_dir) as second:
        assert await ok(second, "GET", "/admin/v2/tenants", 200) == ["acme", "public"]
        assert await ok(second, "GET", "/admin/v2/namespaces/public", 200) == []
        assert (await ok(second, "GET", admin("acme/ns/t", "/partitions"), 200))["partitions"] == 2


# ---------------------------------------------------------------------- topics


async def test_subscriptions_are_listed_for_topics_and_partitioned_topics(
    live_broker: LiveBroker,
) -> None:
    client = await live_broker()
    plain, partitioned = new_topic(), new_topic()
    await ok(client, "PUT", admin(plain, "/subscription/b"))
    await ok(client, "PUT", admin(plain, "/subscription/a"))
    assert await ok(client, "GET", admin(plain, "/subscriptions"), 200) == ["a", "b"]
    await ok(client, "PUT", admin(partitioned, "/partitions"), json=2)
    await ok(client, "PUT", admin(partitioned, "/subscription/s"), json="earliest")
    assert await ok(client, "GET", admin(partitioned, "/subscriptions"), 200) == ["s"]
    for index in (0, 1):
        sub_list = await ok(
            client, "GET", admin(f"{partitioned}-partition-{index}", "/subscriptions"), 200
        )
        assert sub_list == ["s"]
    assert await error_code(client, "PUT", admin(partitioned, "/subscription/s")) == (
        409,
        "conflict",
    )
    start = {"ledgerId": 1, "entryId": 0}
    assert (await error_code(client, "PUT", admin(partitioned, "/subscription/t"), json=start))[
        0
    ] == 400
    assert await error_code(client, "GET", admin(new_topic(), "/subscriptions")) == (
        404,
        "not-found",
    )


async def first_message(client: Client, topic: str, subscription: str) -> str | None:
    consumer = await client.subscribe(topic, subscription)
    messages = await client.receive(consumer, 1, timeout_ms=200)
    return unb64(messages[0]["payload"]).decode() if messages else None


@pytest.mark.parametrize(
    ("start", "first"),
    [
        (None, None),
        ("latest", None),
        ("earliest", "m0"),
        ({"ledgerId": MAX_LONG, "entryId": MAX_LONG, "partitionIndex": -1}, None),
        ({"ledgerId": -1, "entryId": -1, "batchIndex": -1}, "m0"),
        ("AT_M2", "m2"),
        ("AFTER_M2", "m3"),
    ],
)
async def test_a_subscription_starts_where_pulsars_body_says(
    live_broker: LiveBroker, start: Any, first: str | None
) -> None:
    client = await live_broker()
    topic = new_topic()
    ids = await client.produce(topic, [f"m{i}" for i in range(4)])
    ledger, entry = (int(part) for part in ids[2].split(":"))
    if start == "AT_M2":
        start = {"ledgerId": ledger, "entryId": entry}
    elif start == "AFTER_M2":
        start = {"ledgerId": ledger, "entryId": entry, "isExcluded": True}
    await ok(client, "PUT", admin(topic, "/subscription/s"), json=start)
    assert await first_message(client, topic, "s") == first


async def test_the_query_form_of_subscription_creation_still_works(live_broker: LiveBroker) -> None:
    client = await live_broker()
    topic = new_topic()
    ids = await client.produce(topic, ["m0", "m1"])
    await ok(client, "PUT", admin(topic, "/subscription/s"), messageId=ids[1])
    assert await first_message(client, topic, "s") == "m1"


@pytest.mark.parametrize(
    "kw",
    [
        {"json": {"ledgerId": 1}},
        {"json": {"ledgerId": "1", "entryId": 0}},
        {"json": {"ledgerId": -2, "entryId": 0}},
        {"json": {"ledgerId": 1, "entryId": 0, "isExcluded": "yes"}},
        {"json": "somewhere"},
        {"json": [1, 0]},
        {"data": b"{"},
        {"json": "earliest", "messageId": "latest"},
    ],
)
async def test_a_bad_start_position_is_refused_and_creates_nothing(
    live_broker: LiveBroker, kw: dict[str, Any]
) -> None:
    client = await live_broker()
    topic = new_topic()
    await client.produce(topic, ["m"])
    assert await error_code(client, "PUT", admin(topic, "/subscription/s"), **kw) == (
        400,
        "invalid-request",
    )
    assert await ok(client, "GET", admin(topic, "/subscriptions"), 200) == []


async def test_last_message_id_has_pulsars_fields(live_broker: LiveBroker) -> None:
    client = await live_broker()
    topic = new_topic()
    ids = await client.produce(topic, ["a", "b"])
    ledger, entry = (int(part) for part in ids[-1].split(":"))
    assert await ok(client, "GET", admin(topic, "/lastMessageId"), 200) == {
        "ledgerId": ledger,
        "entryId": entry,
        "partitionIndex": -1,
        "batchIndex": -1,
    }
    status, body = await client.request(
        "POST",
        f"/topics/persistent/{topic}",
        json={"messages": [{"payload": b64(t)} for t in "xyz"], "batch": True},
    )
    assert status == 200, body
    last = await ok(client, "GET", admin(topic, "/lastMessageId"), 200)
    assert (last["entryId"], last["batchIndex"]) == (entry + 1, 2)

    partitioned = new_topic()
    await ok(client, "PUT", admin(partitioned, "/partitions"), json=3)
    await client.produce(f"{partitioned}-partition-2", ["p"])
    last = await ok(client, "GET", admin(f"{partitioned}-partition-2", "/lastMessageId"), 200)
    assert (last["partitionIndex"], last["batchIndex"], last["entryId"]) == (2, -1, 0)


async def test_unloading_a_topic_closes_its_consumers_and_keeps_its_messages(
    live_broker: LiveBroker,
) -> None:
    client = await live_broker()
    topic = new_topic()
    consumer = await client.subscribe(topic, "s", subscriptionInitialPosition="Earliest")
    await client.produce(topic, ["m"])
    await ok(client, "PUT", admin(topic, "/unload"))
    assert (await error_code(client, "GET", f"/consumers/{consumer}/messages"))[0] == 404
    again = await client.subscribe(topic, "s")
    assert [unb64(m["payload"]) for m in await client.receive_until(again, 1)] == [b"m"]
    assert await error_code(client, "PUT", admin(new_topic(), "/unload")) == (404, "not-found")


async def test_a_partitioned_topic_and_a_namespace_unload_with_pulsars_verbs(
    live_broker: LiveBroker,
) -> None:
    client = await live_broker()
    partitioned = new_topic(namespace="unload/ns")
    await ok(client, "PUT", admin(partitioned, "/partitions"), json=2)
    consumer = await client.subscribe(f"{partitioned}-partition-1", "s")
    await ok(client, "PUT", admin(partitioned, "/unload"))
    assert (await error_code(client, "GET", f"/consumers/{consumer}/messages"))[0] == 404
    for verb in ("PUT", "POST"):
        consumer = await client.subscribe(f"{partitioned}-partition-0", "s")
        await ok(client, verb, "/admin/v2/namespaces/unload/ns/unload")
        assert (await error_code(client, "GET", f"/consumers/{consumer}/messages"))[0] == 404


async def test_a_broker_started_by_create_app_lists_its_own_http_url(
    live_broker: LiveBroker,
) -> None:
    """brokerlab serve sets a broker's URL when it binds; a broker an app started
    (tests, embedding) learns it from the request that lists it."""
    client = await live_broker()
    (broker,) = await ok(client, "GET", "/admin/v2/brokerlab/brokers", 200)
    assert broker["httpUrl"] == client.base_url
    dashboard = await ok(client, "GET", "/dashboard/data", 200)
    assert dashboard["brokers"][0]["httpUrl"] == client.base_url
