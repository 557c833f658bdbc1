"""The broker service's settings (from broker.conf), the options a consumer is made
with, and the load a topic reports."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from broker.dispatch.deduplication import DeduplicationConfig
from broker.dispatch.dispatcher import DispatchConfig
from broker.dispatch.partitions import PartitionsConfig
from broker.ledger.managed_ledger import ManagedLedgerConfig

if TYPE_CHECKING:
    from broker.dispatch.schema_registry import SchemaData

#: brokerDeleteInactiveTopicsMode values, as Pulsar spells them
INACTIVE_TOPIC_MODES = ("delete_when_no_subscriptions", "delete_when_subscriptions_caught_up")


@dataclass(frozen=True, slots=True)
class ServiceConfig:
    allow_auto_topic_creation: bool = True
    consumer_idle_timeout_ms: int = 30000
    stats_update_frequency_s: float = 60
    maintenance_interval_s: float = 0.5
    cache_eviction_interval_ms: int = 10
    #: managedLedgerOffloadThresholdInBytes: offload closed ledgers of a topic holding
    #: more than this in the bookie; -1: never automatically
    offload_threshold_bytes: int = -1
    #: managedLedgerOffloadDeletionLagMs: bookie copies of offloaded ledgers go after this
    offload_deletion_lag_ms: int = 14_400_000
    ledger: ManagedLedgerConfig = field(default_factory=ManagedLedgerConfig)
    dispatch: DispatchConfig = field(default_factory=DispatchConfig)
    partitions: PartitionsConfig = field(default_factory=PartitionsConfig)
    #: brokerDeduplication*: message deduplication
    deduplication: DeduplicationConfig = field(default_factory=DeduplicationConfig)
    #: clusterName: the one cluster of the tenants registry
    cluster_name: str = "standalone"
    #: brokerDeleteInactiveTopicsEnabled: delete topics inactive per ``inactive_topics_mode``
    delete_inactive_topics: bool = True
    #: brokerDeleteInactiveTopicsFrequencySeconds: period of the inactive-topic check
    inactive_topics_frequency_s: float = 60.0
    #: brokerDeleteInactiveTopicsMode: one of INACTIVE_TOPIC_MODES
    inactive_topics_mode: str = "delete_when_no_subscriptions"
    #: brokerDeleteInactiveTopicsMaxInactiveDurationSeconds; None: the frequency
    inactive_topics_max_inactive_s: float | None = None
    #: brokerlabUnloadInactiveTopicsEnabled: unload (not delete) inactive topics that
    #: must not be deleted, freeing their memory; the next use loads them again
    unload_inactive_topics: bool = True
    #: maxProducersPerTopic, maxConsumersPerTopic, maxConsumersPerSubscription,
    #: maxSubscriptionsPerTopic; 0: no limit (maxTopicsPerNamespace, which counts
    #: partitions, is in ``partitions``)
    max_producers_per_topic: int = 0
    max_consumers_per_topic: int = 0
    max_consumers_per_subscription: int = 0
    max_subscriptions_per_topic: int = 0
    #: maxConcurrentTopicLoadRequest: topic loads under way at once; more wait their turn
    max_concurrent_topic_loads: int = 5000
    #: managedLedgerMaxReadsInFlightSizeInMB in bytes (0: no limit), and its permits'
    #: acquire timeout and queue size
    max_reads_in_flight_bytes: int = 0
    reads_in_flight_timeout_ms: int = 60_000
    reads_in_flight_queue_size: int = 50_000
    #: the policies' broker defaults: defaultRetentionTimeInMinutes,
    #: defaultRetentionSizeInMB (-1: unlimited), ttlDurationDefaultInSeconds (0: none)
    retention_time_minutes: int = 0
    retention_size_mb: int = 0
    message_ttl_s: int = 0
    #: messageExpiryCheckIntervalInMinutes, in seconds
    message_expiry_check_interval_s: float = 300.0
    #: backlogQuotaCheckEnabled, backlogQuotaCheckIntervalInSeconds,
    #: backlogQuotaDefaultLimitBytes, backlogQuotaDefaultLimitSecond (-1: none),
    #: backlogQuotaDefaultRetentionPolicy
    backlog_quota_check_enabled: bool = True
    backlog_quota_check_interval_s: float = 60.0
    backlog_quota_limit_bytes: int = -1
    backlog_quota_limit_s: int = -1
    backlog_quota_policy: str = "producer_request_hold"
    #: schemaCompatibilityStrategy, isAllowAutoUpdateSchemaEnabled,
    #: isSchemaValidationEnforced: the schema rules where no policy says otherwise
    schema_compatibility_strategy: str = "FULL"
    allow_auto_update_schema: bool = True
    schema_validation_enforced: bool = False


@dataclass(frozen=True, slots=True)
class TopicLoad:
    topic: str
    backlog: int
    replay_by_subscription: dict[str, int]
    rate_in: float
    rate_out: float
    storage_size: int
    #: ``tenant/namespace``, Pulsar's ``namespace`` label on topic metrics
    namespace: str


@dataclass(slots=True)
class ConsumerOptions:
    name: str | None = None
    subscription_type: str = "Exclusive"
    receiver_queue_size: int = 1000
    initial_position: str = "Latest"
    priority_level: int = 0
    ack_timeout_ms: int = 0
    nack_delay_ms: int = 60000
    #: what the topic's stats show of the client: its address (``/ip:port``), client
    #: version and the metadata it subscribed with
    address: str = ""
    client_version: str = ""
    metadata: dict[str, str] = field(default_factory=dict)
    #: the schema the client consumes with (None: bytes), checked against the topic's
    schema: SchemaData | None = None
