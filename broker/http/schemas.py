"""The response bodies of the HTTP contract as pydantic models: one class for every
schema of ``/openapi.json`` that a route answers with, or that such an answer contains,
named as the schema is.

The models describe the answers; they do not build them. Handlers keep returning plain
dicts serialized by orjson, because the hot paths cannot afford instances: a receive
answer of 100 x 1 KiB messages built as models and dumped takes about 7 times as long
as the same dict through orjson (some 475 against 69 us). The models are the contract
the OpenAPI document is generated from, and ``tests/http/test_schemas.py`` holds the
handlers to them: it drives the routes that answer with them on real brokers and
validates each answer strictly, refusing fields a model does not name, so a handler
that adds, drops or retypes a field fails there.

Conventions: a class docstring is its schema's description; integers are ``int64`` and
floats ``double`` (``Int64``, ``Count``, ``Double``); a field that may be absent but is
never null defaults to ``MISSING`` (not required, no default in the schema); a map is a
``dict[str, X]``; counters that may grow new names allow extra integer fields.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import MISSING, BaseModel, ConfigDict, Field, RootModel

from broker.cache.designs import DESIGNS
from broker.http.models import (
    BatchMessageId,
    Double,
    ErrorRate,
    FaultDelay,
    Int64,
    SubscriptionType,
)

# --- scalars -----------------------------------------------------------------------------

#: a counter, size or index: never negative
Count = Annotated[Int64, Field(ge=0)]
#: base64 text of bytes (OpenAPI's ``format: byte``)
Base64Text = Annotated[str, Field(json_schema_extra={"format": "byte"})]

#: A managed-ledger position as internalStats shows it: entry id may be -1.
POSITION_PATTERN = r"^-?[0-9]+:-?[0-9]+$"
#: A namespace's bundle as the cluster lists it: ``{tenant}/{namespace}/0x{lower}_0x{upper}``.
NAMESPACE_BUNDLE_PATTERN = r"^[^/]+/[^/]+/0x[0-9a-f]{8}_0x[0-9a-f]{8}$"
#: A full topic name.
TOPIC_NAME_PATTERN = r"^persistent://[^/]+/[^/]+/[^/]+$"

Position = Annotated[
    str,
    Field(
        pattern=POSITION_PATTERN,
        description="Position `L:E`; entry id -1 means before the ledger's first entry.",
    ),
]
TopicFullName = Annotated[
    str,
    Field(pattern=TOPIC_NAME_PATTERN, description="`persistent://{tenant}/{namespace}/{topic}`."),
]

#: the codes of the error table (broker/http/errors.py: ERRORS and REDIRECT_CODE), sorted
ErrorCode = Literal[
    "conflict",
    "forbidden",
    "internal-error",
    "invalid-request",
    "invalid-schema",
    "method-not-allowed",
    "not-found",
    "not-implemented",
    "not-owner",
    "precondition-failed",
    "request-timeout",
    "too-large",
    "too-many-requests",
    "unauthorized",
    "unavailable",
    "unsupported-media-type",
]


class Error(BaseModel):
    """Body of every non-2xx answer."""

    reason: str = Field(description="A sentence for people.")
    code: ErrorCode = Field(description="Stable id for programs.")


# --- produce and consume -----------------------------------------------------------------


class MessagePublishResult(BaseModel):
    """The fate of one produced message."""

    messageId: BatchMessageId | MISSING = MISSING
    errorCode: Int64 = Field(
        ge=0, le=1, description="0: stored; 1: not stored (storage failure, retry)."
    )
    errorMsg: str | MISSING = Field(
        default=MISSING, description="Why the message was not stored (errorCode 1 only)."
    )


class ProduceResponse(BaseModel):
    """One result per produced message, in request order."""

    messagePublishResults: list[MessagePublishResult]


class ConsumerMessage(BaseModel):
    """A message handed to a consumer; pending (unacked) until acked."""

    messageId: BatchMessageId
    payload: Base64Text = Field(description="Base64 payload.")
    key: str | MISSING = Field(
        default=MISSING, description="Present only when the message has a key."
    )
    properties: dict[str, str] = Field(description="String properties of the message.")
    publishTime: Count = Field(description="Broker time of storing, epoch ms.")
    eventTime: Count = Field(description="Producer's event time, epoch ms; 0 if not set.")
    redeliveryCount: Count = Field(description="Times delivered before.")


class ReceiveResponse(BaseModel):
    """Messages drained from the receiver queue (possibly none)."""

    messages: list[ConsumerMessage]


class ConsumerCreated(BaseModel):
    """The new consumer session."""

    consumerId: str = Field(description="Opaque, unguessable id.")


# --- topic stats -------------------------------------------------------------------------


class ConsumerStats(BaseModel):
    """One consumer."""

    model_config = ConfigDict(extra="forbid")

    consumerName: str = Field(description="Consumer name.")
    availablePermits: Count = Field(description="Free slots in its receiver queue.")
    unackedMessages: Count = Field(description="Messages delivered and not acked.")
    msgRateOut: Double = Field(description="Messages delivered per second.")
    msgThroughputOut: Double = Field(description="Bytes delivered per second.")
    msgOutCounter: Count = Field(description="Messages delivered since it connected.")
    bytesOutCounter: Count = Field(description="Bytes delivered since it connected.")
    address: str = Field(description="The client's address, as Pulsar prints it: `/ip:port`.")
    connectedSince: str = Field(description="When it connected (ISO 8601, UTC).")
    clientVersion: str = Field(description="The client's version (CONNECT's); `\"\"` over HTTP.")
    metadata: dict[str, str] = Field(description="The metadata it subscribed with.")


class PublisherStats(BaseModel):
    """One producer, as Pulsar's PublisherStats."""

    model_config = ConfigDict(extra="forbid")

    accessMode: Literal["Shared", "Exclusive", "ExclusiveWithFencing", "WaitForExclusive"] = Field(
        description="Its access mode."
    )
    msgRateIn: Double = Field(description="Messages it published per second.")
    msgThroughputIn: Double = Field(description="Bytes it published per second.")
    averageMsgSize: Double = Field(description="msgThroughputIn / msgRateIn (0 when idle).")
    chunkedMessageRate: Double = Field(description="Always 0.")
    producerId: Count = Field(description="The producer's id on its connection.")
    supportsPartialProducer: bool = Field(description="Always false.")
    producerName: str = Field(description="The producer's name.")
    address: str = Field(description="The client's address, as Pulsar prints it: `/ip:port`.")
    connectedSince: str = Field(description="When it connected (ISO 8601, UTC).")
    clientVersion: str = Field(
        description="The client's version (CONNECT's); `\"\"` over WebSocket."
    )
    metadata: dict[str, str] = Field(description="The metadata it was created with.")


class SubscriptionStats(BaseModel):
    """One subscription."""

    model_config = ConfigDict(extra="forbid")

    type: Literal[SubscriptionType, "None"] = Field(
        description="Pulsar subscription type: that of its connected consumers, or of its "
        "last ones; None when no consumer has connected since the topic was loaded."
    )
    msgBacklog: Count = Field(description="Messages not yet acknowledged.")
    msgRateOut: Double = Field(description="Messages delivered per second.")
    msgRateRedeliver: Double = Field(description="Messages redelivered per second.")
    msgOutCounter: Count = Field(
        description="Messages delivered since the topic was loaded, by consumers connected or gone."
    )
    bytesOutCounter: Count = Field(
        description="Bytes delivered since the topic was loaded, by consumers connected or gone."
    )
    unackedMessages: Count = Field(description="Messages delivered and not acked.")
    msgDelayed: Count = Field(
        description="Messages held back until their deliver-at time (Shared and Key_Shared)."
    )
    consumers: list[ConsumerStats]


class TopicStats(BaseModel):
    """Topic stats with Pulsar's field names; exactly these fields."""

    model_config = ConfigDict(extra="forbid")

    msgRateIn: Double = Field(description="Messages produced per second.")
    msgThroughputIn: Double = Field(description="Bytes produced per second.")
    msgRateOut: Double = Field(description="Messages delivered per second.")
    msgThroughputOut: Double = Field(description="Bytes delivered per second.")
    msgInCounter: Count = Field(description="Messages produced since start.")
    bytesInCounter: Count = Field(description="Bytes produced since start.")
    msgOutCounter: Count = Field(
        description="Messages delivered since the topic was loaded, to every subscription, "
        "deleted ones included."
    )
    bytesOutCounter: Count = Field(
        description="Bytes delivered since the topic was loaded, to every subscription, "
        "deleted ones included."
    )
    storageSize: Count = Field(description="Bytes stored.")
    backlogSize: Count = Field(description="Bytes not yet acknowledged by every subscription.")
    offloadedStorageSize: Count = Field(description="Bytes in tiered storage.")
    averageMsgSize: Double = Field(description="msgThroughputIn / msgRateIn (0 when idle).")
    publishers: list[PublisherStats] = Field(
        description="Producers of connected clients (binary protocol, WebSocket)."
    )
    waitingPublishers: Count = Field(description="Producers waiting for exclusive access.")
    deduplicationStatus: Literal["Disabled", "Recovering", "Enabled", "Removing", "Failed"] = Field(
        description="Message deduplication on the topic, as Pulsar names its states."
    )
    subscriptions: dict[str, SubscriptionStats] = Field(description="Stats by subscription name.")


# --- managed-ledger internals ------------------------------------------------------------


class LedgerInfo(BaseModel):
    """One ledger of the topic."""

    ledgerId: Count = Field(description="Ledger id.")
    entries: Count = Field(description="Entries in the ledger.")
    size: Count = Field(description="Bytes in the ledger.")
    offloaded: bool = Field(description="Whether it is in tiered storage.")


class CursorStats(BaseModel):
    """One cursor."""

    markDeletePosition: Position
    readPosition: Position
    individuallyDeletedMessages: str = Field(
        description="Acked ranges past the mark-delete position, Pulsar's form: "
        "`[(3:4..3:7], (3:9..3:10]]`."
    )
    messagesConsumedCounter: Int64 = Field(description="Messages acknowledged through this cursor.")


class PersistentTopicInternalStats(BaseModel):
    """Managed-ledger internals."""

    entriesAddedCounter: Count = Field(description="Entries added since the topic was loaded.")
    numberOfEntries: Count = Field(description="Entries stored.")
    totalSize: Count = Field(description="Bytes stored.")
    currentLedgerEntries: Count = Field(description="Entries in the current ledger.")
    currentLedgerSize: Count = Field(description="Bytes in the current ledger.")
    lastConfirmedEntry: Position
    ledgers: list[LedgerInfo]
    cursors: dict[str, CursorStats] = Field(description="Cursors by subscription name.")


class LastMessageId(BaseModel):
    """Last stored message; entry id -1 when the topic has none."""

    ledgerId: Count = Field(description="Ledger id.")
    entryId: Int64 = Field(ge=-1, description="Entry id.")


class TopicLastMessageId(BaseModel):
    """Pulsar's MessageId of the last stored message."""

    ledgerId: Count = Field(description="Ledger id.")
    entryId: Int64 = Field(ge=-1, description="Entry id; -1 when the topic has none.")
    partitionIndex: Int64 = Field(
        ge=-1, description="Index of a partition {topic}-partition-{i}, else -1."
    )
    batchIndex: Int64 = Field(
        ge=-1, description="Index of the last message when the last entry is a batch, else -1."
    )


class OffloadStatus(BaseModel):
    """Pulsar's OffloadProcessStatus."""

    status: Literal["NOT_RUN", "RUNNING", "SUCCESS", "ERROR"] = Field(
        description="State of the last offload."
    )
    lastError: str = Field(description="Empty unless status is ERROR.")
    firstUnoffloadedMessage: LastMessageId


class TopicList(RootModel[list[TopicFullName]]):
    """Full topic names, sorted."""


class NameList(RootModel[list[str]]):
    """Names, sorted."""


# --- partitioned topics and lookup -------------------------------------------------------


class PartitionedTopicMetadata(BaseModel):
    """Pulsar's PartitionedTopicMetadata; partitions 0: not a partitioned topic."""

    partitions: Count = Field(description="Partitions; 0 for a topic.")
    deleted: bool = Field(description="A delete of the partitioned topic is under way.")


class PartitionedStatsMetadata(BaseModel):
    """The partitioned topic."""

    partitions: Int64 = Field(ge=1, description="Partitions.")
    deleted: bool = Field(
        description="Pulsar's flag for a delete under way; false here: a partitioned topic "
        "being deleted answers 404."
    )


class PartitionedTopicStats(TopicStats):
    """The fields of TopicStats added up over the partitions, plus metadata and each
    partition's stats."""

    metadata: PartitionedStatsMetadata
    partitions: dict[str, TopicStats] = Field(
        description="Each partition's stats by full name; {} with perPartition=false."
    )


class LookupData(BaseModel):
    """Pulsar's LookupData: the broker owning the topic's bundle."""

    brokerUrl: str | None = Field(
        description="The owner's pulsar:// URL; null when the binary protocol is off "
        "(brokerServicePort=0)."
    )
    brokerUrlTls: str | None = Field(description="Always null: no TLS.")
    httpUrl: str = Field(
        description="The owner's http:// URL (this broker's: the port of this request)."
    )
    httpUrlTls: str | None = Field(description="Always null: no TLS.")
    nativeUrl: str | None = Field(description="Legacy twin of brokerUrl.")
    brokerUrlSsl: Literal[""] = Field(
        description="Legacy field, always empty; the C++ client needs it."
    )


# --- broker stats ------------------------------------------------------------------------


class CacheEvictions(BaseModel):
    """Entries evicted, by reason."""

    model_config = ConfigDict(extra="allow")
    __pydantic_extra__: dict[str, Int64]

    ttl: Count = Field(description="By age.")
    size: Count = Field(description="By size.")
    invalidated: Count = Field(description="Because no reader needs them.")


class ShadowCacheStats(BaseModel):
    """One shadow cache: what it would have done on the live cache's events."""

    hits: Count = Field(description="Hits.")
    misses: Count = Field(description="Misses.")
    joined: Count = Field(description="Entries it would have waited for from another read.")
    requested: Count = Field(description="Entries asked for by reads.")
    hitBytes: Count = Field(description="Bytes it would have served.")
    missBytes: Count = Field(description="Bytes it would have read from storage.")
    sizeBytes: Count = Field(description="Bytes it would hold now.")
    entries: Count = Field(description="Entries it would hold now.")
    evicted: CacheEvictions


class CacheStats(BaseModel):
    """Broker entry cache counters since start."""

    implementation: str = Field(
        description=f"managedLedgerCacheImplementation ({', '.join(DESIGNS)}; disabled at size 0)."
    )
    maxSizeBytes: Count = Field(description="Configured cache size.")
    sizeBytes: Count = Field(description="Bytes cached now.")
    entries: Count = Field(description="Entries cached now.")
    hits: Count = Field(description="Entries served from the cache.")
    misses: Count = Field(
        description="Entries read from storage for reads, one per entry each storage read "
        "fetches; a reader that waits for a storage read another reader started counts neither."
    )
    hitBytes: Count = Field(description="Bytes served from the cache.")
    missBytes: Count = Field(description="Bytes read from storage.")
    joined: Count = Field(
        description="Entries a reader waited for from a storage read another reader started "
        "(neither hit nor miss, as Pulsar counts them)."
    )
    requested: Count = Field(
        description="Entries asked for by reads: hits, joined, and those read from storage."
    )
    inserted: Count = Field(description="Entries inserted.")
    evicted: CacheEvictions
    evictionRuns: Count = Field(description="Eviction passes.")
    evictionCpuSeconds: Double = Field(
        description="CPU time spent in eviction passes (timer rounds, size passes, ring rotations)."
    )
    entriesWithExpectedReads: Count = Field(
        description="Cached entries a cursor is still expected to read (PIP-430)."
    )
    shadows: dict[str, ShadowCacheStats] = Field(
        description="Shadows by design name: each another design run beside the live one on "
        "the same cache events, sizes only; its hits are what it would have served, its "
        "misses what it would have read from storage."
    )


class BookieStats(BaseModel):
    """Bookie counters."""

    model_config = ConfigDict(extra="allow")
    __pydantic_extra__: dict[str, Int64]

    readRequests: Count = Field(description="Read calls.")
    entriesRead: Count = Field(description="Entries read.")
    bytesRead: Count = Field(description="Bytes read.")
    getFloorCalls: Count = Field(description="Floor seeks on the location index.")
    lastEntryCacheHits: Count = Field(description="Last-entry cache hits.")
    lastEntryCacheMisses: Count = Field(description="Last-entry cache misses.")
    readOnly: Int64 = Field(
        ge=0, le=1, description="1 while the bookie is read-only (its disk full), else 0."
    )
    diskUsage: Double = Field(
        ge=0,
        le=1,
        description="Used fraction of the data directory's file system at the last disk "
        "check; 0 in memory mode.",
    )


class TieredStats(BaseModel):
    """Tiered store counters."""

    model_config = ConfigDict(extra="allow")
    __pydantic_extra__: dict[str, Int64]

    objectGets: Count = Field(description="Object reads.")
    bytesRead: Count = Field(description="Bytes read.")
    indexLoads: Count = Field(description="Range index loads.")
    bloomSkips: Count = Field(description="Objects skipped thanks to a bloom filter.")


class StorageStats(BaseModel):
    """Storage counters since start."""

    bookie: BookieStats
    tiered: TieredStats


class ClusterStats(BaseModel):
    """Every broker's cache counters and the storage's, read together."""

    cache: list[CacheStats] = Field(
        description="Each broker's cache stats, as `GET /admin/v2/broker-stats/cache` at that "
        "broker answers them, in index order."
    )
    storage: StorageStats


class TraceStats(BaseModel):
    """The access trace recorder (brokerlabTraceDir)."""

    enabled: bool = Field(description="Whether a trace is recorded.")
    directory: str | MISSING = Field(default=MISSING, description="Where the Parquet files go.")
    broker: Count | MISSING = Field(
        default=MISSING, description="The recording broker's index, in its files' names."
    )
    events: Count | MISSING = Field(default=MISSING, description="Events recorded.")
    dropped: Count | MISSING = Field(
        default=MISSING, description="Events dropped while the writer was behind."
    )
    files: Count | MISSING = Field(default=MISSING, description="Files written.")
    pendingFiles: Count | MISSING = Field(
        default=MISSING, description="Files waiting for the writer."
    )
    writeErrors: Count | MISSING = Field(default=MISSING, description="Files that failed to write.")


# --- fault injection ---------------------------------------------------------------------


class FaultState(BaseModel):
    """The setting of one operation and what it did."""

    errorRate: ErrorRate
    delayMs: FaultDelay
    injectedErrors: Count = Field(description="Calls made to fail since it was set.")


class FaultSettings(BaseModel):
    """One key per storage operation that has a setting."""

    model_config = ConfigDict(extra="forbid")

    # the bookie's and the metadata store's operations (storage_stub.bookie.api.OPERATIONS)
    createLedger: FaultState | MISSING = MISSING
    addEntries: FaultState | MISSING = MISSING
    readEntries: FaultState | MISSING = MISSING
    getLastEntry: FaultState | MISSING = MISSING
    closeLedger: FaultState | MISSING = MISSING
    deleteLedger: FaultState | MISSING = MISSING
    metadataGet: FaultState | MISSING = MISSING
    metadataPut: FaultState | MISSING = MISSING
    metadataDelete: FaultState | MISSING = MISSING
    # the tiered object store's (storage_stub.tiered.api.OBJECT_OPERATIONS)
    objectGet: FaultState | MISSING = MISSING
    objectPut: FaultState | MISSING = MISSING
    objectDelete: FaultState | MISSING = MISSING


# --- the brokers of the cluster ----------------------------------------------------------


class Broker(BaseModel):
    """A broker of the cluster."""

    index: Count = Field(description="Its index in the cluster.")
    state: Literal["up", "stopping", "down", "restarting"] = Field(
        description="up: serving; stopping: a graceful restart unloading its bundles one by "
        "one (those not yet unloaded still serve their loaded topics); down: "
        "stopped (before its first start too); restarting: down for the restart's downtime, "
        "then starting."
    )
    httpUrl: str = Field(
        description="Its HTTP service, http://{advertisedAddress}:{port}; empty until known."
    )
    serviceUrl: str = Field(
        description="Its binary protocol, pulsar://...; empty when the protocol is off (or "
        "before it first listens)."
    )
    incarnation: Count = Field(description="Starts so far: 1 after the first, + 1 per restart.")
    restarts: Count = Field(description="Restarts so far.")
    bundles: list[
        Annotated[
            str, Field(pattern=NAMESPACE_BUNDLE_PATTERN, description="A bundle of a namespace.")
        ]
    ] = Field(description="The bundles it owns, `{tenant}/{namespace}/0x{lower}_0x{upper}`.")
    topics: Count = Field(description="Topics it has loaded (0 while down).")


class RestartAccepted(BaseModel):
    """The answer (202) to a restart asked of the broker itself."""

    broker: Count = Field(description="Its index.")
    mode: Literal["graceful", "kill"] = Field(description="The kind of restart.")
    state: Literal["restarting"] = Field(description="Always restarting.")


class DashboardBroker(Broker):
    """A broker as GET /admin/v2/brokerlab/brokers lists it, plus its cache."""

    cache: CacheStats | None = Field(description="Its cache stats; null before its first start.")


class DashboardMessages(BaseModel):
    """Messages through this broker since it started (its current incarnation)."""

    produced: Count = Field(description="Messages stored.")
    dispatched: Count = Field(description="Messages delivered to consumers.")
    redelivered: Count = Field(description="Messages delivered again.")


class DashboardTopic(BaseModel):
    """A loaded topic and its backlog."""

    topic: TopicFullName
    backlog: Count = Field(description="Messages not yet acknowledged, over its subscriptions.")
    replay: Count = Field(
        description="Messages waiting in its subscriptions' replay queues (to deliver again)."
    )


class DashboardData(BaseModel):
    """One snapshot of the counters the dashboard charts (timeMs, cache,
    cacheWatermarkBytes, storage, messages, backlog, topTopics; see docs/api.md), this
    broker's index and the cluster's brokers."""

    timeMs: Count = Field(description="When the snapshot was taken, epoch ms.")
    cache: CacheStats
    cacheWatermarkBytes: Count = Field(
        description="The size a size pass evicts the cache down to: maxSizeBytes x "
        "managedLedgerCacheEvictionWatermark."
    )
    storage: StorageStats
    messages: DashboardMessages
    backlog: Count = Field(description="Messages not yet acknowledged, over the loaded topics.")
    topTopics: list[DashboardTopic] = Field(
        description="The ten loaded topics with the largest backlog, largest first."
    )
    broker: Count = Field(description="This broker's index.")
    brokers: list[DashboardBroker] = Field(
        description="Every broker of the cluster, in index order."
    )


class DashboardHistory(BaseModel):
    """This broker's dashboard series over the whole run: rows of numbers, one per
    sample, the columns named once (see docs/api.md)."""

    sampleIntervalMs: Count = Field(
        description="brokerlabDashboardSampleIntervalMs: the period of the samples."
    )
    recentMs: Count = Field(
        description="Every sample of the last this many ms is kept "
        "(brokerlabDashboardHistoryMinutes)."
    )
    olderStepMs: Count = Field(
        description="Samples before that are kept at least this far apart (it doubles as "
        "the run grows)."
    )
    startMs: Int64 | None = Field(
        description="The time of the first sample (the run's start), epoch ms; null before it."
    )
    implementation: str = Field(description="The live cache design (its hits and misses).")
    shadows: list[str] = Field(description="The shadow designs, in column order.")
    columns: list[str] = Field(
        description="The name of each item of a row: timeMs, counters since the start "
        "(produced, dispatched, hits, ...), gauges (sizeBytes, maxSizeBytes, "
        "watermarkBytes), then shadow.{name}.hits and shadow.{name}.misses per shadow."
    )
    rows: list[list[Int64]] = Field(
        description="The samples in time order (after sinceMs when given), each as its columns say."
    )


# --- schemas -----------------------------------------------------------------------------


class GetSchemaResponse(BaseModel):
    """Pulsar's GetSchemaResponse: one version of a topic's schema."""

    version: Int64 = Field(ge=0, description="The version, from 0.")
    type: str = Field(description="Pulsar's SchemaType name: AVRO, JSON, STRING, KEY_VALUE...")
    timestamp: Int64 = Field(description="When it was stored, epoch milliseconds.")
    data: str = Field(
        description="The definition as text (an Avro schema in JSON for AVRO and JSON; "
        '`{"key": ..., "value": ...}` for KEY_VALUE; empty for STRING and primitives).'
    )
    properties: dict[str, str] = Field(description="The schema's properties.")


class GetAllVersionsSchemaResponse(BaseModel):
    """Pulsar's GetAllVersionsSchemaResponse."""

    getSchemaResponses: list[GetSchemaResponse] = Field(
        description="Every version since the last delete, oldest first."
    )


class LongSchemaVersion(BaseModel):
    """Pulsar's LongSchemaVersion."""

    version: Int64 = Field(description="The version; -1: none.")


class PostSchemaResponse(BaseModel):
    """Pulsar's PostSchemaResponse."""

    version: LongSchemaVersion = Field(description="The version the schema has.")


class IsCompatibilityResponse(BaseModel):
    """Pulsar's IsCompatibilityResponse."""

    isCompatibility: bool = Field(description="Whether the schema would be accepted.")
    schemaCompatibilityStrategy: str = Field(description="The strategy it was checked with.")


#: Every answer type: each is a component of the OpenAPI document, named as its class.
ANSWERS: tuple[type[BaseModel], ...] = tuple(
    kind
    for kind in list(globals().values())
    if isinstance(kind, type) and issubclass(kind, BaseModel) and kind.__module__ == __name__
)
