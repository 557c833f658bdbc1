"""The broker, assembled: a cluster of one or more brokers over one storage.

Everything a broker is made of is built here, outside the front ends: the shared
storage (bookie, metadata store, tiered store) and ownership table, and per broker its
cache (live design, shadows, trace), its :class:`~broker.dispatch.service.BrokerService`
and its binary-protocol listener. HTTP apps are front ends over a node
(``broker.http.app``).

Brokers of a cluster are instances in one process, each with its own cache, service,
counters and ports, over one bookie and metadata store, as Pulsar's brokers share one
BookKeeper and one metadata store. One process was chosen over one process per broker
because the storage is in-process (RocksDB allows one process per directory) and this
machine has two cores: docs/benchmarks.md ("Several brokers: one process or one per
broker") has the measurement.

A restart ends a broker's incarnation: a graceful one unloads its bundles one by one
(topics closed, clients told to look up again) and hands them over; a kill drops
everything at once, leaves ledgers open (the next owner recovers them) and keeps the
bundles owned until the metadata store's session expires. The next incarnation starts
with an empty cache. Its cache counters continue from the previous ones, so a run's
totals are whole (in Pulsar a restarted process starts from zero).
"""

from __future__ import annotations

import asyncio
import logging
import pathlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from broker.cache import CacheEventStream, create_stream
from broker.clock import Clock, EventClock, SystemClock
from broker.config import BrokerConfig, cache_config, shadow_designs, trace_dir
from broker.dashboard import DashboardSampler, SeriesHistory
from broker.dispatch.data_format import check_data_format
from broker.dispatch.deduplication import DeduplicationConfig
from broker.dispatch.delayed import BUCKET_FACTORY, DelayedDeliveryConfig
from broker.dispatch.dispatcher import DispatchConfig
from broker.dispatch.errors import ConflictError, InvalidRequestError, UnavailableError
from broker.dispatch.names import TopicName
from broker.dispatch.ownership import BrokerAddress, Ownership
from broker.dispatch.partitions import PartitionedTopics, PartitionsConfig
from broker.dispatch.policies import PolicyStore
from broker.dispatch.schema_registry import SchemaRegistry
from broker.dispatch.service import BrokerService
from broker.dispatch.service_config import ServiceConfig
from broker.ledger.managed_ledger import ManagedLedgerConfig
from broker.protocol.connection import Connection
from broker.protocol.server import ProtocolServer
from broker.tasks import TaskOwner
from storage_stub.bookie import Storage, open_storage
from storage_stub.bookie.api import BookieError
from storage_stub.config import StorageConfig

if TYPE_CHECKING:
    from broker.dispatch.topic import PersistentTopic
    from broker.trace.recorder import TraceRecorder

log = logging.getLogger(__name__)

#: the kinds of restart: unload and hand over, or die at once
RESTART_MODES = ("graceful", "kill")


@dataclass(frozen=True, slots=True)
class Settings:
    broker: BrokerConfig
    storage: StorageConfig
    data_dir: pathlib.Path | None


def service_config(config: BrokerConfig) -> ServiceConfig:
    return ServiceConfig(
        allow_auto_topic_creation=config.allowAutoTopicCreation,
        consumer_idle_timeout_ms=config.consumerIdleTimeoutMs,
        stats_update_frequency_s=config.statsUpdateFrequencyInSecs,
        cache_eviction_interval_ms=config.managedLedgerCacheEvictionIntervalMs,
        offload_threshold_bytes=config.managedLedgerOffloadThresholdInBytes,
        offload_deletion_lag_ms=config.managedLedgerOffloadDeletionLagMs,
        ledger=ManagedLedgerConfig(
            max_entries_per_ledger=config.managedLedgerMaxEntriesPerLedger,
            max_size_per_ledger_bytes=config.managedLedgerMaxSizePerLedgerMbytes * 1024 * 1024,
            min_rollover_ms=config.managedLedgerMinLedgerRolloverTimeMinutes * 60_000,
            max_rollover_ms=config.managedLedgerMaxLedgerRolloverTimeMinutes * 60_000,
        ),
        dispatch=DispatchConfig(
            max_read_batch_size=config.dispatcherMaxReadBatchSize,
            max_unacked_per_consumer=config.maxUnackedMessagesPerConsumer or 2**62,
            max_unacked_per_subscription=config.maxUnackedMessagesPerSubscription or 2**62,
            max_unwritten_bytes_per_consumer=config.maxUnwrittenBytesPerConsumer,
            max_message_size=config.maxMessageSize,
            key_shared_look_ahead_per_consumer=config.keySharedLookAheadMsgInReplayThresholdPerConsumer,
            key_shared_look_ahead_per_subscription=(
                config.keySharedLookAheadMsgInReplayThresholdPerSubscription
            ),
            delayed=DelayedDeliveryConfig(
                enabled=config.delayedDeliveryEnabled,
                tick_ms=config.delayedDeliveryTickTimeMillis,
                strict=config.isDelayedDeliveryDeliverAtTimeStrict,
                bucket=config.delayedDeliveryTrackerFactoryClassName == BUCKET_FACTORY,
                fixed_delay_lookahead=config.delayedDeliveryFixedDelayDetectionLookahead,
                max_delay_ms=config.delayedDeliveryMaxDelayInMillis,
            ),
        ),
        partitions=PartitionsConfig(
            auto_topic_creation_type=config.allowAutoTopicCreationType,
            default_num_partitions=config.defaultNumPartitions,
            max_num_partitions=config.maxNumPartitionsPerPartitionedTopic,
            partitions_ceiling=config.brokerlabMaxPartitionsCeiling,
            max_topics_per_namespace=config.maxTopicsPerNamespace,
        ),
        cluster_name=config.clusterName,
        deduplication=DeduplicationConfig(
            enabled=config.brokerDeduplicationEnabled,
            entries_interval=config.brokerDeduplicationEntriesInterval,
            max_producers=config.brokerDeduplicationMaxNumberOfProducers,
            inactivity_timeout_s=config.brokerDeduplicationProducerInactivityTimeoutMinutes * 60.0,
            snapshot_interval_s=float(config.brokerDeduplicationSnapshotIntervalSeconds),
        ),
        max_producers_per_topic=config.maxProducersPerTopic,
        max_consumers_per_topic=config.maxConsumersPerTopic,
        max_consumers_per_subscription=config.maxConsumersPerSubscription,
        max_subscriptions_per_topic=config.maxSubscriptionsPerTopic,
        max_concurrent_topic_loads=config.maxConcurrentTopicLoadRequest,
        max_reads_in_flight_bytes=config.managedLedgerMaxReadsInFlightSizeInMB * 1024 * 1024,
        reads_in_flight_timeout_ms=config.managedLedgerMaxReadsInFlightPermitsAcquireTimeoutMillis,
        reads_in_flight_queue_size=config.managedLedgerMaxReadsInFlightPermitsAcquireQueueSize,
        delete_inactive_topics=config.brokerDeleteInactiveTopicsEnabled,
        inactive_topics_frequency_s=config.brokerDeleteInactiveTopicsFrequencySeconds,
        inactive_topics_mode=config.brokerDeleteInactiveTopicsMode,
        inactive_topics_max_inactive_s=(
            None
            if config.brokerDeleteInactiveTopicsMaxInactiveDurationSeconds < 0
            else config.brokerDeleteInactiveTopicsMaxInactiveDurationSeconds
        ),
        unload_inactive_topics=config.brokerlabUnloadInactiveTopicsEnabled,
        retention_time_minutes=config.defaultRetentionTimeInMinutes,
        retention_size_mb=config.defaultRetentionSizeInMB,
        message_ttl_s=config.ttlDurationDefaultInSeconds,
        message_expiry_check_interval_s=config.messageExpiryCheckIntervalInMinutes * 60.0,
        backlog_quota_check_enabled=config.backlogQuotaCheckEnabled,
        backlog_quota_check_interval_s=float(config.backlogQuotaCheckIntervalInSeconds),
        backlog_quota_limit_bytes=config.backlogQuotaDefaultLimitBytes,
        backlog_quota_limit_s=config.backlogQuotaDefaultLimitSecond,
        backlog_quota_policy=config.backlogQuotaDefaultRetentionPolicy,
        schema_compatibility_strategy=config.schemaCompatibilityStrategy,
        allow_auto_update_schema=config.isAllowAutoUpdateSchemaEnabled,
        schema_validation_enforced=config.isSchemaValidationEnforced,
    )


def http_url(address: str, port: int) -> str:
    """``http://address:port``, an IPv6 address in brackets."""
    host = f"[{address}]" if ":" in address else address
    return f"http://{host}:{port}"


class _CurrentClock:
    """The clock of a broker's trace: the event clock of its current cache, whichever
    incarnation that is (each incarnation's stream has its own)."""

    __slots__ = ("target",)

    def __init__(self, target: Clock) -> None:
        self.target = target

    def monotonic_ns(self) -> int:
        return self.target.monotonic_ns()

    def wall_ms(self) -> int:
        return self.target.wall_ms()


def node_config(config: BrokerConfig, index: int) -> BrokerConfig:
    """Broker ``index``'s configuration: the cluster's, with its own ports (the given
    ports plus the index; 0 and -1 stay: any free port, or off)."""
    if index == 0:
        return config
    web = config.webServicePort
    binary = config.brokerServicePort
    return config.model_copy(
        update={
            "webServicePort": web + index if web > 0 else web,
            "brokerServicePort": binary + index if binary > 0 else binary,
        }
    )


class BrokerNode:
    """One broker of the cluster across its incarnations. ``service`` is None while it
    is down; ``counters`` of its cache continue across restarts."""

    def __init__(self, cluster: Cluster, index: int) -> None:
        self.cluster = cluster
        self.index = index
        self.config = node_config(cluster.settings.broker, index)
        self.settings = Settings(self.config, cluster.settings.storage, cluster.settings.data_dir)
        self.address: BrokerAddress = cluster.ownership.brokers[index]
        self.service: BrokerService | None = None
        self.protocol: ProtocolServer | None = None
        self.incarnation = 0
        self.restarts = 0
        #: "down", "up", "stopping" (a graceful restart's unloads), "restarting"
        self.state = "down"
        self._stream: CacheEventStream | None = None
        self._trace_clock = _CurrentClock(cluster.clock)
        self.trace: TraceRecorder | None = None
        self._binary_port = self.config.brokerServicePort
        config = self.config
        #: what its dashboard charts, over the whole run (restarts included)
        recent_ms = config.brokerlabDashboardHistoryMinutes * 60_000
        self.history = SeriesHistory(
            recent_ms,
            config.brokerlabDashboardHistoryOlderSamples,
            # the samples of that time on their grid, should the clock stand still
            max_recent=recent_ms // config.brokerlabDashboardSampleIntervalMs + 2,
        )
        self.sampler = DashboardSampler(
            self,
            cluster.storage,
            cluster.clock,
            config.brokerlabDashboardSampleIntervalMs,
            self.history,
            config.managedLedgerCacheEvictionWatermark,
        )

    # ------------------------------------------------------------------ state

    def running_service(self) -> BrokerService:
        """The service, or UnavailableError while the broker is down. A broker stopping
        gracefully still serves the topics of the bundles it has not unloaded yet (as
        Pulsar's graceful shutdown unloads bundle by bundle, the others serving until
        their turn); it loads no topic (ServiceNotReady) and a bundle in its unload
        answers ServiceNotReady (the client looks the topic up again)."""
        service = self.service
        if service is None or self.state not in ("up", "stopping"):
            raise UnavailableError(f"broker {self.index} is {self.state}; retry")
        return service

    @property
    def cache_stream(self) -> CacheEventStream | None:
        """The current (or, while down, the last) incarnation's cache events; None
        before the first start."""
        return self._stream

    def describe(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "state": self.state,
            "httpUrl": self.address.http_url,
            "serviceUrl": self.address.service_url,
            "incarnation": self.incarnation,
            "restarts": self.restarts,
            "bundles": [
                f"{namespace}/{bundle}"
                for namespace, bundle in self.cluster.ownership.bundles_of(self.index)
            ],
            "topics": len(self.service.topics) if self.service is not None else 0,
        }

    # ------------------------------------------------------------------ lifecycle

    def _build_stream(self) -> CacheEventStream:
        config = self.config
        settings = cache_config(config)
        directory = trace_dir(config)
        factory = None
        if directory is not None:
            if self.trace is None:
                # pyarrow loads only when tracing
                from broker.trace.recorder import TraceRecorder, trace_meta

                self.trace = TraceRecorder(
                    pathlib.Path(directory),
                    self._trace_clock,
                    config.brokerlabTraceRollEvents,
                    config.brokerlabTraceMaxPendingFiles,
                    meta=trace_meta(
                        config.managedLedgerCacheImplementation,
                        settings,
                        brokers=len(self.cluster.nodes),
                    ),
                    broker=self.index,
                    threaded=self.cluster.threads,
                )
            else:
                self.trace.restart()
            recorder = self.trace

            def factory(event_clock: EventClock) -> TraceRecorder:
                self._trace_clock.target = event_clock
                return recorder

        stream = create_stream(
            config.managedLedgerCacheImplementation,
            settings,
            self.cluster.clock,
            shadow_designs(config),
            factory,
        )
        previous = self._stream
        if previous is not None:
            stream.live.manager.counters.carry_over(previous.live.manager.counters)
            for old, new in zip(previous.shadows, stream.shadows, strict=True):
                new.manager.counters.carry_over(old.manager.counters)
        self._stream = stream
        return stream

    async def start(self) -> None:
        """Start an incarnation: a new cache and service, the binary listener (on the
        port of the previous incarnation, if any), then take bundles."""
        cluster = self.cluster
        cluster.ownership.release_all(self.index)  # a new incarnation owns nothing yet
        storage = cluster.storage
        service = BrokerService(
            cluster.service_config,
            storage.bookie,
            storage.metadata,
            self._build_stream(),
            cluster.clock,
            storage.tiered,
            self.trace,
            cluster.ownership,
            self.index,
            cluster.partitions,
            cluster.policies,
            cluster.schemas,
        )
        self.service = service
        self.incarnation += 1
        service.start()
        if self._binary_port != 0:
            protocol = ProtocolServer(service, self.config, Connection)
            try:
                self._binary_port = await protocol.start(
                    self.config.bindAddress, max(self._binary_port, 0)
                )
            except BaseException:
                await service.close()
                self.service = None
                raise
            self.protocol = protocol
            self.address.service_url = protocol.service_url
        self.state = "up"
        self.address.alive = True

    async def stop(self, mode: str = "graceful") -> None:
        """End this incarnation. ``graceful``: unload bundle by bundle, each handed over
        when its topics are closed; ``kill``: at once, ledgers left open, bundles kept
        until the session expires."""
        service = self.service
        if service is None:
            return
        ownership = self.cluster.ownership
        self.address.alive = False
        service.stopping = True
        if mode == "kill":
            self.state = "down"
            if self.protocol is not None:
                await self.protocol.close()  # connections cut, as a dead process's are
            await service.kill()
            self.cluster.expire_session(self.index)
        else:
            # bundle by bundle, as Pulsar's unloadNamespaceBundlesGracefully: the bundles
            # not yet at their turn go on serving (a broker that refused them all at once
            # stopped every client of its topics for the whole stop, seconds on a busy
            # machine, with nowhere else to go: their bundles were still its own)
            self.state = "stopping"
            for bundle in ownership.bundles_of(self.index):
                ownership.begin_unload(bundle)
                try:
                    await service.unload_bundle(bundle)
                finally:
                    ownership.release(bundle)
            self.state = "down"
            await service.close()
        if self.protocol is not None:
            await self.protocol.close()
            self.protocol = None
        self.service = None

    async def restart(self, mode: str, downtime_s: float) -> None:
        """Stop (``mode``), stay down ``downtime_s`` (the process restarting), start."""
        log.info("broker %d: restart (%s, down %.3f s)", self.index, mode, downtime_s)
        await self.stop(mode)
        self.state = "restarting"
        if downtime_s > 0:
            await asyncio.sleep(downtime_s)
        self.restarts += 1
        await self.start()
        log.info("broker %d: up again (incarnation %d)", self.index, self.incarnation)

    def cache_stats(self) -> dict[str, Any]:
        """This broker's cache (the current incarnation's, counters continued); after a
        kill and before the next start, the last incarnation's."""
        stream = self._stream
        if stream is None:
            raise UnavailableError(f"broker {self.index} has not started")
        return stream.stats()


class ClusterTopics:
    """The topics of every broker of a cluster, each reached at its owner: what the
    cluster's partitioned topics act on (their partitions may live on different
    brokers)."""

    def __init__(self, cluster: Cluster) -> None:
        self._cluster = cluster

    @property
    def topics(self) -> dict[TopicName, PersistentTopic]:
        loaded: dict[TopicName, PersistentTopic] = {}
        for node in self._cluster.nodes:
            if node.service is not None:
                loaded.update(node.service.topics)
        return loaded

    async def get_topic(self, name: TopicName, create: bool) -> PersistentTopic:
        return await self._cluster.service_for(name).get_topic(name, create)

    async def delete_topic(self, name: TopicName, force: bool) -> None:
        await self._cluster.service_for(name).delete_topic(name, force)


class Cluster:
    """``brokers`` brokers over one storage. ``open`` opens the storage and builds the
    nodes; ``start`` starts them; ``close`` stops them gracefully and closes storage."""

    def __init__(
        self,
        settings: Settings,
        clock: Clock | None = None,
        brokers: int = 1,
        seed: int | None = None,
        threads: bool = True,
    ) -> None:
        """``seed``: the storage's latency and fault draws (None: unseeded).
        ``threads``: False on virtual time: nothing the cluster does runs on another
        thread (the trace is written on the loop's), so nothing races the clock."""
        if brokers < 1:
            raise ValueError("a cluster has at least one broker")
        self.settings = settings
        self.seed = seed
        self.threads = threads
        self.clock = clock or SystemClock()
        self.service_config = service_config(settings.broker)
        self.ownership = Ownership(brokers, settings.broker.defaultNumberOfNamespaceBundles)
        self._storage: Storage | None = None
        self.nodes: list[BrokerNode] = []
        self._brokers = brokers
        self._tasks = TaskOwner("cluster")
        self._expiries: dict[int, asyncio.Task[Any]] = {}
        self._restarting: set[int] = set()

    @property
    def storage(self) -> Storage:
        if self._storage is None:
            raise RuntimeError("the cluster is not open")
        return self._storage

    async def open(self) -> None:
        storage = await open_storage(
            self.settings.storage, self.settings.data_dir, seed=self.seed, clock=self.clock
        )
        #: the namespace and topic policies every broker reads, loaded once here
        self.policies = PolicyStore(storage.metadata, self.service_config.cluster_name)
        #: the topics' schemas, one registry for every broker (puts of a topic one at a time)
        self.schemas = SchemaRegistry(storage.metadata)
        try:
            await check_data_format(storage.metadata)
            await self.policies.load()
        except BaseException:
            await storage.close()
            raise
        self._storage = storage
        config = self.service_config
        self.partitions = PartitionedTopics(
            storage.metadata,
            config.partitions,
            ClusterTopics(self),
            config.allow_auto_topic_creation,
        )
        self.nodes = [BrokerNode(self, index) for index in range(self._brokers)]

    async def start(self) -> None:
        """Start every broker, then their dashboard samplers (which run until close)."""
        for node in self.nodes:
            await node.start()
        for node in self.nodes:
            self._tasks.spawn(node.sampler.run(), name=f"dashboard sampler {node.index}")

    async def close(self) -> None:
        await self._tasks.close()
        for node in self.nodes:
            await node.stop("graceful")
        traces = [node.trace for node in self.nodes if node.trace is not None]
        if self._storage is not None:
            try:
                await self._storage.close()
            except (BookieError, OSError) as error:
                # a full disk, say: what was acknowledged is durable already
                log.warning("storage did not close cleanly: %s", error)
        for trace in traces:
            # the last file is written off the event loop
            await asyncio.get_running_loop().run_in_executor(None, trace.close)

    def node(self, index: int) -> BrokerNode:
        if not 0 <= index < len(self.nodes):
            raise InvalidRequestError(
                f"no broker {index}: this cluster has brokers 0..{len(self.nodes) - 1}"
            )
        return self.nodes[index]

    def service_for(self, name: TopicName) -> BrokerService:
        """The running service of the broker owning ``name`` (assigning its bundle if
        it has no owner). UnavailableError while that broker is down."""
        return self.nodes[self.ownership.owner(name).index].running_service()

    def expire_session(self, index: int) -> None:
        """A killed broker's bundles lose their owner once its session expires."""
        delay_s = self.settings.broker.metadataStoreSessionTimeoutMillis / 1000

        async def expire() -> None:
            await asyncio.sleep(delay_s)
            if self.nodes[index].state != "up":
                self.ownership.release_all(index)

        previous = self._expiries.pop(index, None)
        if previous is not None:
            previous.cancel()
        self._expiries[index] = self._tasks.spawn(expire(), name=f"session expiry {index}")

    async def restart(self, index: int, mode: str, downtime_s: float) -> None:
        """Restart broker ``index``. InvalidRequestError for an unknown mode or a
        negative downtime; ConflictError if it is restarting already."""
        node = self._begin_restart(index, mode, downtime_s)
        await self._restart(node, mode, downtime_s)

    def spawn_restart(self, index: int, mode: str, downtime_s: float) -> None:
        """Restart in the background (the caller is the restarting broker's own front
        end, which the restart closes). Refuses at once what ``restart`` refuses, so the
        caller can answer it; a restart failing later is logged and leaves the broker
        down."""
        node = self._begin_restart(index, mode, downtime_s)
        self._tasks.spawn(self._restart(node, mode, downtime_s), name=f"restart broker {index}")

    def _begin_restart(self, index: int, mode: str, downtime_s: float) -> BrokerNode:
        if mode not in RESTART_MODES:
            raise InvalidRequestError(f"restart mode {mode!r}: one of {', '.join(RESTART_MODES)}")
        if downtime_s < 0:
            raise InvalidRequestError("downtime must not be negative")
        node = self.node(index)
        if index in self._restarting:
            raise ConflictError(f"broker {index} is restarting already")
        self._restarting.add(index)
        return node

    async def _restart(self, node: BrokerNode, mode: str, downtime_s: float) -> None:
        try:
            await node.restart(mode, downtime_s)
        finally:
            self._restarting.discard(node.index)

    async def unload_bundle(self, namespace: str, bundle: str) -> int:
        """Unload one bundle at its owner and release it: the next lookup assigns it to
        another live broker if there is one. Returns the topics unloaded."""
        ownership = self.ownership
        key = (namespace, ownership.check_bundle(bundle))
        owner = ownership.owners.get(key)
        if owner is None:
            return 0
        ownership.begin_unload(key)
        service = self.nodes[owner].service
        try:
            return await service.unload_bundle(key) if service is not None else 0
        finally:
            ownership.release(key, unloaded=True)

    async def unload_namespace(self, tenant: str, namespace: str) -> int:
        """Unload every bundle of the namespace at its owner (each broker closes its
        topics of the namespace concurrently), then release the bundles."""
        keys = [(f"{tenant}/{namespace}", bundle) for bundle in self.ownership.bundle_names]
        for key in keys:
            self.ownership.begin_unload(key)
        total = 0
        try:
            for node in self.nodes:
                if node.service is not None:
                    total += await node.service.unload_namespace(tenant, namespace)
        finally:
            for key in keys:
                self.ownership.release(key, unloaded=True)
        return total
