"""The response models of ``broker/http/schemas.py`` hold the handlers: brokers on real
ports answer produce, consume, stats, internal stats, cache, storage, trace, dashboard,
cluster, fault, lookup and partitioned-topic routes, and every JSON answer must validate
strictly against its model (no coercion: a count sent as a float or a rate as a string
fails) with no field the model does not name, unless the model allows more (counters)."""

from __future__ import annotations

import pathlib
from typing import Any, TypeVar, get_args

import pytest
from pydantic import BaseModel, RootModel, TypeAdapter, ValidationError

from broker.http.errors import ERRORS, REDIRECT_CODE
from broker.http.schemas import (
    Broker,
    CacheStats,
    ClusterStats,
    ConsumerCreated,
    DashboardData,
    DashboardHistory,
    Error,
    ErrorCode,
    FaultSettings,
    LookupData,
    NameList,
    OffloadStatus,
    PartitionedTopicMetadata,
    PartitionedTopicStats,
    PersistentTopicInternalStats,
    ProduceResponse,
    ReceiveResponse,
    RestartAccepted,
    StorageStats,
    TopicLastMessageId,
    TopicList,
    TopicStats,
    TraceStats,
)
from storage_stub.bookie.api import OPERATIONS
from storage_stub.tiered.api import OBJECT_OPERATIONS
from tests.conftest import Client, LiveBroker, LocalClusterFactory
from tests.harness import b64, eventually_async, short, topics_in_distinct_bundles

T = TypeVar("T")

ADMIN = "/admin/v2/persistent/"
RECEIVE_DEADLINE_S = 20.0
#: small ledgers, so a few messages make closed ledgers to offload
ROLL = {"managedLedgerMaxEntriesPerLedger": 4, "managedLedgerMinLedgerRolloverTimeMinutes": 0}


def unknown_fields(value: object, raw: object, path: str = "$") -> list[str]:
    """Paths of the fields in ``raw`` that the validated ``value``'s models do not name,
    except under models that allow extra fields (those validate their type)."""
    if isinstance(value, RootModel):
        return unknown_fields(value.root, raw, path)
    if isinstance(value, BaseModel):
        assert isinstance(raw, dict)
        fields = type(value).model_fields
        found = []
        if value.model_config.get("extra") != "allow":
            found = [f"{path}.{name}" for name in raw if name not in fields]
        for name in fields:
            if name in raw:
                found += unknown_fields(getattr(value, name), raw[name], f"{path}.{name}")
        return found
    if isinstance(value, list):
        assert isinstance(raw, list)
        return [
            unknown
            for index, (item, raw_item) in enumerate(zip(value, raw, strict=True))
            for unknown in unknown_fields(item, raw_item, f"{path}[{index}]")
        ]
    if isinstance(value, dict):
        assert isinstance(raw, dict)
        return [
            unknown
            for key in value
            for unknown in unknown_fields(value[key], raw[key], f"{path}.{key}")
        ]
    return []


def conforming(model: type[T], answer: Any) -> T:
    """``answer`` validated strictly as ``model``, with no field the model lacks."""
    value = TypeAdapter(model).validate_python(answer, strict=True)
    assert unknown_fields(value, answer) == [], f"fields {model} does not name"
    return value


async def answer(client: Client, method: str, path: str, status: int = 200, **kw: Any) -> Any:
    got, body = await client.request(method, path, **kw)
    assert got == status, (method, path, got, body)
    return body


# ---------------------------------------------------------------------- the checker itself


LAST_MESSAGE_ID = {"ledgerId": 3, "entryId": 17, "partitionIndex": -1, "batchIndex": -1}
STORAGE_STATS: dict[str, dict[str, float]] = {
    "bookie": {
        "readRequests": 1,
        "entriesRead": 1,
        "bytesRead": 1,
        "getFloorCalls": 0,
        "lastEntryCacheHits": 0,
        "lastEntryCacheMisses": 0,
        "readOnly": 0,
        "diskUsage": 0.5,
        "addEntriesCalls": 7,  # a counter the model does not name: counters allow more
    },
    "tiered": {"objectGets": 0, "bytesRead": 0, "indexLoads": 0, "bloomSkips": 0},
}


def test_the_check_passes_answers_as_the_models_describe_them() -> None:
    conforming(TopicLastMessageId, LAST_MESSAGE_ID)
    conforming(StorageStats, STORAGE_STATS)


@pytest.mark.parametrize(
    ("model", "bad"),
    [
        (TopicLastMessageId, {**LAST_MESSAGE_ID, "extra": 1}),
        (TopicLastMessageId, {**LAST_MESSAGE_ID, "entryId": 17.0}),
        (TopicLastMessageId, {**LAST_MESSAGE_ID, "ledgerId": "3"}),
        (TopicLastMessageId, {k: v for k, v in LAST_MESSAGE_ID.items() if k != "batchIndex"}),
        (StorageStats, {**STORAGE_STATS, "tiered": {**STORAGE_STATS["tiered"], "more": 0.5}}),
    ],
    ids=["unknown-field", "float-for-int", "string-for-int", "missing-field", "float-counter"],
)
def test_the_check_refuses_an_unknown_field_a_missing_one_or_a_wrong_type(
    model: type[BaseModel], bad: dict[str, Any]
) -> None:
    with pytest.raises((AssertionError, ValidationError)):
        conforming(model, bad)


def test_the_fault_settings_name_every_storage_operation() -> None:
    assert set(FaultSettings.model_fields) == {*OPERATIONS, *OBJECT_OPERATIONS}


def test_the_error_codes_are_those_of_the_error_table() -> None:
    codes = {code for code, _ in ERRORS.values()} | {REDIRECT_CODE}
    assert set(get_args(ErrorCode)) == codes


# ---------------------------------------------------------------------- scenarios


async def test_produced_and_received_messages_answer_as_their_models(
    live_broker: LiveBroker,
) -> None:
    client = await live_broker()
    topic = "public/default/schema-messages"
    created = await answer(
        client,
        "POST",
        f"/consumers/persistent/{topic}/reader",
        json={"subscriptionInitialPosition": "Earliest", "subscriptionType": "Shared"},
    )
    consumer = conforming(ConsumerCreated, created).consumerId
    for body in (
        {"messages": [{"payload": b64("plain")}, {"payload": b64("plain too")}]},
        {
            "messages": [
                {"payload": b64("keyed"), "key": "k", "properties": {"a": "b"}, "eventTime": 5}
            ]
        },
        {"messages": [{"payload": b64("one")}, {"payload": b64("two")}], "batch": True},
    ):
        produced = await answer(client, "POST", f"/topics/persistent/{topic}", json=body)
        conforming(ProduceResponse, produced)

    received: list[dict[str, Any]] = []

    async def all_five() -> bool:
        polled = await answer(
            client, "GET", f"/consumers/{consumer}/messages", maxMessages=10, timeoutMs=500
        )
        conforming(ReceiveResponse, polled)
        received.extend(polled["messages"])
        return len(received) >= 5

    await eventually_async(all_five, "the five messages", RECEIVE_DEADLINE_S)
    assert len(received) == 5
    assert any("key" in message for message in received)
    assert any(message["messageId"].count(":") == 2 for message in received)  # a batch's
    empty = await answer(client, "GET", f"/consumers/{consumer}/messages", timeoutMs=0)
    assert conforming(ReceiveResponse, empty).messages == []


async def test_topic_stats_internal_stats_and_offload_answer_as_their_models(
    live_broker: LiveBroker,
) -> None:
    client = await live_broker(**ROLL, managedLedgerOffloadDeletionLagMs=0)
    topic = "public/default/schema-stats"
    await answer(client, "PUT", f"{ADMIN}{topic}/subscription/idle", 204)  # never a consumer
    consumer = await client.subscribe(topic, "busy", subscriptionInitialPosition="Earliest")
    ids = await client.produce(topic, [f"m{i}" for i in range(10)])
    received = await client.receive_until(consumer, 10)
    await client.ack(consumer, [message["messageId"] for message in received[2:5]])
    await client.ack(consumer, [received[7]["messageId"]])

    stats = conforming(TopicStats, await client.stats(topic))
    assert stats.subscriptions["busy"].consumers, "the scenario has a connected consumer"
    internal = conforming(PersistentTopicInternalStats, await client.internal_stats(topic))
    assert internal.cursors["busy"].individuallyDeletedMessages != "[]"
    last = await answer(client, "GET", f"{ADMIN}{topic}/lastMessageId")
    conforming(TopicLastMessageId, last)
    status = await answer(client, "GET", f"{ADMIN}{topic}/offload")
    assert conforming(OffloadStatus, status).status == "NOT_RUN"

    await answer(client, "PUT", f"{ADMIN}{topic}/offload", 204, json={"messageId": ids[-1]})
    status = await answer(client, "GET", f"{ADMIN}{topic}/offload")
    assert conforming(OffloadStatus, status).status == "SUCCESS"
    internal = conforming(PersistentTopicInternalStats, await client.internal_stats(topic))
    assert any(ledger.offloaded for ledger in internal.ledgers)
    assert conforming(TopicStats, await client.stats(topic)).offloadedStorageSize > 0

    batched = "public/default/schema-batched"
    await answer(
        client,
        "POST",
        f"/topics/persistent/{batched}",
        json={"messages": [{"payload": b64("a")}, {"payload": b64("b")}], "batch": True},
    )
    last = await answer(client, "GET", f"{ADMIN}{batched}/lastMessageId")
    assert conforming(TopicLastMessageId, last).batchIndex == 1
    empty = "public/default/schema-empty"
    await answer(client, "PUT", f"{ADMIN}{empty}/subscription/s", 204)
    last = await answer(client, "GET", f"{ADMIN}{empty}/lastMessageId")
    assert conforming(TopicLastMessageId, last).entryId == -1
    conforming(PersistentTopicInternalStats, await client.internal_stats(empty))


async def test_partitioned_topics_lookups_and_listings_answer_as_their_models(
    live_broker: LiveBroker,
) -> None:
    client = await live_broker()
    topic = "public/default/schema-partitioned"
    await answer(client, "PUT", f"{ADMIN}{topic}/partitions", 204, json=3)
    metadata = await answer(client, "GET", f"{ADMIN}{topic}/partitions")
    assert conforming(PartitionedTopicMetadata, metadata).partitions == 3
    await client.produce("public/default/schema-plain", ["x"])
    plain = await answer(client, "GET", f"{ADMIN}public/default/schema-plain/partitions")
    conforming(PartitionedTopicMetadata, plain)

    exclusive = await client.subscribe(f"{topic}-partition-0", "sub")
    shared = await client.subscribe(f"{topic}-partition-1", "sub", subscriptionType="Shared")
    for index in range(3):
        await client.produce(f"{topic}-partition-{index}", [f"p{index}"])
    await client.receive_until(exclusive, 1)
    await client.receive_until(shared, 1)

    for per_partition in ("true", "false"):
        stats = await answer(
            client, "GET", f"{ADMIN}{topic}/partitioned-stats", perPartition=per_partition
        )
        validated = conforming(PartitionedTopicStats, stats)
        assert validated.metadata.partitions == 3
        assert len(validated.partitions) == (3 if per_partition == "true" else 0)
    last = await answer(client, "GET", f"{ADMIN}{topic}-partition-2/lastMessageId")
    assert conforming(TopicLastMessageId, last).partitionIndex == 2

    lookup = await answer(client, "GET", f"/lookup/v2/topic/persistent/{topic}-partition-0")
    conforming(LookupData, lookup)
    for path in (
        f"{ADMIN}public/default/partitioned",
        f"{ADMIN}{topic}/subscriptions",
        f"{ADMIN}{topic}-partition-0/subscriptions",
        "/admin/v2/clusters",
        "/admin/v2/tenants",
        "/admin/v2/namespaces/public",
    ):
        conforming(NameList, await answer(client, "GET", path))
    for path in (
        "/admin/v2/persistent/public/default",
        "/admin/v2/namespaces/public/default/topics",
    ):
        listed = conforming(TopicList, await answer(client, "GET", path))
        assert f"persistent://{topic}-partition-0" in listed.root


async def test_broker_stats_dashboard_and_faults_answer_as_their_models(
    live_broker: LiveBroker, tmp_path: pathlib.Path
) -> None:
    client = await live_broker(
        managedLedgerCacheImplementation="pip430",
        brokerlabShadowCacheImplementations="legacy,segmented",
        brokerlabTraceDir=str(tmp_path / "trace"),
    )
    topic = "public/default/schema-broker"
    consumer = await client.subscribe(topic, "sub", subscriptionInitialPosition="Earliest")
    await client.produce(topic, [f"m{i}" for i in range(5)])
    await client.receive_until(consumer, 5)

    cache = conforming(CacheStats, await answer(client, "GET", "/admin/v2/broker-stats/cache"))
    assert set(cache.shadows) == {"legacy", "segmented"}
    conforming(StorageStats, await answer(client, "GET", "/admin/v2/broker-stats/storage"))
    together = conforming(ClusterStats, await answer(client, "GET", "/admin/v2/brokerlab/stats"))
    assert [set(one.shadows) for one in together.cache] == [{"legacy", "segmented"}]
    trace = conforming(TraceStats, await answer(client, "GET", "/admin/v2/broker-stats/trace"))
    assert trace.enabled
    dashboard = conforming(DashboardData, await answer(client, "GET", "/dashboard/data"))
    assert dashboard.topTopics, "the scenario has a loaded topic"
    history = conforming(DashboardHistory, await answer(client, "GET", "/dashboard/history"))
    assert history.shadows == ["legacy", "segmented"] and history.rows, history
    assert all(len(row) == len(history.columns) for row in history.rows), history
    conforming(list[Broker], await answer(client, "GET", "/admin/v2/brokerlab/brokers"))

    faults = "/admin/v2/brokerlab/faults"
    assert conforming(FaultSettings, await answer(client, "GET", faults)).model_dump() == {}
    await answer(client, "PUT", faults, 204, json={"operation": "readEntries", "errorRate": 0.5})
    await answer(client, "PUT", faults, 204, json={"operation": "objectGet", "delayMs": 1})
    settings = conforming(FaultSettings, await answer(client, "GET", faults))
    assert set(settings.model_dump()) == {"readEntries", "objectGet"}
    await answer(client, "DELETE", faults, 204)

    untraced = await live_broker(managedLedgerCacheSizeMB=0)
    trace = conforming(TraceStats, await answer(untraced, "GET", "/admin/v2/broker-stats/trace"))
    assert not trace.enabled
    cache = conforming(CacheStats, await answer(untraced, "GET", "/admin/v2/broker-stats/cache"))
    assert cache.implementation == "disabled"


async def test_error_answers_carry_the_error_model(live_broker: LiveBroker) -> None:
    client = await live_broker(maxMessagesPerProduceRequest=2)
    topic = "public/default/schema-errors"
    await client.produce(topic, ["x"])
    three = {"messages": [{"payload": b64("m")}] * 3}
    for method, path, status, body in (
        ("GET", f"{ADMIN}public/default/missing/stats", 404, None),
        ("GET", f"{ADMIN}public/default/{'x' * 200}/stats", 400, None),
        ("PUT", f"{ADMIN}{topic}/partitions", 409, 3),
        ("POST", f"/topics/persistent/{topic}", 413, three),
        ("POST", "/consumers/nobody/ack", 404, {"messageIds": ["1:1"]}),
        ("PATCH", f"{ADMIN}{topic}/stats", 405, None),
    ):
        error = await answer(client, method, path, status, json=body)
        conforming(Error, error)


async def test_cluster_routes_answer_as_their_models_while_a_broker_restarts(
    local_cluster: LocalClusterFactory,
) -> None:
    local = await local_cluster()
    first, second = local.clients
    restarted = await answer(first, "POST", "/admin/v2/brokerlab/brokers/1/restart")
    assert conforming(Broker, restarted).state == "up"

    # broker 0 is given the first bundle asked about, broker 1 the next
    mine, theirs = (short(topic) for topic in topics_in_distinct_bundles("schema", 2))
    await first.produce(mine, ["x"])
    lookup = await answer(first, "GET", f"/lookup/v2/topic/persistent/{theirs}")
    assert conforming(LookupData, lookup).httpUrl == second.base_url
    async with first.session.get(
        f"{first.base_url}{ADMIN}{theirs}/stats", allow_redirects=False
    ) as response:
        assert response.status == 307
        assert conforming(Error, await response.json()).code == "not-owner"

    accepted = await answer(
        first, "POST", "/admin/v2/brokerlab/brokers/0/restart", 202, mode="kill", downtimeMs=60_000
    )
    conforming(RestartAccepted, accepted)

    async def first_restarting() -> bool:
        brokers = conforming(
            list[Broker], await answer(second, "GET", "/admin/v2/brokerlab/brokers")
        )
        return brokers[0].state == "restarting"

    await eventually_async(first_restarting, "broker 0 to be restarting")
    # every broker's cache, the one down too (its last incarnation's), and the storage
    together = conforming(ClusterStats, await answer(second, "GET", "/admin/v2/brokerlab/stats"))
    assert len(together.cache) == 2
    dashboard = conforming(DashboardData, await answer(second, "GET", "/dashboard/data"))
    assert [broker.state for broker in dashboard.brokers] == ["restarting", "up"]
