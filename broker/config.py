"""Typed configuration of the broker (``conf/broker.conf``) and the loaders for both conf
files.

Field names are the file's keys: Pulsar's ``ServiceConfiguration`` names and defaults
where Pulsar has the setting; the few brokerlab-only keys say so. ``conf/broker.conf``
documents every key; ``tests/config`` keeps the file and these defaults in step.
"""

from __future__ import annotations

import pathlib
from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from broker.auth.service import check_config
from broker.cache.config import CacheConfig
from broker.cache.designs import DEFAULT_DESIGN, DESIGNS
from storage_stub.config import StorageConfig
from storage_stub.confparse import load_config

__all__ = [
    "BrokerConfig",
    "StorageConfig",
    "cache_config",
    "load_broker_config",
    "load_storage_config",
]


class BrokerConfig(BaseModel):
    """Every key of conf/broker.conf."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # --- HTTP service ---
    #: Address the HTTP service listens on. Pulsar binds 0.0.0.0; brokerlab stays local.
    bindAddress: str = Field(default="127.0.0.1", min_length=1)
    #: HTTP port; 0 picks a free port (tests). Pulsar: same default.
    webServicePort: int = Field(default=8080, ge=0, le=65535)
    #: Host name or address clients are told to connect to (lookups, the binary
    #: protocol's LOOKUP). Pulsar: same key, default the host name; brokerlab's default
    #: is loopback, as its bindAddress: set it when binding elsewhere.
    advertisedAddress: str = Field(default="127.0.0.1", min_length=1)
    #: Name of the cluster this broker belongs to (admin routes). Pulsar's standalone
    #: mode names it "standalone".
    clusterName: str = Field(default="standalone", min_length=1)

    # --- Security (broker/auth/service.py says what each role may do) ---
    #: Clients must authenticate (HTTP, WebSocket, binary protocol). Pulsar: same.
    authenticationEnabled: bool = False
    #: Comma-separated providers, or none; brokerlab has Pulsar's token provider only.
    #: Pulsar: same key (blank default).
    authenticationProviders: str = Field(default="none", min_length=1)
    #: Administration needs one of superUserRoles. Pulsar: same key and default.
    authorizationEnabled: bool = False
    #: Comma-separated roles that may administer, or none. Pulsar: same (blank default).
    superUserRoles: str = Field(default="none", min_length=1)
    #: Role of a client without credentials, or none (refused). Pulsar: same.
    anonymousUserRole: str = Field(default="none", min_length=1)
    #: How often a binary-protocol connection checks that its client's token has not
    #: expired; an expired one is challenged for a new token (AUTH_CHALLENGE), and the
    #: connection closed if none comes by the next check. Pulsar: same key and default.
    authenticationRefreshCheckSeconds: int = Field(default=60, gt=0)
    #: HS256 secret key (data:;base64,..., file:///path, a path), or none. Pulsar: same.
    tokenSecretKey: str = Field(default="none", min_length=1)
    #: Public key of a key pair (same forms, DER), or none. Pulsar: same.
    tokenPublicKey: str = Field(default="none", min_length=1)
    #: Signature algorithm of tokenPublicKey's tokens. Pulsar: same key and default.
    tokenPublicAlg: str = Field(
        default="RS256", pattern="^(RS256|RS384|RS512|PS256|PS384|PS512|ES256|ES384|ES512)$"
    )
    #: The claim holding a token's role. Pulsar: same key (blank means sub).
    tokenAuthClaim: str = Field(default="sub", min_length=1)
    #: The claim holding a token's audiences, or none (not checked). Pulsar: same.
    tokenAudienceClaim: str = Field(default="none", min_length=1)
    #: This broker's audience name, required in tokenAudienceClaim. Pulsar: same.
    tokenAudience: str = Field(default="none", min_length=1)
    #: Seconds a token's exp may be off the broker's clock. Pulsar: same key and default.
    tokenAllowedClockSkewSeconds: int = Field(default=0, ge=0)
    #: /metrics needs a token too (when authentication is on). Pulsar: same.
    authenticateMetricsEndpoint: bool = False
    #: brokerlab only: Host header names (comma-separated) the HTTP service answers
    #: besides loopback names; none: loopback names only when bound to loopback, any
    #: name otherwise; * any name (DNS rebinding guard off).
    httpAllowedHosts: str = Field(default="none", min_length=1)
    #: brokerlab only: origins (comma-separated, or *) whose web pages may call the HTTP
    #: API (CORS answers, cross-origin state changes); none: CORS off.
    httpCorsAllowedOrigins: str = Field(default="none", min_length=1)

    # --- Several brokers (brokerlab serve --brokers N) ---
    #: Bundles a namespace is cut into; each bundle (a range of topic-name hashes) has
    #: one owning broker. Pulsar: same key and default.
    defaultNumberOfNamespaceBundles: int = Field(default=4, gt=0, le=1024)
    #: How long the bundles of a killed broker stay owned by it (clients cannot be
    #: served) before the others may take them: the metadata store's session expiry.
    #: Pulsar: same key and default (ms).
    metadataStoreSessionTimeoutMillis: int = Field(default=30000, ge=0)

    # --- Pulsar binary protocol ---
    #: TCP port of Pulsar's binary protocol (pulsar://); 0 disables it, -1 picks a free
    #: port (tests; brokerlab only). Pulsar: same key and default.
    brokerServicePort: int = Field(default=6650, ge=-1, le=65535)
    #: Seconds between keep-alive PINGs on a binary connection; a connection that has
    #: not answered for twice this long is closed. Pulsar: same key and default.
    keepAliveIntervalSeconds: int = Field(default=30, gt=0)
    #: Acks of single messages of a batch (ack sets) are kept, so a redelivery of the
    #: batch sends only the messages not yet acknowledged. Pulsar: same key and default.
    acknowledgmentAtBatchIndexLevelEnabled: bool = False
    #: Pulsar's WebSocket API (/ws/v2/...) on the HTTP port. Pulsar's broker default is
    #: false; its standalone mode, which brokerlab plays, turns it on.
    webSocketServiceEnabled: bool = True

    # --- Produce ---
    #: Produce to a missing topic creates it. Pulsar: same default.
    allowAutoTopicCreation: bool = True
    #: Largest message payload in bytes (413 above it). Pulsar: same default (5 MiB).
    maxMessageSize: int = Field(default=5242880, gt=0)
    #: brokerlab only: largest HTTP request body in bytes (Pulsar's httpMaxRequestSize
    #: is unbounded by default; produce bodies carry base64 payloads, so bound them).
    maxHttpRequestBodyBytes: int = Field(default=16777216, gt=0)
    #: brokerlab only: most messages in one produce request.
    maxMessagesPerProduceRequest: int = Field(default=1000, gt=0)
    #: brokerlab only: processes that decode and encode produce bodies beside the event
    #: loop (broker.http.codec); 0 does it on the loop; -1 picks by the machine's cores.
    httpCodecProcesses: int = Field(default=-1, ge=-1, le=64)
    #: What a produce or consumer auto-creates: non-partitioned or partitioned (with
    #: defaultNumPartitions). Pulsar: same key and default.
    allowAutoTopicCreationType: str = Field(
        default="non-partitioned", pattern="^(non-partitioned|partitioned)$"
    )
    #: Partitions of an auto-created partitioned topic. Pulsar: same key and default.
    defaultNumPartitions: int = Field(default=1, gt=0)
    #: Most partitions a partitioned topic may have; 0 = no limit. Pulsar: same.
    maxNumPartitionsPerPartitionedTopic: int = Field(default=0, ge=0)

    # --- Managed ledger: rollover ---
    #: Roll the current ledger over at this many entries (not before the minimum time).
    managedLedgerMaxEntriesPerLedger: int = Field(default=50000, gt=0)
    #: Roll over at this many MiB written to the current ledger (ditto).
    managedLedgerMaxSizePerLedgerMbytes: int = Field(default=2048, gt=0)
    #: A ledger is never rolled over before it is this old (minutes); 0 = no minimum.
    managedLedgerMinLedgerRolloverTimeMinutes: int = Field(default=10, ge=0)
    #: A ledger holding entries is rolled over once it is this old (minutes).
    managedLedgerMaxLedgerRolloverTimeMinutes: int = Field(default=240, gt=0)

    # --- Managed ledger: entry cache ---
    #: Broker entry cache size in MiB; 0 disables caching. Pulsar's default is 20% of
    #: the JVM's direct memory with a floor of 64 MB; brokerlab has no JVM, so the floor.
    managedLedgerCacheSizeMB: int = Field(default=64, ge=0)
    #: brokerlab only: the live cache design, one of ``broker.cache.designs.DESIGNS``:
    #: pip430 (PIP-430), legacy (before it), segmented (PIP-174's ring).
    managedLedgerCacheImplementation: str = DEFAULT_DESIGN
    #: brokerlab only: comma-separated designs run as size-only shadows of the live
    #: cache on the same cache events, or "none".
    brokerlabShadowCacheImplementations: str = "none"
    #: A size eviction frees down to this share of the cache size. Pulsar: same default.
    managedLedgerCacheEvictionWatermark: float = Field(default=0.9, gt=0, lt=1)
    #: Period of the timestamp eviction pass (ms). Pulsar: same default.
    managedLedgerCacheEvictionIntervalMs: int = Field(default=10, gt=0)
    #: Entry TTL in the cache (ms). Pulsar: same default.
    managedLedgerCacheEvictionTimeThresholdMillis: int = Field(default=1000, gt=0)
    #: PIP-430's expected read counts. Pulsar: same default.
    cacheEvictionByExpectedReadCount: bool = True
    #: PIP-430: TTL extensions of an entry that still has expected reads. Pulsar: same.
    managedLedgerCacheEvictionExtendTTLOfEntriesWithRemainingExpectedReadsMaxTimes: int = Field(
        default=5, ge=0
    )
    #: PIP-430: give a recently read entry another TTL (LRU-like). false as in Pulsar 5.0.
    managedLedgerCacheEvictionExtendTTLOfRecentlyAccessed: bool = False
    #: Cache an owned copy of each payload rather than a view. Pulsar: same default.
    managedLedgerCacheCopyEntries: bool = False
    #: Keep caching added entries this long after the last active cursor left (ms);
    #: -1 means 2 x managedLedgerCacheEvictionTimeThresholdMillis, Pulsar's default.
    managedLedgerContinueCachingAddedEntriesAfterLastActiveCursorLeavesMillis: int = Field(
        default=-1, ge=-1
    )
    #: legacy: invalidate up to the slowest mark-delete instead of the slowest read
    #: position. Pulsar: same default.
    cacheEvictionByMarkDeletedPosition: bool = False
    #: legacy: a cursor more than this many entries behind is backlogged (not active).
    managedLedgerCursorBackloggedThreshold: int = Field(default=1000, ge=0)
    #: legacy backlog caching: cache reads of backlogged cursors when at least this many
    #: are close together; 0 disables it. Pulsar: same default.
    managedLedgerMinimumBacklogCursorsForCaching: int = Field(default=0, ge=0)
    #: legacy backlog caching: a cursor counts when its backlog is at least this.
    managedLedgerMinimumBacklogEntriesForCaching: int = Field(default=1000, ge=0)
    #: legacy backlog caching: most entries between cursors counted together.
    managedLedgerMaxBacklogBetweenCursorsForCaching: int = Field(default=1000, ge=0)
    #: brokerlab only (PIP-174 has no key): segments of the segmented cache; 0 means
    #: max(2, cache size / 1 GiB), the proposal's rule.
    managedLedgerCacheSegments: int = Field(default=0, ge=0)
    #: brokerlab only: the size every entry counts as in the cache, whatever its
    #: payload (Pulsar's tests inject an EntryLengthFunction); 0: the payload's size.
    brokerlabCacheEntryLengthBytes: int = Field(default=0, ge=0, le=2_147_483_647)

    # --- Tiered storage ---
    #: Offload closed ledgers of a topic holding more than this in the bookie; -1: only
    #: on request (the offload route). Pulsar: same key and default.
    managedLedgerOffloadThresholdInBytes: int = Field(default=-1, ge=-1)
    #: Bookie copies of offloaded ledgers are deleted after this. Pulsar: same (4 hours).
    managedLedgerOffloadDeletionLagMs: int = Field(default=14400000, ge=0)

    #: Most bytes of reads in flight at once, broker-wide (estimated before each read,
    #: cache hits included); 0 = no limit. Pulsar: same key, default 0 in 4.1.
    managedLedgerMaxReadsInFlightSizeInMB: int = Field(default=0, ge=0)
    #: How long a read waits for permits before it fails (and is retried). Pulsar: same.
    managedLedgerMaxReadsInFlightPermitsAcquireTimeoutMillis: int = Field(default=60_000, ge=0)
    #: Most reads waiting for permits; one more fails at once. Pulsar: same.
    managedLedgerMaxReadsInFlightPermitsAcquireQueueSize: int = Field(default=50_000, ge=0)

    # --- Dispatch ---
    #: Most entries a dispatcher reads from the ledger in one read. Pulsar: same default.
    dispatcherMaxReadBatchSize: int = Field(default=100, gt=0)
    #: Shared/Key_Shared: stop dispatching to a consumer with this many unacked messages;
    #: 0 = no limit. Pulsar: same default.
    maxUnackedMessagesPerConsumer: int = Field(default=50000, ge=0)
    #: Shared/Key_Shared: stop dispatching to a subscription with this many unacked
    #: messages; 0 = no limit. Pulsar: same default (4 x the per-consumer limit).
    maxUnackedMessagesPerSubscription: int = Field(default=200000, ge=0)
    #: Key_Shared: stop reading ahead while this many messages per consumer wait in the
    #: replay queue. Pulsar 5.0's documented figure.
    keySharedLookAheadMsgInReplayThresholdPerConsumer: int = Field(default=4000, gt=0)
    #: Key_Shared: ... and at most this many per subscription. Pulsar 5.0's figure.
    keySharedLookAheadMsgInReplayThresholdPerSubscription: int = Field(default=40000, gt=0)
    #: brokerlab only: close a consumer that has not polled for this long (ms); HTTP
    #: consumers have no connection whose loss would tell the broker they are gone.
    consumerIdleTimeoutMs: int = Field(default=30000, gt=0)

    # --- Limits (0 = no limit, as Pulsar) ---
    #: Most binary-protocol connections; more are closed at accept. Pulsar: same key
    #: and default.
    brokerMaxConnections: int = Field(default=0, ge=0)
    #: Most binary-protocol connections from one client address; more are closed at
    #: accept. Pulsar: same key and default.
    brokerMaxConnectionsPerIp: int = Field(default=0, ge=0)
    #: Most HTTP connections (WebSocket included); more are answered 429 and closed at
    #: accept; 0: no limit. Pulsar's key; not its default (2048, for its admin web
    #: server): here HTTP carries the data path, one connection per long-polling
    #: consumer, and the many-topics preset alone holds more than 2,048.
    maxHttpServerConnections: int = Field(default=0, ge=0)
    #: brokerlab only: most HTTP connections from one client address (429 and closed
    #: at accept), so one client cannot take every file descriptor.
    brokerlabHttpMaxConnectionsPerIp: int = Field(default=0, ge=0)
    #: Close an HTTP connection that has not sent a complete request head within this
    #: many ms of opening or of its last response: idle keep-alive and slowloris
    #: connections alike (partial bytes do not extend it); and one whose request body
    #: sends nothing for this long. Pulsar: same key and default.
    httpServerIdleTimeout: int = Field(default=30000, gt=0)
    #: Most producers of a topic, binary and WebSocket (binary protocol: ProducerBusy;
    #: WebSocket handshake: 409). Pulsar: same key and default.
    maxProducersPerTopic: int = Field(default=0, ge=0)
    #: Most consumers of a topic (HTTP 409 conflict; binary: ConsumerBusy).
    #: Pulsar: same key and default.
    maxConsumersPerTopic: int = Field(default=0, ge=0)
    #: Most consumers of a subscription (409; ConsumerBusy). Pulsar: same.
    maxConsumersPerSubscription: int = Field(default=0, ge=0)
    #: Most subscriptions of a topic (409; NotAllowedError). Pulsar: same.
    maxSubscriptionsPerTopic: int = Field(default=0, ge=0)
    #: Most topics of a namespace, partitions counted (409; NotAllowedError). Pulsar:
    #: same key and default.
    maxTopicsPerNamespace: int = Field(default=0, ge=0)

    # --- Inactive topics ---
    #: Delete topics inactive per brokerDeleteInactiveTopicsMode. Pulsar: same default.
    brokerDeleteInactiveTopicsEnabled: bool = True
    #: Seconds between checks for inactive topics. Pulsar: same key and default.
    brokerDeleteInactiveTopicsFrequencySeconds: int = Field(default=60, gt=0)
    #: Which inactive topics are deleted: delete_when_no_subscriptions (no subscription,
    #: no producer) or delete_when_subscriptions_caught_up (no backlog, no client).
    #: Pulsar: same key and default.
    brokerDeleteInactiveTopicsMode: str = Field(
        default="delete_when_no_subscriptions",
        pattern="^(delete_when_no_subscriptions|delete_when_subscriptions_caught_up)$",
    )
    #: Seconds a topic must stay inactive before the check acts; -1: the frequency.
    #: Pulsar: same key, unset by default (then the frequency).
    brokerDeleteInactiveTopicsMaxInactiveDurationSeconds: int = Field(default=-1, ge=-1)
    #: brokerlab only: unload inactive topics that must not be deleted, freeing memory.
    brokerlabUnloadInactiveTopicsEnabled: bool = True

    # --- Stats ---
    #: Period (s) over which topic stats and /metrics rates are computed, and at which
    #: every cursor's backlog is re-checked (the rules before PIP-430 read it). Pulsar's
    #: default, 60. (The dashboard computes its own rates from counters.)
    statsUpdateFrequencyInSecs: int = Field(default=60, ge=1)
    #: Topic-labelled series in /metrics (turn off with many topics). Pulsar: same.
    exposeTopicLevelMetricsInPrometheus: bool = True
    #: brokerlab only: most topics given their own topic-labelled series (those with
    #: the largest backlogs); the rest are summed under topic="_other".
    brokerlabMetricsMaxTopics: int = Field(default=1000, ge=0)

    # --- Access traces ---
    #: brokerlab only: write an access trace (Parquet) into this directory; none: off.
    brokerlabTraceDir: str = Field(default="none", min_length=1)
    #: brokerlab only: events per trace file.
    brokerlabTraceRollEvents: int = Field(default=100_000, ge=1)
    #: brokerlab only: files waiting for the writer before new events are dropped.
    brokerlabTraceMaxPendingFiles: int = Field(default=4, ge=1)

    @field_validator("managedLedgerCacheImplementation")
    @classmethod
    def _registered_design(cls, value: str) -> str:
        if value not in DESIGNS:
            raise ValueError(f"one of {', '.join(DESIGNS)}")
        return value

    @field_validator("brokerlabShadowCacheImplementations")
    @classmethod
    def _registered_designs(cls, value: str) -> str:
        if value != "none":
            unknown = [name for name in value.split(",") if name not in DESIGNS]
            if unknown:
                raise ValueError(
                    f"'none' or a comma-separated list of {', '.join(DESIGNS)}; "
                    f"unknown: {', '.join(repr(name) for name in unknown)}"
                )
        return value

    @model_validator(mode="after")
    def _security_fits_together(self) -> BrokerConfig:
        check_config(self)
        return self


def cache_config(config: BrokerConfig) -> CacheConfig:
    """The cache designs' view of broker.conf: the cache settings and the ledger-side
    rules' settings."""
    continue_ms = config.managedLedgerContinueCachingAddedEntriesAfterLastActiveCursorLeavesMillis
    return CacheConfig(
        max_size_bytes=config.managedLedgerCacheSizeMB * 1024 * 1024,
        eviction_watermark=config.managedLedgerCacheEvictionWatermark,
        eviction_time_threshold_ms=config.managedLedgerCacheEvictionTimeThresholdMillis,
        eviction_interval_ms=config.managedLedgerCacheEvictionIntervalMs,
        eviction_by_expected_read_count=config.cacheEvictionByExpectedReadCount,
        extend_ttl_max_times=(
            config.managedLedgerCacheEvictionExtendTTLOfEntriesWithRemainingExpectedReadsMaxTimes
        ),
        extend_ttl_of_recently_accessed=config.managedLedgerCacheEvictionExtendTTLOfRecentlyAccessed,
        copy_entries=config.managedLedgerCacheCopyEntries,
        continue_caching_after_last_cursor_ms=None if continue_ms < 0 else continue_ms,
        cache_eviction_by_mark_deleted_position=config.cacheEvictionByMarkDeletedPosition,
        cursor_backlogged_threshold=config.managedLedgerCursorBackloggedThreshold,
        min_backlog_cursors_for_caching=config.managedLedgerMinimumBacklogCursorsForCaching,
        min_backlog_entries_for_caching=config.managedLedgerMinimumBacklogEntriesForCaching,
        max_backlog_between_cursors_for_caching=(
            config.managedLedgerMaxBacklogBetweenCursorsForCaching
        ),
        segments=config.managedLedgerCacheSegments,
        entry_length=config.brokerlabCacheEntryLengthBytes,
    )


def shadow_designs(config: BrokerConfig) -> list[str]:
    """The designs of brokerlabShadowCacheImplementations, in order."""
    value = config.brokerlabShadowCacheImplementations
    return [] if value == "none" else value.split(",")


def load_broker_config(
    path: pathlib.Path | None, overrides: Mapping[str, object] | None = None
) -> BrokerConfig:
    """Load conf/broker.conf (None: defaults); overrides win. Raises ConfigError."""
    return load_config(BrokerConfig, path, overrides)


def load_storage_config(
    path: pathlib.Path | None, overrides: Mapping[str, object] | None = None
) -> StorageConfig:
    """Load conf/storage.conf (None: defaults); overrides win. Raises ConfigError."""
    return load_config(StorageConfig, path, overrides)


def trace_dir(config: BrokerConfig) -> str | None:
    """brokerlabTraceDir, or None when tracing is off (``none``)."""
    value = config.brokerlabTraceDir.strip()
    return None if value.lower() == "none" else value
