"""The policy store: namespace and topic policies that survive a restart, resolve topic
over namespace over broker default, refuse unknown namespaces without storing anything,
and tell watchers what changed."""

from __future__ import annotations

import orjson
import pytest

from broker.cache import DEFAULT_DESIGN, CacheConfig, create_stream
from broker.clock import ManualClock
from broker.dispatch.errors import ConflictError, NotFoundError
from broker.dispatch.names import TopicName
from broker.dispatch.policies import (
    MESSAGE_TTL,
    RETENTION,
    PolicyStore,
    namespace_key,
    topic_policies_key,
)
from broker.dispatch.service import BrokerService, ServiceConfig
from storage_stub.bookie.api import StorageFaultError
from storage_stub.bookie.memory import InMemoryBookie, InMemoryMetadataStore

ORDERS = TopicName("public", "default", "orders")
RETAIN_1H = {"retentionTimeInMinutes": 60, "retentionSizeInMB": -1}


class FailingPuts(InMemoryMetadataStore):
    def __init__(self) -> None:
        super().__init__()
        self.failing = False

    async def put(self, key: str, value: bytes) -> None:
        if self.failing:
            raise StorageFaultError("metadataPut")
        await super().put(key, value)

    async def delete(self, key: str) -> None:
        if self.failing:
            raise StorageFaultError("metadataDelete")
        await super().delete(key)


async def loaded(metadata: InMemoryMetadataStore) -> PolicyStore:
    store = PolicyStore(metadata, "standalone")
    await store.load()
    return store


async def test_policies_survive_a_restart_under_pulsars_field_names() -> None:
    metadata = InMemoryMetadataStore()
    store = await loaded(metadata)
    assert store.namespace_exists("public", "default")  # the standalone default
    await store.set_namespace("public", "default", RETENTION, RETAIN_1H)
    await store.set_namespace("public", "default", MESSAGE_TTL, 30)
    await store.set_topic(ORDERS, MESSAGE_TTL, 5)

    record = orjson.loads(await metadata.get(namespace_key("public", "default")) or b"")
    assert record == {"retention_policies": RETAIN_1H, "message_ttl_in_seconds": 30}

    again = await loaded(metadata)
    assert again.namespace("public", "default", RETENTION) == RETAIN_1H
    assert again.namespace("public", "default", MESSAGE_TTL) == 30
    assert again.topic(ORDERS, MESSAGE_TTL) == 5
    assert again.topic(ORDERS, RETENTION) is None


async def test_the_topics_policy_wins_over_its_namespaces_over_the_broker_default() -> None:
    store = await loaded(InMemoryMetadataStore())
    other = TopicName("public", "default", "other")
    assert store.effective(ORDERS, MESSAGE_TTL, 0) == 0
    await store.set_namespace("public", "default", MESSAGE_TTL, 30)
    assert store.effective(ORDERS, MESSAGE_TTL, 0) == 30
    await store.set_topic(ORDERS, MESSAGE_TTL, 5)
    assert store.effective(ORDERS, MESSAGE_TTL, 0) == 5
    assert store.effective(other, MESSAGE_TTL, 0) == 30
    # false is a setting, not an absence
    await store.set_topic(ORDERS, "deduplicationEnabled", False)
    assert store.effective(ORDERS, "deduplicationEnabled", True) is False
    await store.remove_topic(ORDERS, MESSAGE_TTL)
    assert store.effective(ORDERS, MESSAGE_TTL, 0) == 30
    await store.remove_namespace("public", "default", MESSAGE_TTL)
    assert store.effective(ORDERS, MESSAGE_TTL, 7) == 7


async def test_an_unknown_namespace_is_refused_and_nothing_is_stored() -> None:
    metadata = InMemoryMetadataStore()
    store = await loaded(metadata)
    before = await metadata.keys_with_prefix("")
    with pytest.raises(NotFoundError):
        await store.set_namespace("public", "nowhere", MESSAGE_TTL, 30)
    with pytest.raises(NotFoundError):
        await store.remove_namespace("public", "nowhere", MESSAGE_TTL)
    with pytest.raises(ConflictError):
        await store.create_namespace("public", "default")
    assert await metadata.keys_with_prefix("") == before
    assert not store.namespace_exists("public", "nowhere")


async def test_a_failed_write_changes_neither_memory_nor_watchers() -> None:
    metadata = FailingPuts()
    store = await loaded(metadata)
    heard: list[object] = []
    store.watch(lambda scope, name: heard.append((scope, name)))
    metadata.failing = True
    with pytest.raises(StorageFaultError):
        await store.set_namespace("public", "default", MESSAGE_TTL, 30)
    with pytest.raises(StorageFaultError):
        await store.set_topic(ORDERS, MESSAGE_TTL, 30)
    assert store.namespace("public", "default", MESSAGE_TTL) is None
    assert store.topic(ORDERS, MESSAGE_TTL) is None
    assert heard == []


async def test_watchers_hear_each_change_with_its_scope_until_they_stop() -> None:
    store = await loaded(InMemoryMetadataStore())
    heard: list[object] = []
    stop = store.watch(lambda scope, name: heard.append((scope, name)))
    await store.set_namespace("public", "default", RETENTION, RETAIN_1H)
    await store.set_topic(ORDERS, MESSAGE_TTL, 5)
    await store.remove_topic(ORDERS, MESSAGE_TTL)
    await store.remove_topic(ORDERS, MESSAGE_TTL)  # unset already: no change, no call
    assert heard == [
        (("public", "default"), RETENTION),
        (ORDERS, MESSAGE_TTL),
        (ORDERS, MESSAGE_TTL),
    ]
    stop()
    await store.set_topic(ORDERS, MESSAGE_TTL, 6)
    assert len(heard) == 3


async def test_deleting_a_namespace_or_topic_deletes_their_policies() -> None:
    cache = create_stream(DEFAULT_DESIGN, CacheConfig(max_size_bytes=0), ManualClock())
    metadata = InMemoryMetadataStore()
    service = BrokerService(ServiceConfig(), InMemoryBookie(), metadata, cache, ManualClock())
    registry, store = service.namespaces, service.policies
    await registry.create_namespace("public", "shop")
    carts = TopicName("public", "shop", "carts")
    await store.set_namespace("public", "shop", MESSAGE_TTL, 30)
    await store.set_topic(carts, MESSAGE_TTL, 5)
    assert await registry.namespaces("public") == ["public/default", "public/shop"]

    await service.get_topic(ORDERS, create=True)
    await store.set_topic(ORDERS, RETENTION, RETAIN_1H)
    await service.delete_topic(ORDERS, force=False)
    assert store.topic(ORDERS, RETENTION) is None
    assert await metadata.get(topic_policies_key(ORDERS)) is None

    await registry.delete_namespace("public", "shop", force=False)
    assert store.namespace("public", "shop", MESSAGE_TTL) is None
    assert store.topic(carts, MESSAGE_TTL) is None
    assert await metadata.keys_with_prefix("topic-policies/") == []
    fresh = await loaded(metadata)
    assert not fresh.namespace_exists("public", "shop")
    await service.close()
