"""Typed configuration of the broker (``conf/broker.conf``) and the loaders for both conf
files.

Field names are the file's keys: Pulsar's ``ServiceConfiguration`` names and defaults
where Pulsar has the setting; the few brokerlab-only keys say so. Each key is defined
once (:func:`storage_stub.confkeys.key`): type, default, bounds and documentation, from
which pydantic validates and ``python -m broker.config_doc --write`` writes
``conf/broker.conf``; ``tests/config`` checks that the file is up to date.
"""

from __future__ import annotations

import pathlib
from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict, field_validator, model_validator

from broker.auth.service import check_config
from broker.cache.config import CacheConfig
from broker.cache.designs import DEFAULT_DESIGN, DESIGNS
from broker.dispatch.delayed import IN_MEMORY_FACTORY, TRACKER_FACTORIES
from broker.dispatch.schema_registry import STRATEGIES
from storage_stub.config import StorageConfig
from storage_stub.confkeys import Section, key
from storage_stub.confparse import load_config

__all__ = [
    "CONF_HEADER",
    "BrokerConfig",
    "StorageConfig",
    "cache_config",
    "load_broker_config",
    "load_storage_config",
]

#: The top of conf/broker.conf.
CONF_HEADER = """
brokerlab broker configuration.

Format: Pulsar's broker.conf format. One key=value per line; lines starting with # are
comments; there are no trailing comments (a # after a value is part of the value). An
empty value (key=) means "use the default". An unknown key, a repeated key or a bad
value stops start-up with a message naming the key, this file and the line.

Keys are Pulsar's ServiceConfiguration names, with Pulsar's defaults where Pulsar has the
setting; "brokerlab only" marks keys Pulsar does not have.
"""

HTTP = Section("HTTP service")
SECURITY = Section(
    "Security: authentication and authorization",
    intro="""
    Off by default (brokerlab listens on loopback only); serving on another address with
    authentication off logs a warning. With authorization on, administration (topic and
    namespace admin, unloads, the fault injector, broker restarts) needs a super-user; any
    authenticated role may produce and consume (brokerlab has no per-namespace grants).
    What each role may do: broker/auth/service.py.

    Tokens: brokerlab token create-secret-key / create-key-pair / create (docs/api.md).
    """,
)
CLUSTER = Section("Several brokers (brokerlab serve --brokers N)")
BINARY = Section("Pulsar binary protocol")
PRODUCE = Section("Produce")
DEDUPLICATION = Section(
    "Message deduplication",
    intro="""
A producer's messages whose sequence ids it has sent before are acknowledged without
being stored (message id -1:-1), per producer name, on topics where deduplication is on:
the topic's policy (/deduplicationEnabled), else its namespace's (/deduplication), else
brokerDeduplicationEnabled. The state survives restarts and kill -9: a snapshot in the
cursor pulsar.dedup plus a replay of the entries after it. HTTP produce has no producer
and is not deduplicated.""",
)
ROLLOVER = Section(
    "Managed ledger: ledger rollover",
    intro="""
    A topic's current ledger is closed and a new one opened when it has reached the entry
    count, the size or the maximum age below, and is older than the minimum age.
    """,
)
CACHE = Section("Managed ledger: broker entry cache")
TIERED = Section("Tiered storage")
READS_IN_FLIGHT = Section("Managed ledger: reads in flight")
DISPATCH = Section("Dispatch")
DELAYED = Section(
    "Delayed delivery",
    intro="Messages a producer sends with deliver_at / deliver_after (deliverAt, "
    "deliverAfterMs over WebSocket and HTTP produce) wait on Shared and Key_Shared "
    "subscriptions until "
    "they are due, then are read again from the ledger (cache or storage); Exclusive "
    "and Failover deliver them at once, as in Pulsar.",
)
LIMITS = Section("Limits (0 = no limit, as Pulsar)")
INACTIVE = Section("Inactive topics")
POLICIES = Section(
    "Retention, message TTL and backlog quotas",
    intro="""
    The broker's defaults for the namespace and topic policies of the same names (set with
    the admin routes of docs/api.md, "Namespace and topic policies"); a topic's own policy
    wins over its namespace's, which wins over these.
    """,
)
SCHEMA = Section(
    "Schema registry",
    intro="""
    Topics' schemas, versioned in the metadata store, as Pulsar's schema registry. The
    namespace and topic policies of the same names, when set, take precedence.
    """,
)
STATS = Section("Stats")
TRACES = Section(
    "Access traces",
    intro="What the entry cache was asked, recorded; brokerlab analyze replays a trace "
    "through every cache design at every size.",
)

PULSAR_SAME = "Pulsar: same key and default."
BROKERLAB_ONLY = "brokerlab only."


class BrokerConfig(BaseModel):
    """Every key of conf/broker.conf, in the file's order."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    bindAddress: str = key(
        "127.0.0.1",
        HTTP,
        "Address the HTTP service (produce, consume, admin, /metrics, /dashboard) listens on.",
        unit="host name or IP address",
        origin="Pulsar: same key, default 0.0.0.0; brokerlab listens on loopback only unless told.",
        min_length=1,
    )
    webServicePort: int = key(
        8080,
        HTTP,
        "TCP port of the HTTP service; 0 picks a free port (tests).",
        unit="port number",
        origin=PULSAR_SAME,
        ge=0,
        le=65535,
    )
    advertisedAddress: str = key(
        "127.0.0.1",
        HTTP,
        "Host name or address clients are told to connect to (HTTP lookups and the binary "
        "protocol's LOOKUP answer with it); set it when bindAddress is not loopback.",
        unit="host name or IP address",
        origin="Pulsar: same key, default the host name; brokerlab stays on loopback unless told.",
        min_length=1,
    )
    clusterName: str = key(
        "standalone",
        HTTP,
        "Name of the cluster this broker belongs to, as the admin routes report it.",
        unit="name",
        origin="Pulsar: same key; its standalone mode uses this name.",
        min_length=1,
    )

    authenticationEnabled: bool = key(
        False,
        SECURITY,
        "Clients must authenticate: HTTP and WebSocket with Authorization: Bearer <token> "
        "(WebSocket also ?token=), the binary protocol in its CONNECT.",
        origin=PULSAR_SAME,
    )
    authenticationProviders: str = key(
        "none",
        SECURITY,
        "Authentication providers, comma-separated, or none. The one provider brokerlab has "
        "is org.apache.pulsar.broker.authentication.AuthenticationProviderToken (JWT "
        "tokens).",
        unit="class names",
        origin="Pulsar: same key; its default is blank.",
        min_length=1,
    )
    authorizationEnabled: bool = key(
        False,
        SECURITY,
        "Administration needs a role of superUserRoles (403 otherwise).",
        origin=PULSAR_SAME,
    )
    superUserRoles: str = key(
        "none",
        SECURITY,
        "Roles that may administer, comma-separated, or none.",
        unit="role names",
        origin="Pulsar: same key; its default is blank.",
        min_length=1,
    )
    anonymousUserRole: str = key(
        "none",
        SECURITY,
        "The role of a client that sends no credentials, or none (such clients are refused).",
        unit="role name",
        origin="Pulsar: same key; its default is blank.",
        min_length=1,
    )
    authenticationRefreshCheckSeconds: float = key(
        60,
        SECURITY,
        "How often a binary-protocol connection checks that its client's token has not "
        "expired. An expired token is challenged (AUTH_CHALLENGE): the client answers with "
        "a new token of the same role (AUTH_RESPONSE) or the connection is closed at the "
        "next check; a client that cannot refresh is closed at once. HTTP checks the token "
        "of every request.",
        unit="seconds",
        origin="Pulsar: same key and default; it takes whole seconds, brokerlab fractions "
        "too (its tests check every 0.1 s rather than wait seconds for the check).",
        gt=0,
    )
    tokenSecretKey: str = key(
        "none",
        SECURITY,
        "Secret key that signs and validates tokens (HS256): data:;base64,<key>, "
        "file:///path (the key's raw bytes), a path, or none. Set this or tokenPublicKey.",
        unit="key location",
        origin="Pulsar: same key and forms; its default is blank.",
        min_length=1,
    )
    tokenPublicKey: str = key(
        "none",
        SECURITY,
        "Public key that validates tokens signed by its private key: data:;base64,<DER>, "
        "file:///path (DER, or PEM), a path, or none.",
        unit="key location",
        origin="Pulsar: same key and forms; its default is blank.",
        min_length=1,
    )
    tokenPublicAlg: str = key(
        "RS256",
        SECURITY,
        "Signature algorithm of tokens validated with tokenPublicKey.",
        choices=("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512"),
        origin=PULSAR_SAME,
    )
    tokenAuthClaim: str = key(
        "sub",
        SECURITY,
        "The token claim that holds the role.",
        unit="claim name",
        origin="Pulsar: same key; blank means sub.",
        min_length=1,
    )
    tokenAudienceClaim: str = key(
        "none",
        SECURITY,
        "The token claim that holds the token's audiences, or none (audiences not checked).",
        unit="claim name",
        origin="Pulsar: same key; its default is blank.",
        min_length=1,
    )
    tokenAudience: str = key(
        "none",
        SECURITY,
        "This broker's audience: tokenAudienceClaim must name it. Required with that claim.",
        unit="name",
        origin="Pulsar: same key; its default is blank.",
        min_length=1,
    )
    tokenAllowedClockSkewSeconds: int = key(
        0,
        SECURITY,
        "How far a token's expiry may be off the broker's clock.",
        unit="seconds",
        origin=PULSAR_SAME,
        ge=0,
    )
    authenticateMetricsEndpoint: bool = key(
        False,
        SECURITY,
        "/metrics needs a token too when authentication is on (otherwise it is open).",
        origin=PULSAR_SAME,
    )
    httpAllowedHosts: str = key(
        "none",
        SECURITY,
        "Host header names the HTTP service answers (403 for others), with or without a "
        "port, comma-separated. none: when bound to a loopback address only loopback names "
        "(localhost, 127.0.0.1, [::1]) and advertisedAddress, so a web page cannot reach the "
        "broker through DNS rebinding; any name when bound elsewhere. *: any name (the DNS "
        "rebinding guard off).",
        unit="host names",
        origin=BROKERLAB_ONLY,
        min_length=1,
    )
    httpCorsAllowedOrigins: str = key(
        "none",
        SECURITY,
        "Origins whose web pages may call the HTTP API from a browser "
        "(https://app.example:8443), comma-separated, or * for any: they get CORS answers "
        "and may change state. none: CORS off, and a request with another site's Origin "
        "that changes state (or opens a WebSocket) is refused (403).",
        unit="origins",
        origin=BROKERLAB_ONLY,
        min_length=1,
    )

    defaultNumberOfNamespaceBundles: int = key(
        4,
        CLUSTER,
        "Bundles a namespace is cut into. Each bundle is a range of the CRC32 of topic names "
        "and is owned by one broker of the cluster; lookups answer with the owner.",
        unit="bundles",
        origin=PULSAR_SAME,
        gt=0,
        le=1024,
    )
    metadataStoreSessionTimeoutMillis: int = key(
        30000,
        CLUSTER,
        "How long a killed broker's bundles stay owned by it (their clients cannot be "
        "served) before another broker may take them (the metadata store's session "
        "expiry); a graceful restart hands them over at once.",
        unit="milliseconds",
        origin=PULSAR_SAME,
        ge=0,
    )

    brokerServicePort: int = key(
        6650,
        BINARY,
        "TCP port of Pulsar's binary protocol (pulsar://host:port), served by the same "
        "process and event loop as HTTP; 0 disables it; -1 picks a free port (brokerlab "
        "only, for tests).",
        unit="port number",
        origin=PULSAR_SAME,
        ge=-1,
        le=65535,
    )
    keepAliveIntervalSeconds: int = key(
        30,
        BINARY,
        "Seconds between keep-alive PINGs on a binary connection; one silent for twice this "
        "long is closed.",
        unit="seconds",
        origin=PULSAR_SAME,
        gt=0,
    )
    pulsarChannelWriteBufferHighWaterMark: int = key(
        65536,
        BINARY,
        "A binary connection whose unsent output (what its client has not read yet) grows "
        "past this many bytes stops being dispatched to: its consumers get no more messages "
        "until the output falls below pulsarChannelWriteBufferLowWaterMark (Netty's channel "
        "writability, which Pulsar's dispatchers consult).",
        unit="bytes",
        origin="Pulsar: same key and default (PIP-434; before it, Netty's default, the "
        "same). Pulsar's Shared and Key_Shared dispatchers do not always honour it (they "
        "may go on one entry at a time, apache/pulsar#24926); brokerlab hands an unwritable "
        "connection's consumers nothing, for every subscription type, until it drains.",
        gt=0,
    )
    pulsarChannelWriteBufferLowWaterMark: int = key(
        32768,
        BINARY,
        "Unsent output of a binary connection below which its consumers are dispatched to "
        "again, once the high water mark had stopped them.",
        unit="bytes",
        origin="Pulsar: same key and default (PIP-434).",
        ge=0,
    )
    pulsarChannelPauseReceivingRequestsIfUnwritable: bool = key(
        True,
        BINARY,
        "Stop reading a binary connection while its unsent output is over "
        "pulsarChannelWriteBufferHighWaterMark, and read it again once below the low one; "
        "the requests already received wait unparsed meanwhile. A client that sends "
        "requests (PINGs, lookups, topic lists, schemas) and does not read the answers "
        "then costs the broker about the high water mark, not everything it asked for.",
        origin="Pulsar: same key (PIP-434), off by default there (apache/pulsar#24423: a "
        "broker out of memory from answers its clients did not read); on here, so that "
        "no command stream grows the broker's memory without bound.",
    )
    acknowledgmentAtBatchIndexLevelEnabled: bool = key(
        False,
        BINARY,
        "Keep acks of single messages of a batched entry (ack sets): a redelivery of the "
        "entry then carries the ack set, so the client skips the messages already "
        "acknowledged.",
        origin=PULSAR_SAME,
    )
    webSocketServiceEnabled: bool = key(
        True,
        BINARY,
        "Serve Pulsar's WebSocket API (/ws/v2/producer|consumer|reader/...) on the HTTP port.",
        origin="Pulsar: same key; the broker's default is false, its standalone mode's "
        "(which brokerlab plays) true.",
    )

    allowAutoTopicCreation: bool = key(
        True,
        PRODUCE,
        "Whether producing to a topic that does not exist creates it; when false such a "
        "produce gets 404.",
        origin=PULSAR_SAME,
    )
    maxMessageSize: int = key(
        5242880,
        PRODUCE,
        "Largest message payload accepted; a larger message is refused with 413.",
        unit="bytes (5 MiB)",
        origin=PULSAR_SAME,
        gt=0,
    )
    maxHttpRequestBodyBytes: int = key(
        16777216,
        PRODUCE,
        "Largest HTTP request body accepted (413 above it). Payloads travel base64-encoded "
        "in JSON (4/3 of their size), so keep this above 4/3 x maxMessageSize plus some "
        "room.",
        unit="bytes (16 MiB)",
        origin="brokerlab only (Pulsar's nearest setting, httpMaxRequestSize, is unbounded "
        "by default).",
        gt=0,
    )
    maxMessagesPerProduceRequest: int = key(
        1000,
        PRODUCE,
        "Most messages accepted in one produce request; a request with more is refused.",
        unit="messages",
        origin=BROKERLAB_ONLY,
        gt=0,
    )
    httpCodecProcesses: int = key(
        -1,
        PRODUCE,
        "Processes (broker.http.codec) that validate, base64-decode and encode produce "
        "bodies of 16 KiB or more beside the event loop, so that work runs on another core; "
        "0 does it all on the loop; -1 picks: none with one or two usable cores (the trip "
        "costs more CPU than it saves there), one with three or more. The answers are the "
        "same either way, but a small request encoded on the loop can be stored before a "
        "large one read earlier (publish times out of order along the topic, as with "
        "several Pulsar producers). A process that dies stops the broker.",
        unit="processes",
        origin=BROKERLAB_ONLY,
        ge=-1,
        le=64,
    )
    allowAutoTopicCreationType: str = key(
        "non-partitioned",
        PRODUCE,
        "What producing to (or subscribing on) a missing topic creates: non-partitioned, or "
        "partitioned with defaultNumPartitions partitions.",
        choices=("non-partitioned", "partitioned"),
        origin=PULSAR_SAME,
    )
    defaultNumPartitions: int = key(
        1,
        PRODUCE,
        "Partitions of an auto-created partitioned topic.",
        unit="partitions",
        origin=PULSAR_SAME,
        gt=0,
    )
    maxNumPartitionsPerPartitionedTopic: int = key(
        0,
        PRODUCE,
        "Most partitions a partitioned topic may be created with; 0 = no limit.",
        unit="partitions",
        origin=PULSAR_SAME,
        ge=0,
    )

    brokerlabMaxPartitionsCeiling: int = key(
        10000,
        PRODUCE,
        "Most partitions a partitioned topic may have when maxNumPartitionsPerPartitionedTopic "
        "is 0 (no limit): creating or updating one past it is refused (400) as past that "
        "key. A guard: every admin walk over a topic's partitions (unload, clear backlog, "
        "delete, topic lists) is proportional to the count and yields to other requests as "
        "it goes, but one that loads every partition (a subscription created on all of "
        "them) loads that many topics; 10,000 is the many-topics preset's topic count.",
        unit="partitions",
        origin="brokerlab only (Pulsar has no ceiling with maxNumPartitionsPerPartitionedTopic=0).",
        gt=0,
    )

    brokerDeduplicationEnabled: bool = key(
        False,
        DEDUPLICATION,
        "Deduplicate the messages of topics whose topic and namespace policies say nothing.",
        origin=PULSAR_SAME,
    )
    brokerDeduplicationEntriesInterval: int = key(
        1000,
        DEDUPLICATION,
        "Entries stored between two snapshots of the producers' sequence ids; a larger "
        "interval writes fewer snapshots and replays more entries when the topic loads.",
        unit="entries",
        origin=PULSAR_SAME,
        gt=0,
    )
    brokerDeduplicationMaxNumberOfProducers: int = key(
        10000,
        DEDUPLICATION,
        "Most producers a snapshot keeps (the others are known again only from the "
        "entries replayed after it).",
        unit="producers",
        origin=PULSAR_SAME,
        gt=0,
    )
    brokerDeduplicationProducerInactivityTimeoutMinutes: int = key(
        360,
        DEDUPLICATION,
        "A producer name not connected for this long is forgotten (its next message is "
        "new whatever its sequence id).",
        unit="minutes",
        origin=PULSAR_SAME,
        ge=1,
    )
    brokerDeduplicationSnapshotIntervalSeconds: int = key(
        120,
        DEDUPLICATION,
        "A snapshot is also taken when this long has passed since the last one and entries "
        "were stored since (checked every statsUpdateFrequencyInSecs, where Pulsar has "
        "brokerDeduplicationSnapshotFrequencyInSeconds); 0: only every "
        "brokerDeduplicationEntriesInterval entries.",
        unit="seconds",
        origin="Pulsar: same key and default.",
        ge=0,
    )

    managedLedgerMaxEntriesPerLedger: int = key(
        50000,
        ROLLOVER,
        "Entries after which the current ledger is rolled over.",
        unit="entries",
        origin=PULSAR_SAME,
        gt=0,
    )
    managedLedgerMaxSizePerLedgerMbytes: int = key(
        2048,
        ROLLOVER,
        "Size after which the current ledger is rolled over.",
        unit="MiB",
        origin=PULSAR_SAME,
        gt=0,
    )
    managedLedgerMinLedgerRolloverTimeMinutes: int = key(
        10,
        ROLLOVER,
        "Minimum age of a ledger before it is rolled over, whatever its size; 0 = no minimum.",
        unit="minutes",
        origin=PULSAR_SAME,
        ge=0,
    )
    managedLedgerMaxLedgerRolloverTimeMinutes: int = key(
        240,
        ROLLOVER,
        "Age at which a ledger holding entries is rolled over even if it is not full.",
        unit="minutes",
        origin=PULSAR_SAME,
        gt=0,
    )

    managedLedgerCacheSizeMB: int = key(
        64,
        CACHE,
        "Total size of the broker entry cache (all topics); 0 disables caching, so every "
        "read goes to storage.",
        unit="MiB",
        origin="Pulsar: same key; its default is 20% of the JVM's direct memory with a floor "
        "of 64 MB. brokerlab has no JVM heap to size from, so it uses the floor.",
        ge=0,
    )
    managedLedgerCacheImplementation: str = key(
        DEFAULT_DESIGN,
        CACHE,
        "The live cache design (broker.cache.designs.DESIGNS): pip430 (PIP-430: per-ledger "
        "range caches, one global removal queue, expected read counts), legacy (the "
        "per-ledger design PIP-430 replaced), segmented (PIP-174's broker-wide ring of "
        "segments).",
        choices=tuple(DESIGNS),
        pattern_from_choices=False,  # _registered_design below names them on a bad value
        origin=BROKERLAB_ONLY,
    )
    brokerlabShadowCacheImplementations: str = key(
        "none",
        CACHE,
        "Other designs to run as shadows beside the live cache: each is another design run "
        "on the same cache events, holding sizes only, so its hits and misses are what that "
        "design would have served and read from storage on this run. They show under "
        '"shadows" in GET /admin/v2/broker-stats/cache. Comma-separated, e.g. '
        "legacy,segmented, or none.",
        unit="design names",
        origin=BROKERLAB_ONLY,
    )
    managedLedgerCacheEvictionWatermark: float = key(
        0.9,
        CACHE,
        "A size eviction (which starts above 0.98 x the cache size) frees down to this share "
        "of the cache size.",
        unit="fraction of managedLedgerCacheSizeMB",
        origin=PULSAR_SAME,
        gt=0,
        lt=1,
    )
    managedLedgerCacheEvictionIntervalMs: int = key(
        10,
        CACHE,
        "Period of the timestamp eviction pass.",
        unit="ms",
        origin=PULSAR_SAME,
        gt=0,
    )
    managedLedgerCacheEvictionTimeThresholdMillis: int = key(
        1000,
        CACHE,
        "Time to live of a cache entry: the timestamp pass removes (or, pip430, requeues) "
        "entries older than this.",
        unit="ms",
        origin=PULSAR_SAME,
        gt=0,
    )
    cacheEvictionByExpectedReadCount: bool = key(
        True,
        CACHE,
        "pip430: count expected reads per entry (active cursors that will read it) and "
        "prefer to keep entries that still have some.",
        origin=PULSAR_SAME,
    )
    managedLedgerCacheEvictionExtendTTLOfEntriesWithRemainingExpectedReadsMaxTimes: int = key(
        5,
        CACHE,
        "pip430: how many times an entry with remaining expected reads gets another TTL "
        "instead of being evicted.",
        unit="count",
        origin=PULSAR_SAME,
        ge=0,
    )
    managedLedgerCacheEvictionExtendTTLOfRecentlyAccessed: bool = key(
        False,
        CACHE,
        "pip430: give an entry read since the last eviction check another TTL (LRU-like).",
        origin="Pulsar: same key; false since Pulsar 5.0 (it was true in 4.2).",
    )
    managedLedgerCacheCopyEntries: bool = key(
        False,
        CACHE,
        "Cache an owned copy of each payload (exact memory accounting) rather than a view of "
        "the buffer it arrived in (no copy, but a view can pin a larger buffer).",
        origin=PULSAR_SAME,
    )
    managedLedgerContinueCachingAddedEntriesAfterLastActiveCursorLeavesMillis: int = key(
        -1,
        CACHE,
        "pip430: keep caching added entries this long after the last active cursor left "
        "(and after the topic loads); -1 means 2 x "
        "managedLedgerCacheEvictionTimeThresholdMillis.",
        unit="ms",
        origin="Pulsar: same key; its default is 2 x the TTL.",
        ge=-1,
    )
    cacheEvictionByMarkDeletedPosition: bool = key(
        False,
        CACHE,
        "legacy: invalidate cached entries up to the slowest cursor's mark-delete position "
        "instead of its read position.",
        origin=PULSAR_SAME,
    )
    managedLedgerCursorBackloggedThreshold: int = key(
        1000,
        CACHE,
        "legacy: a cursor more than this many entries behind the tail is backlogged, not "
        "active, and does not hold entries in the cache.",
        unit="entries",
        origin=PULSAR_SAME,
        ge=0,
    )
    managedLedgerMinimumBacklogCursorsForCaching: int = key(
        0,
        CACHE,
        "legacy backlog caching: cache what backlogged cursors read when at least this many "
        "of them are within managedLedgerMaxBacklogBetweenCursorsForCaching of each other; "
        "0 off.",
        unit="cursors",
        origin=PULSAR_SAME,
        ge=0,
    )
    managedLedgerMinimumBacklogEntriesForCaching: int = key(
        1000,
        CACHE,
        "legacy backlog caching: a cursor counts only with at least this much backlog.",
        unit="entries",
        origin=PULSAR_SAME,
        ge=0,
    )
    managedLedgerMaxBacklogBetweenCursorsForCaching: int = key(
        1000,
        CACHE,
        "legacy backlog caching: cursors at most this far apart count together.",
        unit="entries",
        origin=PULSAR_SAME,
        ge=0,
    )
    managedLedgerCacheSegments: int = key(
        0,
        CACHE,
        "segmented: number of segments in the ring; 0 means max(2, cache size / 1 GiB), the "
        "rule of the PIP-174 proposal.",
        unit="segments",
        origin="brokerlab only (PIP-174 was never merged and has no key).",
        ge=0,
    )
    brokerlabCacheEntryLengthBytes: int = key(
        0,
        CACHE,
        "The size every entry counts as in the cache (and its trace), whatever its payload; "
        "0 counts the payload. Pulsar's tests inject an EntryLengthFunction to this end: PR "
        "#24623's rolling-restart test counts its 8-byte messages as 8 KiB entries.",
        unit="bytes",
        origin=BROKERLAB_ONLY,
        ge=0,
        le=2_147_483_647,
    )

    managedLedgerOffloadThresholdInBytes: int = key(
        -1,
        TIERED,
        "Offload the closed ledgers of a topic to the tiered store (stream set objects) once "
        "it holds more than this in the bookie; several topics' ledgers share one object. "
        "-1 means only on request (PUT .../offload).",
        unit="bytes",
        origin=PULSAR_SAME,
        ge=-1,
    )
    managedLedgerOffloadDeletionLagMs: int = key(
        14400000,
        TIERED,
        "Delete the bookie copy of an offloaded ledger this long after its offload (reads "
        "go to the tiered store as soon as a ledger is offloaded).",
        unit="ms",
        origin="Pulsar: same key and default (4 hours).",
        ge=0,
    )

    managedLedgerMaxReadsInFlightSizeInMB: int = key(
        0,
        READS_IN_FLIGHT,
        "Most bytes of reads in flight at once in this broker, each read estimated before it "
        "starts (the ledger's mean entry size + 64 bytes per entry), cache hits included; a "
        "read that finds too few waits in one first-come queue. 0 = no limit.",
        unit="MiB",
        origin="Pulsar: same key; default 0 in 4.1 (5.0 sets a share of direct memory, which "
        "brokerlab does not have).",
        ge=0,
    )
    managedLedgerMaxReadsInFlightPermitsAcquireTimeoutMillis: int = key(
        60_000,
        READS_IN_FLIGHT,
        "How long a read waits for those permits before it fails (its dispatcher retries).",
        unit="ms",
        origin=PULSAR_SAME,
        ge=0,
    )
    managedLedgerMaxReadsInFlightPermitsAcquireQueueSize: int = key(
        50_000,
        READS_IN_FLIGHT,
        "Most reads waiting for those permits; one more fails at once.",
        unit="reads",
        origin=PULSAR_SAME,
        ge=0,
    )

    dispatcherMaxReadBatchSize: int = key(
        100,
        DISPATCH,
        "Most entries a subscription's dispatcher reads from the ledger (cache or storage) "
        "in one read.",
        unit="entries",
        origin=PULSAR_SAME,
        gt=0,
    )
    maxUnackedMessagesPerConsumer: int = key(
        50000,
        DISPATCH,
        "Shared and Key_Shared subscriptions: a consumer with this many unacknowledged "
        "messages gets no more until it acknowledges some; 0 = no limit.",
        unit="messages",
        origin=PULSAR_SAME,
        ge=0,
    )
    maxUnackedMessagesPerSubscription: int = key(
        200000,
        DISPATCH,
        "Shared and Key_Shared subscriptions: dispatch to the whole subscription pauses "
        "while it has this many unacknowledged messages; 0 = no limit.",
        unit="messages",
        origin="Pulsar: same key and default (4 x per consumer).",
        ge=0,
    )
    maxUnwrittenBytesPerConsumer: int = key(
        4194304,
        DISPATCH,
        "Every subscription type and front end: a consumer gets no more entries while the "
        "broker holds this many bytes handed to it and not yet written to its client (an "
        "HTTP or WebSocket consumer's receiver queue, a binary connection's unsent output); "
        "the dispatcher reads about the room left (in entries of the consumer's average "
        "size, at least one). What a client that stops reading costs the broker: about this "
        "plus one entry per consumer. 0 = no limit.",
        unit="bytes",
        origin="brokerlab only: Pulsar bounds this per connection by its channel's write "
        "buffer water marks and per read by dispatcherMaxReadSizeBytes (5 MB).",
        ge=0,
    )
    keySharedLookAheadMsgInReplayThresholdPerConsumer: int = key(
        4000,
        DISPATCH,
        "Key_Shared: the dispatcher stops reading new entries while the replay queue holds "
        "min(this x consumers, keySharedLookAheadMsgInReplayThresholdPerSubscription) "
        "messages, so a stuck consumer cannot make the broker read the whole backlog ahead.",
        unit="messages per consumer",
        origin="Pulsar: same key; 4000 is the figure of Pulsar 5.0's documentation.",
        gt=0,
    )
    keySharedLookAheadMsgInReplayThresholdPerSubscription: int = key(
        40000,
        DISPATCH,
        "Key_Shared: the subscription-wide bound of the look-ahead above.",
        unit="messages",
        origin="Pulsar: same key; 40000 is the figure of Pulsar 5.0's documentation.",
        gt=0,
    )
    consumerIdleTimeoutMs: int = key(
        30000,
        DISPATCH,
        "A consumer that has not polled for this long is closed as if it had disconnected; "
        "its unacknowledged messages go back to the subscription.",
        unit="milliseconds",
        origin="brokerlab only (HTTP consumers have no connection whose loss would tell the "
        "broker).",
        gt=0,
    )

    delayedDeliveryEnabled: bool = key(
        True,
        DELAYED,
        "Hold messages with a deliver-at time on Shared and Key_Shared subscriptions until "
        "they are due. Off: they are delivered at once.",
        origin=PULSAR_SAME,
    )
    delayedDeliveryTrackerFactoryClassName: str = key(
        IN_MEMORY_FACTORY,
        DELAYED,
        "The delayed-message index: the in-memory tracker (deliver-at times kept to the "
        "largest power of two not above the tick time; stops reading new entries while "
        "delayedDeliveryFixedDelayDetectionLookahead messages of one fixed delay wait) or "
        "the bucket tracker (exact times, no such pause). Neither is durable here: after "
        "a restart the subscription reads its backlog again and holds what is still "
        "delayed (Pulsar's bucket tracker also writes snapshot ledgers, brokerlab does "
        "not).",
        origin=PULSAR_SAME,
        choices=TRACKER_FACTORIES,
        pattern_from_choices=False,
    )
    delayedDeliveryTickTimeMillis: int = key(
        1000,
        DELAYED,
        "The delayed-delivery timer fires at most once per tick per subscription; unless "
        "isDelayedDeliveryDeliverAtTimeStrict, a message may be delivered up to one tick "
        "before its time.",
        unit="milliseconds",
        origin=PULSAR_SAME,
        gt=0,
    )
    isDelayedDeliveryDeliverAtTimeStrict: bool = key(
        False,
        DELAYED,
        "Never deliver a delayed message before its deliver-at time (it may then be late "
        "by up to the tick time). False: up to one tick early.",
        origin=PULSAR_SAME,
    )
    delayedDeliveryFixedDelayDetectionLookahead: int = key(
        50000,
        DELAYED,
        "In-memory tracker: with this many delayed messages held, all sent in deliver-at "
        "order (a fixed delay) and none due, the subscription stops reading new entries "
        "until some are due. 0: never pause.",
        unit="messages",
        origin=PULSAR_SAME,
        ge=0,
    )
    delayedDeliveryMaxDelayInMillis: int = key(
        0,
        DELAYED,
        "A message whose deliver-at time is further than this after its publish time is "
        "refused (NotAllowedError on the binary protocol, send-error:8 over WebSocket, 400 "
        "for HTTP produce). 0: no limit.",
        unit="milliseconds",
        origin=PULSAR_SAME,
        ge=0,
    )

    brokerMaxConnections: int = key(
        0,
        LIMITS,
        "Most binary-protocol connections; a connection over it is closed at accept.",
        unit="connections; 0 = no limit",
        origin=PULSAR_SAME,
        ge=0,
    )
    brokerMaxConnectionsPerIp: int = key(
        0,
        LIMITS,
        "Most binary-protocol connections from one client address; more are closed at accept.",
        unit="connections; 0 = no limit",
        origin=PULSAR_SAME,
        ge=0,
    )
    brokerlabMaxPendingRequestsPerConnection: int = key(
        5000,
        LIMITS,
        "Most requests of one binary-protocol connection waiting for their answer "
        "(PRODUCER, SUBSCRIBE, PARTITIONED_METADATA, SEEK, schema and other requests; "
        "not acks, which a client may send faster than cursor writes complete): a "
        "connection that sends one more is closed, its "
        "requests cancelled, and nothing of it served. A flood of requests cannot hold "
        "the broker; a client keeps far fewer in flight (Pulsar's clients at most "
        "5,000 lookups per connection; brokerlab's load generator opens 64 producers or "
        "subscriptions at a time).",
        unit="requests; 0 = no limit",
        origin="brokerlab only (Pulsar has no such bound; its clients bound their own "
        "pending lookups).",
        ge=0,
    )
    brokerlabMaxProducersPerConnection: int = key(
        20000,
        LIMITS,
        "Most producers one binary-protocol connection holds (those being created "
        "included): a connection that asks for one more is closed, not served, and its "
        "producers and consumers let go. A PRODUCER repeated for a producer it has is "
        "answered again, as always. Each producer costs the broker memory and its "
        "hang-up time, so one client cannot open them without end; the many-topics "
        "preset over the binary protocol opens 10,000 on one connection.",
        unit="producers; 0 = no limit",
        origin="brokerlab only (Pulsar bounds producers per topic, maxProducersPerTopic, "
        "not per connection).",
        ge=0,
    )
    brokerlabMaxConsumersPerConnection: int = key(
        20000,
        LIMITS,
        "Most consumers one binary-protocol connection holds (those being subscribed "
        "included): a connection that asks for one more is closed, not served, as with "
        "brokerlabMaxProducersPerConnection. A SUBSCRIBE repeated for a consumer it has is "
        "answered again.",
        unit="consumers; 0 = no limit",
        origin="brokerlab only (Pulsar bounds consumers per topic and subscription, "
        "maxConsumersPerTopic and maxConsumersPerSubscription, not per connection).",
        ge=0,
    )
    maxConcurrentLookupRequest: int = key(
        50000,
        LIMITS,
        "Most lookup requests (PARTITIONED_METADATA; LOOKUP is answered at once here) "
        "being answered at once on the binary protocol, all connections together; one "
        "more is answered TooManyRequests, and the client retries it.",
        unit="requests",
        origin=PULSAR_SAME,
        gt=0,
    )
    maxConcurrentTopicLoadRequest: int = key(
        5000,
        LIMITS,
        "Most topic loads under way at once (reading a topic's ledgers and cursors from "
        "storage); more wait their turn, first come first served, as in Pulsar. Requests "
        "for a topic being loaded join its load and take no turn of their own.",
        unit="loads",
        origin=PULSAR_SAME,
        gt=0,
    )
    maxPendingPublishRequestsPerConnection: int = key(
        1000,
        LIMITS,
        "Most SENDs of one binary connection waiting for their receipt: at this many the "
        "broker stops reading the connection, and reads it again once half of them are "
        "answered (the client's sends wait in its socket). 0: no limit.",
        unit="messages",
        origin="Pulsar: same key and default (ServerCnx's pending send requests).",
        ge=0,
    )
    maxMessagePublishBufferSizeInMB: int = key(
        64,
        LIMITS,
        "Bytes of SENT entries waiting for their receipt, all binary connections together: "
        "past it the broker stops reading every binary connection, and reads them again "
        "once it is down to half. 0: no limit.",
        unit="MiB",
        origin="Pulsar: same key; its default is half the JVM's direct memory, at least 64, "
        "divided among its IO threads (each thread's connections paused together); "
        "brokerlab has one event loop, so the whole budget is its, and the default is "
        "Pulsar's floor.",
        ge=0,
    )
    maxHttpServerConnections: int = key(
        16384,
        LIMITS,
        "Most HTTP connections (WebSocket included); a connection over it is answered 429 "
        "too-many-requests and closed, its request unread. 0: no limit. The broker needs a "
        "file descriptor for each (ulimit -n above it, with room for its files).",
        unit="connections",
        origin="Pulsar: same key; its default, 2048, is for its admin web server, while here "
        "HTTP carries every long-polling consumer, one connection each: the many-topics "
        "preset opens up to 10,392 (10,000 consumers and the load generator's 64 spare, 256 "
        "produce and 72 admin connections), so the default leaves room above that.",
        ge=0,
    )
    brokerlabHttpMaxConnectionsPerIp: int = key(
        0,
        LIMITS,
        "Most HTTP connections from one client address (429 and closed, as above), so one "
        "client cannot take every file descriptor.",
        unit="connections; 0 = no limit",
        origin=BROKERLAB_ONLY,
        ge=0,
    )
    httpServerIdleTimeout: int = key(
        30000,
        LIMITS,
        "An HTTP connection that has not sent a complete request head within this long of "
        "opening, or of its last response, is closed: idle keep-alive connections and "
        "slowloris clients alike (bytes of an incomplete head do not extend it). So is one "
        "whose request body sends nothing for this long (as Jetty's idle timeout in Pulsar); "
        "a body that keeps coming too slowly is cut by brokerlabHttpMinRequestDataRate.",
        unit="milliseconds",
        origin=PULSAR_SAME,
        gt=0,
    )
    brokerlabHttpMinRequestDataRate: int = key(
        240,
        LIMITS,
        "Slowest a request body may come: one still incomplete that received fewer than "
        "this many bytes a second over the last httpServerIdleTimeout (looked at every "
        "quarter of it) is answered 408 request-timeout and its connection closed, nothing "
        "of it handled. A body trickled a byte at a time cannot hold a connection. 0: no "
        "minimum (only a body silent for httpServerIdleTimeout is cut).",
        unit="bytes per second",
        origin="brokerlab only: Jetty's HttpConfiguration.minRequestDataRate, which Pulsar "
        "leaves off (0) and does not expose; the default, 240, is ASP.NET Kestrel's "
        "MinRequestBodyDataRate.",
        ge=0,
    )
    maxProducersPerTopic: int = key(
        0,
        LIMITS,
        "Most producers of a topic, binary and WebSocket ones alike: beyond it the binary "
        "protocol answers ProducerBusy and a WebSocket producer's handshake 409 conflict (as "
        "Pulsar's WebSocket service). HTTP produce has no producer and is not counted.",
        unit="producers; 0 = no limit",
        origin=PULSAR_SAME,
        ge=0,
    )
    maxConsumersPerTopic: int = key(
        0,
        LIMITS,
        "Most consumers of a topic: HTTP 409 conflict, binary protocol ConsumerBusy.",
        unit="consumers; 0 = no limit",
        origin=PULSAR_SAME,
        ge=0,
    )
    maxConsumersPerSubscription: int = key(
        0,
        LIMITS,
        "Most consumers of a subscription: HTTP 409 conflict, binary ConsumerBusy.",
        unit="consumers; 0 = no limit",
        origin=PULSAR_SAME,
        ge=0,
    )
    maxSubscriptionsPerTopic: int = key(
        0,
        LIMITS,
        "Most subscriptions of a topic: HTTP 409 conflict, binary NotAllowedError.",
        unit="subscriptions; 0 = no limit",
        origin=PULSAR_SAME,
        ge=0,
    )
    maxTopicsPerNamespace: int = key(
        0,
        LIMITS,
        "Most topics of a namespace, every partition counted: creating one more (produce, "
        "consumer or lookup auto-creation), or a partitioned topic whose partitions do not "
        "all fit, answers HTTP 409 conflict, binary NotAllowedError. Raising a partitioned "
        "topic's count is not checked, as in Pulsar.",
        unit="topics; 0 = no limit",
        origin=PULSAR_SAME,
        ge=0,
    )

    brokerDeleteInactiveTopicsEnabled: bool = key(
        True,
        INACTIVE,
        "Delete inactive topics: no producer or consumer connected, nothing produced, acked "
        "or subscribed for brokerDeleteInactiveTopicsMaxInactiveDurationSeconds, and per "
        "brokerDeleteInactiveTopicsMode no subscriptions (or none with a backlog). A topic "
        "with a subscription that has a backlog is never deleted. The next produce creates "
        "it again (with allowAutoTopicCreation).",
        origin=PULSAR_SAME,
    )
    brokerDeleteInactiveTopicsFrequencySeconds: int = key(
        60,
        INACTIVE,
        "How often inactive topics are looked for (deleted, or unloaded: see below).",
        unit="seconds",
        origin=PULSAR_SAME,
        gt=0,
    )
    brokerDeleteInactiveTopicsMode: str = key(
        "delete_when_no_subscriptions",
        INACTIVE,
        "Which inactive topics are deleted. delete_when_no_subscriptions: topics with no "
        "subscriptions (and no producer); delete_when_subscriptions_caught_up: topics whose "
        "subscriptions have no backlog and no client (they are deleted with the topic).",
        choices=("delete_when_no_subscriptions", "delete_when_subscriptions_caught_up"),
        origin=PULSAR_SAME,
    )
    brokerDeleteInactiveTopicsMaxInactiveDurationSeconds: int = key(
        -1,
        INACTIVE,
        "How long a topic must stay inactive before it is deleted or unloaded; -1: the "
        "frequency above.",
        unit="seconds",
        origin="Pulsar: same key; Pulsar leaves it unset, which means the frequency.",
        ge=-1,
    )
    brokerlabUnloadInactiveTopicsEnabled: bool = key(
        True,
        INACTIVE,
        "Unload inactive topics that are not deleted (deletion off, or the mode keeps them), "
        "as a bundle unload would: cursors and ledger closed durably, memory freed; the next "
        "produce, consumer or admin call loads the topic again from storage.",
        origin="brokerlab only (Pulsar keeps idle topics loaded; its load manager moves bundles).",
    )

    defaultRetentionTimeInMinutes: int = key(
        0,
        POLICIES,
        "How long a ledger every subscription has consumed is kept before it is deleted "
        "(-1: forever). 0 and 0 below: deleted as soon as consumed, as Pulsar. A topic with no "
        "subscription keeps everything under these defaults (brokerlab keeps what nobody "
        "subscribed to); a retention policy set on its namespace or on it applies to it too.",
        unit="minutes",
        origin="Pulsar: same key and default (Pulsar also trims topics with no subscription).",
        ge=-1,
    )
    defaultRetentionSizeInMB: int = key(
        0,
        POLICIES,
        "Size up to which consumed ledgers are kept (-1: no limit); a consumed ledger goes once "
        "either limit says so.",
        unit="MB",
        origin=PULSAR_SAME,
        ge=-1,
    )
    ttlDurationDefaultInSeconds: int = key(
        0,
        POLICIES,
        "Message TTL: messages older than this are acknowledged on every subscription by the "
        "periodic check below (0: no TTL).",
        unit="seconds",
        origin=PULSAR_SAME,
        ge=0,
    )
    messageExpiryCheckIntervalInMinutes: int = key(
        5,
        POLICIES,
        "How often the message TTL is applied to the loaded topics (on the broker's clock).",
        unit="minutes",
        origin=PULSAR_SAME,
        gt=0,
    )
    backlogQuotaCheckEnabled: bool = key(
        True,
        POLICIES,
        "Enforce backlog quotas periodically (producers are also checked when they connect).",
        origin=PULSAR_SAME,
    )
    backlogQuotaCheckIntervalInSeconds: int = key(
        60,
        POLICIES,
        "How often backlog quotas are checked on the loaded topics.",
        unit="seconds",
        origin=PULSAR_SAME,
        gt=0,
    )
    backlogQuotaDefaultLimitBytes: int = key(
        -1,
        POLICIES,
        "Default destination_storage backlog quota: bytes of backlog of the slowest "
        "subscription (-1: none).",
        unit="bytes",
        origin=PULSAR_SAME,
        ge=-1,
    )
    backlogQuotaDefaultLimitSecond: int = key(
        -1,
        POLICIES,
        "Default message_age backlog quota: age of the oldest unacknowledged message (-1: "
        "none). brokerlab dates a message by the creation of its ledger (Pulsar's non-precise "
        "check dates it by its ledger's close).",
        unit="seconds",
        origin=PULSAR_SAME,
        ge=-1,
    )
    backlogQuotaDefaultRetentionPolicy: str = key(
        "producer_request_hold",
        POLICIES,
        "What an exceeded default quota does: producer_request_hold (producers are "
        "disconnected and refused with ProducerBlockedQuotaExceededError, which clients retry, "
        "holding their sends), producer_exception (refused with "
        "ProducerBlockedQuotaExceededException: sends fail), consumer_backlog_eviction (the "
        "slowest subscriptions' oldest messages are acknowledged).",
        origin=PULSAR_SAME,
        choices=("producer_request_hold", "producer_exception", "consumer_backlog_eviction"),
    )
    schemaCompatibilityStrategy: str = key(
        "FULL",
        SCHEMA,
        "How a new schema of a topic is checked against the ones it has: BACKWARD (the new "
        "schema reads data written with the latest), FORWARD (the latest reads the new), "
        "FULL (both), their _TRANSITIVE forms (against every version, not just the latest), "
        "ALWAYS_COMPATIBLE (no check), ALWAYS_INCOMPATIBLE (no change). Avro and JSON schemas "
        "are checked by Avro's schema resolution rules; other types only by "
        "ALWAYS_INCOMPATIBLE; a change of type is always refused (but with ALWAYS_COMPATIBLE).",
        origin=PULSAR_SAME,
        choices=STRATEGIES,
    )
    isAllowAutoUpdateSchemaEnabled: bool = key(
        True,
        SCHEMA,
        "Whether a producer may add a new (compatible) schema version to its topic; when false "
        "a producer's schema must be one the topic has (an admin registers new ones), else it "
        "is refused with IncompatibleSchema, even on a topic without a schema.",
        origin=PULSAR_SAME,
    )
    isSchemaValidationEnforced: bool = key(
        False,
        SCHEMA,
        "Refuse producers without a schema (bytes) on topics that have one (IncompatibleSchema).",
        origin=PULSAR_SAME,
    )

    statsUpdateFrequencyInSecs: int = key(
        60,
        STATS,
        "Period over which topic stats and /metrics rates (msgRateIn, "
        "pulsar_ml_cache_hits_rate, ...) are computed and refreshed. The rules before "
        "PIP-430 (legacy, and pip430 with cacheEvictionByExpectedReadCount=false) also "
        "re-check every cursor's backlog at this period (Pulsar's checkBackloggedCursors). "
        "The dashboard computes its own rates from counters, so it moves whatever this is.",
        unit="seconds",
        origin=PULSAR_SAME,
        ge=1,
    )
    exposeTopicLevelMetricsInPrometheus: bool = key(
        True,
        STATS,
        "Topic-labelled series in GET /metrics (backlog, rates, storage size and replay "
        "queue per topic). Turn off for brokers with many topics: the scrape grows with "
        "them.",
        origin=PULSAR_SAME,
    )
    brokerlabMetricsMaxTopics: int = key(
        1000,
        STATS,
        "With topic-level metrics, most topics given their own series: those with the "
        "largest backlogs (ties: the larger storage size). The others are summed into one "
        'series per metric labelled topic="_other" (brokerlab_metrics_topics_aggregated '
        "says how many), so a scrape of 50,000 topics stays small and fast. 0: every topic "
        "is aggregated.",
        unit="topics",
        origin="brokerlab only (Pulsar has no cap).",
        ge=0,
    )
    brokerlabDashboardSampleIntervalMs: int = key(
        1000,
        STATS,
        "Period at which each broker samples what its dashboard (GET /dashboard) charts into "
        "its history (GET /dashboard/history), from its start: a page opened at any time "
        "draws the run from the beginning. On the broker's clock (virtual time in a virtual "
        "run).",
        unit="ms",
        origin=BROKERLAB_ONLY,
        ge=100,
    )
    brokerlabDashboardHistoryMinutes: int = key(
        15,
        STATS,
        "The dashboard history keeps every sample of the last this many minutes. Before "
        "that it keeps one sample per 10 s, and at most "
        "brokerlabDashboardHistoryOlderSamples of them: when they would be more, it keeps "
        "one per 20 s, then 40 s, and so on (the run's first sample always stays), so the "
        "whole run fits in bounded memory (about 0.3 KB a sample).",
        unit="minutes",
        origin=BROKERLAB_ONLY,
        ge=0,
    )
    brokerlabDashboardHistoryOlderSamples: int = key(
        600,
        STATS,
        "The most samples the dashboard history keeps from before its last "
        "brokerlabDashboardHistoryMinutes (see there).",
        unit="samples",
        origin=BROKERLAB_ONLY,
        ge=4,
    )

    brokerlabTraceDir: str = key(
        "none",
        TRACES,
        "Write an access trace into this directory: Parquet files of what the entry cache "
        "was asked (adds, reads with hit or miss, releases, replay adds, invalidations, "
        "evictions, cursor activations; docs/trace-format.md), or none for no trace. "
        "brokerlab loadgen --trace sets it for a broker it starts.",
        unit="a directory path",
        origin=BROKERLAB_ONLY,
        min_length=1,
    )
    brokerlabTraceRollEvents: int = key(
        100_000,
        TRACES,
        "Events per trace file; the buffer of one file is handed to a writer thread when full.",
        unit="events",
        origin=BROKERLAB_ONLY,
        ge=1,
    )
    brokerlabTraceMaxPendingFiles: int = key(
        4,
        TRACES,
        "Trace files waiting for the writer thread before new events are dropped (and "
        "counted in brokerlab_trace_dropped_events_total and GET "
        "/admin/v2/broker-stats/trace).",
        unit="files",
        origin=BROKERLAB_ONLY,
        ge=1,
    )

    @field_validator("managedLedgerCacheImplementation")
    @classmethod
    def _registered_design(cls, value: str) -> str:
        if value not in DESIGNS:
            raise ValueError(f"one of {', '.join(DESIGNS)}")
        return value

    @field_validator("delayedDeliveryTrackerFactoryClassName")
    @classmethod
    def _tracker_factory(cls, value: str) -> str:
        if value not in TRACKER_FACTORIES:
            raise ValueError(f"one of {', '.join(TRACKER_FACTORIES)}")
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
    def _water_marks_in_order(self) -> BrokerConfig:
        if self.pulsarChannelWriteBufferLowWaterMark > self.pulsarChannelWriteBufferHighWaterMark:
            raise ValueError(
                "pulsarChannelWriteBufferLowWaterMark "
                f"({self.pulsarChannelWriteBufferLowWaterMark}) must not be above "
                "pulsarChannelWriteBufferHighWaterMark "
                f"({self.pulsarChannelWriteBufferHighWaterMark}), as Netty requires"
            )
        return self

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
