"""Partitioned topics in the broker service: counts that survive a restart, partitions
that exist with their partitioned topic, what a Pulsar client asking for partitions is
told, and the names a partitioned topic takes from non-partitioned ones."""

from __future__ import annotations

import pytest

from broker.cache import DEFAULT_DESIGN, CacheConfig, create_stream
from broker.clock import ManualClock
from broker.dispatch.consumer import Consumer
from broker.dispatch.errors import (
    ConflictError,
    InvalidRequestError,
    NotFoundError,
    PreconditionFailedError,
)
from broker.dispatch.names import TopicName
from broker.dispatch.partitions import (
    PartitionedMetadata,
    PartitionsConfig,
    partition_name,
    partition_of,
)
from broker.dispatch.service import BrokerService, ConsumerOptions, ServiceConfig
from broker.ledger.entry import encode_message
from broker.ledger.managed_ledger import metadata_key
from storage_stub.bookie.api import StorageFaultError
from storage_stub.bookie.memory import InMemoryBookie, InMemoryMetadataStore

ORDERS = TopicName("t", "ns", "orders")


class FlakyMetadataStore(InMemoryMetadataStore):
    """Fails the next puts or deletes whose key starts with ``fail_prefix``."""

    def __init__(self) -> None:
        super().__init__()
        self.fail_prefix: str | None = None

    def _maybe_fail(self, op: str, key: str) -> None:
        if self.fail_prefix is not None and key.startswith(self.fail_prefix):
            raise StorageFaultError(op)

    async def put(self, key: str, value: bytes) -> None:
        self._maybe_fail("metadataPut", key)
        await super().put(key, value)

    async def delete(self, key: str) -> None:
        self._maybe_fail("metadataDelete", key)
        await super().delete(key)


def make_service(
    metadata: InMemoryMetadataStore | None = None,
    bookie: InMemoryBookie | None = None,
    *,
    allow_auto_topic_creation: bool = True,
    auto_type: str = "non-partitioned",
    default_partitions: int = 1,
    max_partitions: int = 0,
) -> BrokerService:
    config = ServiceConfig(
        allow_auto_topic_creation=allow_auto_topic_creation,
        partitions=PartitionsConfig(auto_type, default_partitions, max_partitions),
    )
    cache = create_stream(DEFAULT_DESIGN, CacheConfig(max_size_bytes=0), ManualClock())
    return BrokerService(
        config,
        bookie or InMemoryBookie(),
        metadata if metadata is not None else InMemoryMetadataStore(),
        cache,
        ManualClock(),
    )


async def stored(service: BrokerService, name: TopicName) -> bool:
    return await service.metadata.get(metadata_key(str(name))) is not None


def test_partition_names_are_recognised_as_pulsar_spells_them() -> None:
    assert partition_of(TopicName("t", "ns", "orders-partition-3")) == (ORDERS, 3)
    nested = TopicName("t", "ns", "a-partition-1-partition-2")
    assert partition_of(nested) == (TopicName("t", "ns", "a-partition-1"), 2)
    for local in ("orders", "orders-partition-", "orders-partition-03", "orders-partition-x"):
        assert partition_of(TopicName("t", "ns", local)) is None
    assert str(partition_name(ORDERS, 7)) == "persistent://t/ns/orders-partition-7"


async def test_a_partitioned_topic_survives_a_restart_and_lists_every_partition() -> None:
    metadata = InMemoryMetadataStore()
    service = make_service(metadata)
    await service.partitions.create(ORDERS, 3)
    assert await service.partitions.get(ORDERS) == 3
    assert await service.partitions.get(TopicName("t", "ns", "other")) == 0

    restarted = make_service(metadata)
    assert await restarted.partitions.get(ORDERS) == 3
    assert await restarted.list_topics("t", "ns") == [
        f"persistent://t/ns/orders-partition-{i}" for i in range(3)
    ]
    assert [str(n) for n in await restarted.partitions.names("t", "ns")] == [str(ORDERS)]


async def test_partitions_exist_with_their_topic_even_when_auto_creation_is_off() -> None:
    service = make_service(allow_auto_topic_creation=False)
    await service.partitions.create(ORDERS, 2)
    topic = await service.get_topic(partition_name(ORDERS, 1), create=True)
    await topic.publish([encode_message(b"m", 0)])
    assert await stored(service, partition_name(ORDERS, 1))
    # a partition is a topic for admin reads too (Pulsar creates them all up front)
    assert await service.get_topic(partition_name(ORDERS, 0), create=False)
    # other topics still obey allowAutoTopicCreation=false
    with pytest.raises(NotFoundError):
        await service.get_topic(TopicName("t", "ns", "plain"), create=True)


async def test_a_partition_past_the_count_is_refused() -> None:
    service = make_service()
    await service.partitions.create(ORDERS, 2)
    with pytest.raises(ConflictError, match="illegal partition"):
        await service.get_topic(partition_name(ORDERS, 2), create=True)
    assert not await stored(service, partition_name(ORDERS, 2))


async def test_a_produce_or_consumer_cannot_make_the_partitioned_name_a_topic() -> None:
    service = make_service()
    await service.partitions.create(ORDERS, 2)
    with pytest.raises(ConflictError, match="partitioned topic with 2 partitions"):
        await service.get_topic(ORDERS, create=True)
    with pytest.raises(ConflictError):
        await service.create_consumer(ORDERS, "sub", ConsumerOptions())
    with pytest.raises(NotFoundError, match="partitions are"):
        await service.get_topic(ORDERS, create=False)
    assert not await stored(service, ORDERS)
    assert not service.consumers


async def test_creating_a_partitioned_topic_checks_its_name_and_count() -> None:
    service = make_service(max_partitions=4)
    plain = TopicName("t", "ns", "plain")
    await service.get_topic(plain, create=True)
    with pytest.raises(ConflictError, match="non-partitioned"):
        await service.partitions.create(plain, 2)
    await service.partitions.create(ORDERS, 2)
    with pytest.raises(ConflictError, match="already exists"):
        await service.partitions.create(ORDERS, 3)
    for bad in (0, -1, 5):
        with pytest.raises(InvalidRequestError):
            await service.partitions.create(TopicName("t", "ns", "new"), bad)
    with pytest.raises(InvalidRequestError, match="-partition-"):
        await service.partitions.create(TopicName("t", "ns", "x-partition-1"), 2)
    with pytest.raises(InvalidRequestError, match="128"):
        await service.partitions.create(TopicName("t", "ns", "n" * 125), 2)
    assert await service.partitions.get(ORDERS) == 2
    assert await service.partitions.get(plain) == 0
    assert await service.partitions.get(TopicName("t", "ns", "new")) == 0


async def test_partitions_only_grow_and_new_ones_get_partition_zeros_subscriptions() -> None:
    service = make_service()
    await service.partitions.create(ORDERS, 2)
    await service.partitions.create_subscription(ORDERS, "billing", "latest")
    await service.partitions.update(ORDERS, 2)  # the same count changes nothing
    await service.partitions.update(ORDERS, 4)
    assert await service.partitions.get(ORDERS) == 4
    for index in range(4):
        topic = await service.get_topic(partition_name(ORDERS, index), create=False)
        assert list(topic.subscriptions) == ["billing"], index
    with pytest.raises(ConflictError, match="raised, not lowered"):
        await service.partitions.update(ORDERS, 3)
    with pytest.raises(ConflictError, match="not a partitioned topic"):
        await service.partitions.update(TopicName("t", "ns", "plain"), 3)
    assert await service.partitions.get(ORDERS) == 4


async def test_a_subscription_on_a_partitioned_topic_is_on_every_partition_or_none() -> None:
    service = make_service()
    await service.partitions.create(ORDERS, 3)
    partition_one = await service.get_topic(partition_name(ORDERS, 1), create=True)
    await partition_one.create_subscription("s", "earliest")
    with pytest.raises(ConflictError):
        await service.partitions.create_subscription(ORDERS, "s", "latest")
    partition_zero = await service.get_topic(partition_name(ORDERS, 0), create=True)
    assert "s" not in partition_zero.subscriptions


async def test_deleting_a_partitioned_topic_deletes_its_partitions() -> None:
    service = make_service()
    await service.partitions.create(ORDERS, 3)
    for index in (0, 2):  # partition 1 never used
        topic = await service.get_topic(partition_name(ORDERS, index), create=True)
        await topic.publish([encode_message(b"m", 0)])
    await service.partitions.delete(ORDERS)
    assert await service.partitions.get(ORDERS) == 0
    for index in range(3):
        assert not await stored(service, partition_name(ORDERS, index))
    assert await service.list_topics("t", "ns") == []
    with pytest.raises(NotFoundError):
        await service.partitions.delete(ORDERS)
    # the name is free again, for either kind of topic
    await service.get_topic(ORDERS, create=True)


async def test_a_partitioned_topic_with_consumers_is_deleted_only_with_force() -> None:
    service = make_service()
    await service.partitions.create(ORDERS, 2)
    first = await service.get_topic(partition_name(ORDERS, 0), create=True)
    await first.publish([encode_message(b"m", 0)])
    consumer = await service.create_consumer(partition_name(ORDERS, 1), "s", ConsumerOptions())
    with pytest.raises(PreconditionFailedError, match="connected consumers"):
        await service.partitions.delete(ORDERS)
    # refused before anything changed: no partition deleted, none blocked
    assert await service.partitions.metadata(ORDERS) == PartitionedMetadata(2)
    assert await stored(service, partition_name(ORDERS, 0))
    assert await stored(service, partition_name(ORDERS, 1))
    assert not consumer.closed
    await service.partitions.delete(ORDERS, force=True)
    assert isinstance(consumer, Consumer) and consumer.closed
    assert not await stored(service, partition_name(ORDERS, 1))


async def test_a_failed_create_changes_nothing_and_its_retry_works() -> None:
    metadata = FlakyMetadataStore()
    service = make_service(metadata)
    metadata.fail_prefix = "partitioned/"
    with pytest.raises(StorageFaultError):
        await service.partitions.create(ORDERS, 2)
    assert await service.partitions.get(ORDERS) == 0
    assert await make_service(metadata).partitions.get(ORDERS) == 0
    metadata.fail_prefix = None
    await service.partitions.create(ORDERS, 2)
    assert await make_service(metadata).partitions.get(ORDERS) == 2


async def test_a_delete_that_failed_half_way_blocks_partitions_until_its_retry() -> None:
    metadata = FlakyMetadataStore()
    bookie = InMemoryBookie()
    service = make_service(metadata, bookie)
    await service.partitions.create(ORDERS, 2)
    topic = await service.get_topic(partition_name(ORDERS, 0), create=True)
    await topic.publish([encode_message(b"m", 0)])
    metadata.fail_prefix = metadata_key("")  # the partition's topic cannot be deleted
    with pytest.raises(StorageFaultError):
        await service.partitions.delete(ORDERS)
    metadata.fail_prefix = None
    # marked deleted, durably: no partition may be created meanwhile, even after a restart
    for broker in (service, make_service(metadata, bookie)):
        record = await broker.partitions.metadata(ORDERS)
        assert record is not None and record.deleted
        with pytest.raises(ConflictError, match="being deleted"):
            await broker.get_topic(partition_name(ORDERS, 1), create=True)
    await service.partitions.delete(ORDERS)
    assert await service.partitions.metadata(ORDERS) is None
    assert await service.list_topics("t", "ns") == []


@pytest.mark.parametrize(
    ("auto_create", "allowed", "auto_type", "expected"),
    [
        (True, True, "non-partitioned", 0),
        (True, True, "partitioned", 3),
        (True, False, "partitioned", NotFoundError),
        (False, True, "partitioned", NotFoundError),
    ],
)
async def test_what_a_client_asking_for_a_missing_topics_partitions_is_told(
    auto_create: bool, allowed: bool, auto_type: str, expected: int | type[Exception]
) -> None:
    service = make_service(
        allow_auto_topic_creation=allowed, auto_type=auto_type, default_partitions=3
    )
    if isinstance(expected, int):
        assert await service.partitions.metadata_for_client(ORDERS, auto_create) == expected
        assert await service.partitions.get(ORDERS) == expected  # created (or not)
    else:
        with pytest.raises(expected):
            await service.partitions.metadata_for_client(ORDERS, auto_create)
        assert await service.partitions.get(ORDERS) == 0


async def test_a_client_is_told_existing_topics_and_partitions_as_they_are() -> None:
    service = make_service(auto_type="partitioned", default_partitions=8, max_partitions=5)
    await service.get_topic(TopicName("t", "ns", "plain"), create=True)
    await service.partitions.create(ORDERS, 2)
    partitions = service.partitions
    assert await partitions.metadata_for_client(TopicName("t", "ns", "plain"), True) == 0
    assert await partitions.metadata_for_client(ORDERS, False) == 2
    assert await partitions.metadata_for_client(partition_name(ORDERS, 1), False) == 0
    # never a partitioned topic named like a partition; the default count is capped
    assert await partitions.metadata_for_client(TopicName("t", "ns", "y-partition-0"), True) == 0
    assert await partitions.metadata_for_client(TopicName("t", "ns", "new"), True) == 5
