"""Partitioned topics: a name with a partition count, whose partitions are the topics
``{name}-partition-{i}`` (``i`` in ``0..count-1``), as in Pulsar.

A count is a record in the metadata store, ``partitioned/persistent://t/ns/topic`` ->
``{"partitions": N, "deleted": false}``, mirrored in memory: this broker is the store's
only writer, so the mirror, read once on first use, stays exact.

The partitions of a partitioned topic exist from the moment it does: a partition is
created on its first use, even with ``allowAutoTopicCreation=false``, and topic lists
name every one. Pulsar creates them all with the partitioned topic; creating them
lazily keeps a 100-partition topic from being 100 loaded ledgers before it is used,
and no client can tell the difference.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import orjson

from broker.dispatch.errors import (
    ConflictError,
    InvalidRequestError,
    NotAllowedLimitError,
    NotFoundError,
    PreconditionFailedError,
)
from broker.dispatch.names import TopicName
from broker.dispatch.schema_registry import drop_schemas
from broker.ledger.metadata_keys import metadata_key
from broker.tasks import FifoLock, cooperative
from storage_stub.bookie.api import MetadataStore

if TYPE_CHECKING:
    from broker.dispatch.topic import PersistentTopic

log = logging.getLogger(__name__)

#: metadata key prefix of partitioned-topic records (managed ledgers use ``ml/``)
PARTITIONED_PREFIX = "partitioned/"
#: what joins a partitioned topic's name and a partition index
PARTITION_SUFFIX = "-partition-"
#: allowAutoTopicCreationType values
AUTO_CREATION_TYPES = ("non-partitioned", "partitioned")

# Pulsar takes the index after the last "-partition-"; a canonical decimal int32 here
_PARTITION = re.compile(r"(.+)-partition-(0|[1-9][0-9]{0,8})")


def partition_of(name: TopicName) -> tuple[TopicName, int] | None:
    """``(partitioned topic, index)`` if ``name`` is spelt as a partition, else None.
    Whether that partitioned topic exists is another question."""
    match = _PARTITION.fullmatch(name.local_name)
    if match is None:
        return None
    return name._replace(local_name=match[1]), int(match[2])


def partition_name(name: TopicName, index: int) -> TopicName:
    """Partition ``index`` of ``name``; InvalidRequestError if that name is too long."""
    return TopicName.of(name.tenant, name.namespace, f"{name.local_name}{PARTITION_SUFFIX}{index}")


def _partition_names(name: TopicName, count: int) -> Iterator[TopicName]:
    """The partitions of ``name`` in order, made one at a time."""
    return (partition_name(name, index) for index in range(count))


@dataclass(frozen=True, slots=True)
class PartitionsConfig:
    #: allowAutoTopicCreationType: what a client's partitioned-metadata request for a
    #: missing topic creates when auto-creation is on
    auto_topic_creation_type: str = "non-partitioned"
    #: defaultNumPartitions: partitions of an auto-created partitioned topic
    default_num_partitions: int = 1
    #: maxNumPartitionsPerPartitionedTopic; 0: no limit
    max_num_partitions: int = 0
    #: brokerlabMaxPartitionsCeiling: the limit when max_num_partitions is 0
    partitions_ceiling: int = 10_000
    #: maxTopicsPerNamespace: topics of a namespace, each partition of a partitioned
    #: topic one of them; 0: no limit
    max_topics_per_namespace: int = 0


@dataclass(frozen=True, slots=True)
class PartitionedMetadata:
    """Pulsar's PartitionedTopicMetadata: the count, and whether a delete is under way
    (its partitions are being deleted; none may be created meanwhile)."""

    partitions: int
    deleted: bool = False

    def to_json(self) -> dict[str, object]:
        return {"partitions": self.partitions, "deleted": self.deleted}


class TopicOwner(Protocol):
    """What partitioned topics need of the broker service: the partitions' topics."""

    @property
    def topics(self) -> dict[TopicName, PersistentTopic]: ...

    async def get_topic(self, name: TopicName, create: bool) -> PersistentTopic: ...

    async def delete_topic(self, name: TopicName, force: bool) -> None: ...


class PartitionedTopics:
    """The partitioned topics of this broker, and the rules that tie them to topics:
    which loads may create a topic, and what a client asking for a topic's partitions
    is told."""

    def __init__(
        self,
        metadata: MetadataStore,
        config: PartitionsConfig,
        owner: TopicOwner,
        allow_auto_topic_creation: bool = True,
    ) -> None:
        if config.auto_topic_creation_type not in AUTO_CREATION_TYPES:
            raise ValueError(f"auto_topic_creation_type must be one of {AUTO_CREATION_TYPES}")
        self._metadata = metadata
        self.config = config
        self._owner = owner
        self.allow_auto_topic_creation = allow_auto_topic_creation
        self._mirror: dict[TopicName, PartitionedMetadata] | None = None
        self._mirror_lock = asyncio.Lock()
        #: creations, updates and deletes, one at a time
        self._admin_lock = FifoLock()

    # ------------------------------------------------------------------ reading

    async def _records(self) -> dict[TopicName, PartitionedMetadata]:
        """The mirror; the first call reads every record (O(partitioned topics) reads),
        later ones are O(1). A failed first read leaves nothing half-read behind."""
        records = self._mirror
        if records is None:
            async with self._mirror_lock:
                if self._mirror is None:
                    self._mirror = await self._read_all()
                records = self._mirror
        return records

    async def _read_all(self) -> dict[TopicName, PartitionedMetadata]:
        records: dict[TopicName, PartitionedMetadata] = {}
        for key in await self._metadata.keys_with_prefix(PARTITIONED_PREFIX):
            raw = await self._metadata.get(key)
            if raw is None:
                continue  # deleted since it was listed
            try:
                name = TopicName.parse(key[len(PARTITIONED_PREFIX) :])
                value = orjson.loads(raw)
                records[name] = PartitionedMetadata(
                    int(value["partitions"]), bool(value["deleted"])
                )
            except (ValueError, KeyError, TypeError, InvalidRequestError) as error:
                log.warning("ignoring unreadable partitioned-topic record %r: %s", key, error)
        return records

    async def get(self, name: TopicName) -> int:
        """Partitions of ``name``; 0 when it is not a partitioned topic. O(1) (after the
        first call)."""
        record = (await self._records()).get(name)
        return record.partitions if record is not None else 0

    async def metadata(self, name: TopicName) -> PartitionedMetadata | None:
        """The record of ``name``, None when it is not a partitioned topic. O(1)."""
        return (await self._records()).get(name)

    async def names(self, tenant: str, namespace: str) -> list[TopicName]:
        """The partitioned topics of a namespace, sorted. O(partitioned topics)."""
        records = await self._records()
        return sorted(n for n in records if n.tenant == tenant and n.namespace == namespace)

    async def partition_names(self, tenant: str, namespace: str) -> list[str]:
        """Every partition of every partitioned topic of a namespace, created or not, as
        full names. O(partitioned topics + their partitions)."""
        records = await self._records()
        return [
            f"{name}{PARTITION_SUFFIX}{index}"
            for name, record in records.items()
            if name.tenant == tenant and name.namespace == namespace
            for index in range(record.partitions)
        ]

    async def namespace_topics(self, tenant: str, namespace: str) -> list[str]:
        """Every topic of a namespace as a full name, sorted: the stored ones and, as
        Pulsar lists them, every partition of its partitioned topics, used yet or not.
        O(topics of the namespace)."""
        keys = await self._metadata.keys_with_prefix(
            metadata_key(f"persistent://{tenant}/{namespace}/")
        )
        stored = [key[len(metadata_key("")) :] for key in keys]
        partitions = await self.partition_names(tenant, namespace)
        return sorted({*stored, *partitions}) if partitions else stored

    async def check_new_topic(self, name: TopicName) -> None:
        """maxTopicsPerNamespace, before ``name`` is created as a topic:
        NotAllowedLimitError if the namespace has no room for it. A partition of a
        partitioned topic was counted when that was created (Pulsar creates them all
        then; here they are created on first use). O(topics of the namespace) when the
        limit is set, else O(1)."""
        if not self.config.max_topics_per_namespace:
            return
        partition = partition_of(name)
        if partition is not None:
            parent, index = partition
            record = (await self._records()).get(parent)
            if record is not None and not record.deleted and index < record.partitions:
                return
        await self._check_room(name, 1)

    async def _check_room(self, name: TopicName, new_topics: int) -> None:
        """NotAllowedLimitError if ``new_topics`` more topics would take the namespace
        of ``name`` over maxTopicsPerNamespace (Pulsar: topics + new > limit)."""
        limit = self.config.max_topics_per_namespace
        if not limit:
            return
        count = len(await self.namespace_topics(name.tenant, name.namespace))
        if count + new_topics > limit:
            what = f"{name} with {new_topics} partitions" if new_topics > 1 else str(name)
            raise NotAllowedLimitError(
                f"namespace {name.tenant}/{name.namespace} has {count} topics and "
                f"maxTopicsPerNamespace={limit} (partitions counted); cannot create {what}"
            )

    async def exists(self, name: TopicName) -> bool:
        """Whether ``name`` is a topic: loaded, stored, or a partition of a partitioned
        topic (partitions exist from its creation on). A partitioned topic's own name is
        not a topic (see :meth:`get`). At most one metadata read."""
        if name in self._owner.topics:
            return True
        partition = partition_of(name)
        if partition is not None:
            parent, index = partition
            record = (await self._records()).get(parent)
            if record is not None and not record.deleted and index < record.partitions:
                return True
        return await self._metadata.get(metadata_key(str(name))) is not None

    async def may_create(self, name: TopicName, create: bool) -> bool:
        """Whether a load of ``name`` that finds no stored topic may create it.
        ``create``: the caller would create a missing topic (produce, consumer,
        subscription), which allowAutoTopicCreation allows or not.

        A partition of a partitioned topic may always be created; one past its count, or
        of a partitioned topic being deleted, never (ConflictError). The name of a
        partitioned topic is never a topic: ConflictError when ``create``, NotFoundError
        otherwise, naming its partitions. O(1) (after the first call)."""
        records = await self._records()
        if records:
            record = records.get(name)
            if record is not None:
                partitions = f"{name}{PARTITION_SUFFIX}0..{record.partitions - 1}"
                if create:
                    raise ConflictError(
                        f"{name} is a partitioned topic with {record.partitions} partitions: "
                        f"it cannot also be a non-partitioned topic; use its partitions "
                        f"{partitions}"
                    )
                raise NotFoundError(
                    f"{name} is a partitioned topic, not a topic; its partitions are {partitions}"
                )
            partition = partition_of(name)
            if partition is not None:
                parent, index = partition
                record = records.get(parent)
                if record is not None:
                    if record.deleted:
                        if create:
                            raise ConflictError(f"partitioned topic {parent} is being deleted")
                        return False
                    if index >= record.partitions:
                        if create:
                            raise ConflictError(
                                f"illegal partition {name}: {parent} has "
                                f"{record.partitions} partitions"
                            )
                        return False
                    return True
        return create and self.allow_auto_topic_creation

    async def metadata_for_client(self, name: TopicName, auto_create: bool) -> int:
        """What Pulsar's PARTITIONED_METADATA command and ``GET .../partitions`` answer:
        the count of a partitioned topic; 0 for a topic. For a name that is neither:
        with ``auto_create`` (the client's checkAllowAutoCreation) and auto-creation on,
        0 (the client will create a non-partitioned topic), or, with
        allowAutoTopicCreationType=partitioned, a new partitioned topic's count
        (defaultNumPartitions, capped at maxNumPartitionsPerPartitionedTopic;
        NotAllowedLimitError if they would take the namespace over
        maxTopicsPerNamespace); otherwise NotFoundError."""
        record = (await self._records()).get(name)
        if record is not None:
            return record.partitions
        if await self.exists(name):
            return 0
        if not (auto_create and self.allow_auto_topic_creation):
            raise NotFoundError(f"topic {name} not found")
        if self.config.auto_topic_creation_type != "partitioned" or partition_of(name):
            return 0  # Pulsar never auto-creates a partitioned topic named like a partition
        async with self._admin_lock:
            record = (await self._records()).get(name)
            if record is not None:
                return record.partitions  # created meanwhile
            if await self.exists(name):
                return 0  # a produce created it meanwhile
            count = self.config.default_num_partitions
            if self.config.max_num_partitions:
                count = min(count, self.config.max_num_partitions)
            self._check_count(name, count)
            await self._check_room(name, count)
            await self._write(name, PartitionedMetadata(count))
            log.info("auto-created partitioned topic %s with %d partitions", name, count)
            return count

    async def partition_topics(self, name: TopicName) -> list[PersistentTopic]:
        """The topic of each partition, in order, loaded (created if never used).
        NotFoundError: not a partitioned topic, or one being deleted."""
        record = (await self._records()).get(name)
        if record is None or record.deleted:
            raise NotFoundError(f"partitioned topic {name} not found")
        return [
            await self._owner.get_topic(partition_name(name, index), create=True)
            async for index in cooperative(range(record.partitions))
        ]

    # ------------------------------------------------------------------ changes

    async def create_subscription(self, name: TopicName, subscription: str, start: str) -> None:
        """Create ``subscription`` on every partition (``start``: earliest or latest), as
        Pulsar does for a partitioned topic. ConflictError, creating none, if a partition
        has it already."""
        topics = await self.partition_topics(name)
        taken = [str(topic.name) for topic in topics if subscription in topic.subscriptions]
        if taken:
            raise ConflictError(f"subscription {subscription} already exists on {taken}")
        for topic in topics:
            await topic.create_subscription(subscription, start)

    def _check_count(self, name: TopicName, partitions: int) -> int:
        if partitions <= 0:
            raise InvalidRequestError(
                f"the number of partitions must be positive, got {partitions}"
            )
        limit = self.config.max_num_partitions
        if limit and partitions > limit:
            raise InvalidRequestError(
                f"{partitions} partitions is over maxNumPartitionsPerPartitionedTopic ({limit})"
            )
        ceiling = self.config.partitions_ceiling
        if not limit and partitions > ceiling:
            raise InvalidRequestError(
                f"{partitions} partitions is over brokerlabMaxPartitionsCeiling ({ceiling}), "
                "the limit while maxNumPartitionsPerPartitionedTopic is 0"
            )
        try:
            partition_name(name, partitions - 1)
        except InvalidRequestError:
            raise InvalidRequestError(
                f"the partition names of {name} would be over 128 characters"
            ) from None
        return partitions

    async def _write(self, name: TopicName, record: PartitionedMetadata) -> None:
        """Store the record durably, then mirror it; nothing changes if the store fails."""
        records = await self._records()
        await self._metadata.put(PARTITIONED_PREFIX + str(name), orjson.dumps(record.to_json()))
        records[name] = record

    async def create(self, name: TopicName, partitions: int) -> None:
        """Create a partitioned topic. InvalidRequestError: a count that is not positive
        or over the limit, or a name spelt as a partition. ConflictError: the name is a
        partitioned topic or a topic already. NotAllowedLimitError: its partitions
        would take the namespace over maxTopicsPerNamespace, as Pulsar counts them. One
        metadata read and one write, and a listing of the namespace when that limit is
        set."""
        if partition_of(name) is not None:
            raise InvalidRequestError(
                f"{name}: a partitioned topic's name may not end in '-partition-<n>'"
            )
        self._check_count(name, partitions)
        async with self._admin_lock:
            record = (await self._records()).get(name)
            if record is not None:
                state = "being deleted" if record.deleted else "already exists"
                raise ConflictError(f"partitioned topic {name} {state}")
            if await self.exists(name):
                raise ConflictError(f"{name} already exists as a non-partitioned topic")
            await self._check_room(name, partitions)
            await self._write(name, PartitionedMetadata(partitions))

    async def update(self, name: TopicName, partitions: int) -> None:
        """Raise the count (a count can only grow, as in Pulsar; the same count changes
        nothing). The new partitions get the subscriptions of partition 0, from their
        start, as Pulsar copies them. ConflictError: not a partitioned topic, or fewer
        partitions than now."""
        self._check_count(name, partitions)
        async with self._admin_lock:
            record = (await self._records()).get(name)
            if record is None or record.deleted:
                raise ConflictError(f"{name} is not a partitioned topic")
            if partitions < record.partitions:
                raise ConflictError(
                    f"{name} has {record.partitions} partitions; a partitioned topic's "
                    f"partitions can be raised, not lowered (asked for {partitions})"
                )
            if partitions == record.partitions:
                return
            await self._write(name, PartitionedMetadata(partitions))
            first = await self._owner.get_topic(partition_name(name, 0), create=True)
            subscriptions = list(first.subscriptions)
            if not subscriptions:
                return
            async for index in cooperative(range(record.partitions, partitions)):
                topic = await self._owner.get_topic(partition_name(name, index), create=True)
                for subscription in subscriptions:
                    await topic.get_or_create_subscription(subscription, "earliest")

    async def delete(self, name: TopicName, force: bool = False) -> None:
        """Delete a partitioned topic and its partitions' topics. Without ``force``,
        PreconditionFailedError while a partition has connected consumers; with it,
        they are closed. The record is marked deleted first, so no partition is created
        meanwhile and a delete that failed half-way (a storage fault) is finished by its
        retry. NotFoundError: not a partitioned topic."""
        async with self._admin_lock:
            record = (await self._records()).get(name)
            if record is None:
                raise NotFoundError(f"partitioned topic {name} not found")
            count = record.partitions
            if not force:
                async for partition in cooperative(_partition_names(name, count)):
                    topic = self._owner.topics.get(partition)
                    if topic is not None and any(s.consumers for s in topic.subscriptions.values()):
                        raise PreconditionFailedError(
                            f"partition {partition} has connected consumers; use force=true"
                        )
            if not record.deleted:
                await self._write(name, PartitionedMetadata(record.partitions, deleted=True))
            async for partition in cooperative(_partition_names(name, count)):
                if not await self.exists(partition):
                    continue
                with contextlib.suppress(NotFoundError):  # deleted meanwhile
                    await self._owner.delete_topic(partition, force)
            await self._metadata.delete(PARTITIONED_PREFIX + str(name))
            (await self._records()).pop(name, None)
            await drop_schemas(self._metadata, name)  # its partitions' schema, as Pulsar
