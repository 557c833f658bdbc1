"""BrokerService: the topics this broker owns, their consumers, and background upkeep."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import heapq
import itertools
import logging
import secrets
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING

from broker.cache.stream import CacheEventStream
from broker.clock import Clock
from broker.dispatch import backlog_quota
from broker.dispatch.cache_rates import CacheRates
from broker.dispatch.consumer import Consumer
from broker.dispatch.errors import (
    ConflictError,
    ConsumerLimitError,
    NotAllowedLimitError,
    NotFoundError,
    PreconditionFailedError,
    ProducerLimitError,
    UnavailableError,
)
from broker.dispatch.names import TopicName
from broker.dispatch.namespaces import NamespaceRegistry
from broker.dispatch.offloading import offload_ledgers, offload_round, offload_topic_now
from broker.dispatch.ownership import NotOwnerError, Ownership, ServiceNotReadyError
from broker.dispatch.partitions import PartitionedTopics, partition_of
from broker.dispatch.policies import DEDUPLICATION, MESSAGE_TTL, NamespaceScope, PolicyStore
from broker.dispatch.schema_registry import AUTO_CONSUME, SchemaRegistry, drop_schemas
from broker.dispatch.service_config import ConsumerOptions, ServiceConfig, TopicLoad
from broker.dispatch.stats import BrokerTotals
from broker.dispatch.subscription import Subscription, check_subscription_type
from broker.dispatch.topic import PersistentTopic, Producer
from broker.dispatch.topic_schemas import TopicSchemas
from broker.ledger.cache_evictor import CacheEvictor
from broker.ledger.errors import ManagedLedgerError
from broker.ledger.managed_ledger import LedgerInfo, ManagedLedger, metadata_key
from broker.ledger.offload import TieredStorage
from broker.ledger.position import Position
from broker.ledger.read_limiter import ReadLimiter
from broker.tasks import FifoSemaphore, TaskOwner, join
from storage_stub.bookie.api import Bookie, BookieError, MetadataStore

if TYPE_CHECKING:
    from broker.trace.recorder import TraceRecorder

log = logging.getLogger(__name__)


#: topics of a namespace unload closed at once
UNLOAD_CONCURRENCY = 64


class BrokerService:
    """Owns topics (loaded on first use from the metadata store), consumers by id, and
    the upkeep loop: idle consumers, ack timeouts, ledger rollover and trimming, rates.

    The upkeep costs O(active topics), not O(loaded topics). A topic is *active* from
    its load or from anything its managed ledger reports (``ManagedLedger.touch``: adds,
    cursor moves, consumers coming or going, subscriptions, offloads) until a whole stats
    period passes with none of that and no client connected; then it is *quiet*: its
    rates are zero, nothing about it changes, and no round visits it. What time alone
    does to a quiet topic (its ledger's maximum rollover age, the offload deletion lag)
    is a wake-up in a heap; the inactive-topic check (Pulsar's
    ``brokerDeleteInactiveTopics*``) takes the quiet topics in the order they went quiet
    and deletes or unloads those quiet for long enough. ``upkeep_topics_visited`` counts
    the topics those rounds looked at."""

    def __init__(
        self,
        config: ServiceConfig,
        bookie: Bookie,
        metadata: MetadataStore,
        cache: CacheEventStream,
        clock: Clock,
        tiered: TieredStorage | None = None,
        trace: TraceRecorder | None = None,
        ownership: Ownership | None = None,
        index: int = 0,
        partitions: PartitionedTopics | None = None,
        policies: PolicyStore | None = None,
        schemas: SchemaRegistry | None = None,
    ) -> None:
        """``policies``: the cluster's policy store, loaded; None: a store of this
        service's own, which reads nothing until loaded (``await service.policies.load()``;
        every write loads it first). ``schemas``: the cluster's schema registry (one, so
        its brokers add a topic's versions one at a time); None: one of its own."""
        self.config = config
        #: the cluster's ownership table and this broker's index in it; alone, a broker
        #: owns every bundle
        if ownership is None:
            ownership = Ownership(1)
            ownership.brokers[0].alive = True
        self.ownership = ownership
        self.index = index
        #: the broker is shutting down: no topic loads here any more
        self.stopping = False
        self.tiered = tiered
        #: the broker-wide limit on reads in flight, shared by every managed ledger
        self.read_limiter = ReadLimiter(
            config.max_reads_in_flight_bytes,
            config.reads_in_flight_timeout_ms,
            config.reads_in_flight_queue_size,
        )
        #: the access trace recorder, for its stats (None: off); it records the events
        #: of ``cache``
        self.trace = trace
        self.bookie = bookie
        self.metadata = metadata
        #: the broker's cache: the live design, its shadows and the access trace, fed
        #: one stream of cache events
        self.cache = cache
        self.clock = clock
        self.topics: dict[TopicName, PersistentTopic] = {}
        self.consumers: dict[str, Consumer] = {}
        self._loading: dict[TopicName, asyncio.Future[PersistentTopic]] = {}
        #: maxConcurrentTopicLoadRequest: the loads under way at once
        self._load_slots = FifoSemaphore(config.max_concurrent_topic_loads)
        #: topics being unloaded or deleted: a load waits, so two ledgers never coexist
        self._closing: dict[TopicName, asyncio.Future[None]] = {}
        self._owner = TaskOwner("broker service")
        #: a front end's hung-up clients' producers and consumers being let go a batch a
        #: turn of the loop (the binary protocol's): a new consumer waits for them, so
        #: it finds them gone as if they had all gone in the hang-up's turn
        self._detaching: set[asyncio.Future[object]] = set()
        self._last_stats_ns = clock.monotonic_ns()
        #: the topics each upkeep round visits (a dict as an insertion-ordered set)
        self._active: dict[PersistentTopic, None] = {}
        #: quiet topics -> when they went quiet (monotonic ns), oldest first: a topic
        #: that wakes leaves, and enters again at the end when it goes quiet again
        self._quiet: dict[PersistentTopic, int] = {}
        #: (due monotonic ns, tie-breaker, topic): quiet topics time gives upkeep work;
        #: entries of topics awake or gone meanwhile are skipped when they come due
        self._wakeups: list[tuple[int, int, PersistentTopic]] = []
        self._wakeup_order = itertools.count()
        #: topics looked at by upkeep rounds and inactive-topic checks since start (a
        #: topic once per round): O(active topics) per round, whatever is loaded
        self.upkeep_topics_visited = 0
        #: upkeep rounds run since start
        self.upkeep_rounds = 0
        #: topics the inactive-topic check deleted, and unloaded
        self.inactive_topics_deleted = 0
        self.inactive_topics_unloaded = 0
        self.evictor = CacheEvictor(cache, config.cache_eviction_interval_ms)
        self.totals = BrokerTotals()
        self.cache_rates = CacheRates()
        self.cache_rates.refresh(cache.stats(), 0.0)
        #: the partitioned topics: the cluster's (shared by its brokers, acting on each
        #: partition at its owner), or this broker's own when it stands alone
        self.partitions = partitions or PartitionedTopics(
            metadata, config.partitions, self, config.allow_auto_topic_creation
        )
        #: namespace and topic policies (durable; reads from memory)
        self.policies = policies or PolicyStore(metadata, config.cluster_name)
        self.namespaces = NamespaceRegistry(metadata, config.cluster_name, self, self.policies)
        #: its loaded topics apply policy changes from now until it closes
        self._unwatch_policies: Callable[[], None] | None = self.policies.watch(
            self._policy_changed
        )
        #: topics' schemas (kept in the metadata store) and the rules clients meet, under
        #: the topic's and namespace's policies or else broker.conf's settings
        self.schemas = TopicSchemas(
            schemas or SchemaRegistry(metadata),
            config.schema_compatibility_strategy,
            config.allow_auto_update_schema,
            config.schema_validation_enforced,
            self.policies,
        )

    def start(self) -> None:
        self._owner.spawn(self._upkeep_loop(), name="broker upkeep")
        self._owner.spawn(self.evictor.run(), name="cache eviction")
        config = self.config
        if config.delete_inactive_topics or config.unload_inactive_topics:
            self._owner.spawn(self._inactive_topics_loop(), name="inactive topics")
        self._owner.spawn(self._message_expiry_loop(), name="message expiry")
        if config.backlog_quota_check_enabled:
            self._owner.spawn(self._backlog_quota_loop(), name="backlog quotas")

    def _stop_watching_policies(self) -> None:
        if self._unwatch_policies is not None:
            self._unwatch_policies()
            self._unwatch_policies = None

    def _policy_changed(self, scope: TopicName | NamespaceScope, name: str) -> None:
        """A namespace or topic policy changed: the loaded topics it reaches apply it (a
        partitioned topic's policy reaches its partitions). O(loaded topics); policy
        changes are rare."""
        if isinstance(scope, TopicName):
            key = self.policies.topic_key
            affected = [t for n, t in self.topics.items() if key(n) == scope]
        else:
            tenant, namespace = scope
            affected = [
                t for n, t in self.topics.items() if n.tenant == tenant and n.namespace == namespace
            ]
        for topic in affected:
            backlog_quota.apply_retention(self.policies, self.config, topic)
            topic.ledger.touch()  # the upkeep trims it under the new retention
            topic.policy_changed(name)
        if name == DEDUPLICATION:
            self._recheck_deduplication(scope)

    def _recheck_deduplication(self, scope: TopicName | NamespaceScope) -> None:
        """The deduplication policy of ``scope`` changed: the loaded topics it reaches (a
        topic, the partitions of a partitioned topic, a namespace's topics) turn
        deduplication on or off in the background, as Pulsar's topics do on a policy
        update. O(loaded topics)."""
        for topic_name, topic in self.topics.items():
            if isinstance(scope, TopicName):
                partition = partition_of(topic_name)
                if topic_name != scope and (partition is None or partition[0] != scope):
                    continue
            elif (topic_name.tenant, topic_name.namespace) != scope:
                continue
            self._owner.spawn(self._check_deduplication(topic), f"deduplication check {topic_name}")

    async def _check_deduplication(self, topic: PersistentTopic) -> None:
        try:
            await topic.deduplication.check_status(self.deduplication_enabled(topic.name))
        except (BookieError, ManagedLedgerError) as error:
            log.warning("topic %s: deduplication status change failed: %s", topic.name, error)

    # ------------------------------------------------------------------ message TTL

    async def _message_expiry_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.message_expiry_check_interval_s)
            try:
                await self.check_message_expiry()
            except (BookieError, ManagedLedgerError) as error:
                log.warning("message expiry: storage error, will retry: %s", error)

    async def check_message_expiry(self) -> int:
        """Pulsar's message-TTL check (``messageExpiryCheckIntervalInMinutes``): on each
        loaded topic whose TTL (its policy, its namespace's, ``ttlDurationDefaultInSeconds``)
        is set, every subscription acknowledges the messages older than it, by the
        broker's clock. O(loaded topics) plus, per subscription with a backlog, a binary
        search over publish times. Returns the entries expired."""
        now_ms = self.clock.wall_ms()
        default = self.config.message_ttl_s
        expired = 0
        for topic in list(self.topics.values()):
            ttl = self.policies.effective(topic.name, MESSAGE_TTL, default)
            if not ttl or ttl <= 0 or self.topics.get(topic.name) is not topic:
                continue
            for subscription in list(topic.subscriptions.values()):
                if subscription.backlog() > 0:
                    expired += await subscription.expire_messages(now_ms, int(ttl))
        return expired

    # ------------------------------------------------------------------ backlog quotas

    async def _backlog_quota_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.backlog_quota_check_interval_s)
            try:
                await self.check_backlog_quotas()
            except (BookieError, ManagedLedgerError) as error:
                log.warning("backlog quotas: storage error, will retry: %s", error)

    async def check_backlog_quotas(self) -> int:
        """Pulsar's backlog-quota check (``backlogQuotaCheckIntervalInSeconds``): each
        loaded topic over a quota has the quota's policy applied (see
        :mod:`broker.dispatch.backlog_quota`). O(loaded topics x subscriptions). Returns
        how many topics were over a quota."""
        now_ms = self.clock.wall_ms()
        over = 0
        for topic in list(self.topics.values()):
            if self.topics.get(topic.name) is topic and await backlog_quota.enforce(
                self.policies, self.config, topic, now_ms
            ):
                over += 1
        return over

    async def close(self) -> None:
        """Stop upkeep, disconnect consumers, close every topic (ledgers closed cleanly),
        a bounded number at a time as an unload does: each close waits on storage."""
        self._stop_watching_policies()
        await self._owner.close()
        for consumer in list(self.consumers.values()):
            self.close_consumer(consumer)
        topics = list(self.topics.items())
        self.topics.clear()
        self._active.clear()
        self._quiet.clear()
        self._wakeups.clear()
        remaining = iter(topics)

        async def worker() -> None:
            for name, topic in remaining:
                try:
                    await topic.close()
                except BookieError as error:
                    # a full disk, say: the next owner recovers the ledger from its metadata
                    log.warning("topic %s did not close cleanly: %s", name, error)

        await asyncio.gather(*(worker() for _ in range(min(UNLOAD_CONCURRENCY, len(topics)))))

    async def kill(self) -> None:
        """Stop abruptly, as a killed broker: upkeep and dispatch stop, consumers are
        dropped without their subscriptions hearing of it, ledgers are abandoned open
        and nothing more is written (acks not yet in a cursor's record are lost, so their
        messages are delivered again; every receipted add is in the bookie)."""
        self._stop_watching_policies()
        await self._owner.close()
        for consumer in list(self.consumers.values()):
            consumer.closed = True
            consumer.wake_pollers()
        self.consumers.clear()
        topics = list(self.topics.values())
        self.topics.clear()
        self._active.clear()
        self._quiet.clear()
        self._wakeups.clear()
        for topic in topics:
            for subscription in topic.subscriptions.values():
                await subscription.close()
            await topic.deduplication.kill()
            await topic.ledger.abandon()

    # ------------------------------------------------------------------ topics

    async def get_topic(
        self, name: TopicName, create: bool, *, explicit: bool = False
    ) -> PersistentTopic:
        """The loaded topic, loading it from storage if it exists. NotFoundError when it
        does not exist and ``create`` is false (or auto-creation is off). ``explicit``:
        an admin creating it, whatever allowAutoTopicCreation says. O(1) to join a load
        under way and O(1) to leave it (a caller cancelled)."""
        topic = self.topics.get(name)
        if topic is not None:
            return topic
        # joined, not shielded: a flood of requests for a topic still loading, then a
        # disconnect that cancels them all, costs O(1) per request (broker.tasks.join)
        while (closing := self._closing.get(name)) is not None:
            await join(closing)
        topic = self.topics.get(name)
        if topic is not None:
            return topic
        loading = self._loading.get(name)
        if loading is not None:
            return await join(loading)
        future: asyncio.Future[PersistentTopic] = asyncio.get_running_loop().create_future()
        self._loading[name] = future
        try:
            may_create = await self.partitions.may_create(name, create or explicit)
            async with self._load_slots:
                topic = await self._load(name, may_create or explicit)
            future.set_result(topic)
            return topic
        except BaseException as error:
            future.set_exception(error)
            future.exception()  # retrieved: waiters re-raise it, nobody else must
            raise
        finally:
            del self._loading[name]

    def deduplication_enabled(self, name: TopicName) -> bool:
        """Whether ``name`` deduplicates: its topic policy (a partition's: its
        partitioned topic's), else its namespace's, else brokerDeduplicationEnabled.
        O(1)."""
        policies = self.policies
        value = policies.topic(name, DEDUPLICATION)
        if value is None and (partition := partition_of(name)) is not None:
            value = policies.topic(partition[0], DEDUPLICATION)
        if value is None:
            value = policies.namespace(name.tenant, name.namespace, DEDUPLICATION)
        return self.config.deduplication.enabled if value is None else bool(value)

    async def create_topic(self, name: TopicName) -> PersistentTopic:
        """Pulsar's createNonPartitionedTopic: ConflictError when the topic exists, when
        a partitioned topic has that name, or when it names a partition past its
        partitioned topic's count. Created whatever allowAutoTopicCreation says."""
        if await self.partitions.exists(name):
            raise ConflictError(f"This topic already exists: {name}")
        return await self.get_topic(name, create=True, explicit=True)

    def check_owner(self, name: TopicName) -> None:
        """NotOwnerError naming the owner when another broker serves the topic's bundle;
        an unowned bundle is assigned first (possibly to this broker)."""
        owner = self.ownership.owner(name)
        if owner.index != self.index:
            raise NotOwnerError(name, owner)
        if self.ownership.is_unloading(name):
            raise ServiceNotReadyError(
                f"the bundle of {name} is being unloaded from broker {self.index}; look it up again"
            )

    async def _load(self, name: TopicName, create: bool) -> PersistentTopic:
        if self.stopping:
            raise ServiceNotReadyError(
                f"broker {self.index} is shutting down; look {name} up again"
            )
        self.check_owner(name)
        ml_name = str(name)
        checks_stored = not create or self.partitions.config.max_topics_per_namespace
        if checks_stored and await self.metadata.get(metadata_key(ml_name)) is None:
            if not create:
                raise NotFoundError(f"topic {name} not found")
            await self.partitions.check_new_topic(name)
        events = self.cache.load_topic(ml_name)
        ledger = ManagedLedger(
            ml_name, self.bookie, self.metadata, events, self.config.ledger, self.clock
        )
        ledger.tiered = self.tiered
        ledger.read_limiter = self.read_limiter
        try:
            await ledger.open()
        except BookieError as error:
            events.unloaded()
            raise UnavailableError(f"cannot load topic {name}: {error}") from error
        topic = PersistentTopic(
            name, ledger, self.config.dispatch, self.clock, self.totals, self.config.deduplication
        )
        backlog_quota.apply_retention(self.policies, self.config, topic)
        try:
            await topic.deduplication.initialize(self.deduplication_enabled(name))
        except (BookieError, ManagedLedgerError) as error:
            # a topic whose deduplication state cannot be recovered does not load (it
            # would store duplicates); the next use tries again, as Pulsar's load fails
            await topic.deduplication.kill()
            with contextlib.suppress(BookieError):  # the next load recovers it
                await ledger.close()
            raise UnavailableError(f"cannot load topic {name}: {error}") from error
        self.topics[name] = topic
        ledger.on_touch = functools.partial(self._wake, topic)
        self._active[topic] = None
        return topic

    def _wake(self, topic: PersistentTopic) -> None:
        """``topic``'s ledger was touched: the upkeep visits it again. O(1)."""
        if self.topics.get(topic.name) is topic:
            self._quiet.pop(topic, None)
            self._active[topic] = None

    def _forget(self, topic: PersistentTopic) -> None:
        """``topic`` is no longer loaded here: the upkeep forgets it. O(1) (its wake-up
        entries are skipped when they come due)."""
        self._active.pop(topic, None)
        self._quiet.pop(topic, None)

    @property
    def active_topics(self) -> int:
        """Topics each upkeep round visits now."""
        return len(self._active)

    async def list_topics(self, tenant: str, namespace: str) -> list[str]:
        return await self.partitions.namespace_topics(tenant, namespace)

    async def delete_topic(self, name: TopicName, force: bool) -> None:
        topic = await self.get_topic(name, create=False)
        connected = [c for s in topic.subscriptions.values() for c in s.consumers]
        if connected and not force:
            raise PreconditionFailedError(
                f"topic {name} has {len(connected)} connected consumers; use force=true"
            )
        for consumer in connected:
            self.close_consumer(consumer)
        topic.close_producers()
        async with self._closing_topic(name):
            self.topics.pop(name, None)
            self._forget(topic)
            for subscription in topic.subscriptions.values():
                await subscription.close()
            await topic.deduplication.close()
            if partition_of(name) is None:  # a partition's are its partitioned topic's
                # Pulsar drops a deleted topic's schema and policies, before its ledger:
                # a delete that fails here leaves the topic's messages as they were (it
                # is only unloaded), and a retry deletes it
                await drop_schemas(self.metadata, name)
                await self.policies.drop_topic(name)
            await topic.ledger.delete()

    async def unload_namespace(self, tenant: str, namespace: str) -> int:
        """Unload every loaded topic of the namespace as a bundle move would: consumers
        disconnected, cache entries dropped, the next request reloads from storage."""
        await self._loads_settled(lambda n: n.tenant == tenant and n.namespace == namespace)
        doomed = [n for n in self.topics if n.tenant == tenant and n.namespace == namespace]
        # topics close concurrently (each waits on its ledger's close), a bounded number
        # at a time, as a broker unloads a bundle; one by one, 3,000 topics took seconds
        await self._unload_all(doomed)
        return len(doomed)

    async def unload_bundle(self, bundle: tuple[str, str]) -> int:
        """Unload the loaded topics of one namespace bundle, as unload_namespace does."""
        bundle_of = self.ownership.bundle_of
        await self._loads_settled(lambda name: bundle_of(name) == bundle)
        doomed = [name for name in self.topics if bundle_of(name) == bundle]
        await self._unload_all(doomed)
        return len(doomed)

    async def _loads_settled(self, doomed: Callable[[TopicName], bool]) -> None:
        """Wait for the loads in progress of the topics being unloaded (the bundle is
        marked first, so no new one starts): a load that passed its ownership check
        before the unload began ends in ``topics``, where the unload finds it, and never
        outlives the bundle's handover."""
        loading = [future for name, future in self._loading.items() if doomed(name)]
        if loading:
            await asyncio.wait(loading)

    async def _unload_all(self, doomed: list[TopicName]) -> None:
        names = iter(doomed)

        async def worker() -> None:
            for name in names:
                await self.unload_topic(name)

        await asyncio.gather(*(worker() for _ in range(min(UNLOAD_CONCURRENCY, len(doomed)))))

    async def unload_topic(self, name: TopicName) -> None:
        topic = self.topics.get(name)
        if topic is None:
            return
        async with self._closing_topic(name):
            self.topics.pop(name, None)
            self._forget(topic)
            for subscription in topic.subscriptions.values():
                for consumer in list(subscription.consumers):
                    self.close_consumer(consumer)
            topic.close_producers()
            try:
                await topic.close()
            except BookieError as error:
                # the topic is unloaded all the same: the next load recovers its ledger
                # as a new owner does after a crash
                log.warning("topic %s unloaded without closing its ledger: %s", name, error)

    @contextlib.asynccontextmanager
    async def _closing_topic(self, name: TopicName) -> AsyncIterator[None]:
        """Mark ``name`` as closing until the block ends; loads of it wait."""
        while (closing := self._closing.get(name)) is not None:
            await join(closing)
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._closing[name] = future
        try:
            yield
        finally:
            del self._closing[name]
            future.set_result(None)

    # ------------------------------------------------------------------ consumers

    def detaching(self, release: asyncio.Future[object]) -> None:
        """``release`` lets a hung-up client's producers and consumers go (a batch a
        turn); :meth:`detached` waits for it. O(1)."""
        self._detaching.add(release)
        release.add_done_callback(self._detaching.discard)

    async def detached(self) -> None:
        """Return once the producers and consumers of the clients that hung up before
        the call are let go (at once when none is being let go; O(1) then); later
        hang-ups are not waited for, so hang-ups that keep coming starve no one.
        Cancelling the wait leaves them going."""
        if self._detaching:
            await asyncio.wait(set(self._detaching))

    async def create_consumer(
        self,
        name: TopicName,
        subscription_name: str,
        options: ConsumerOptions,
        factory: type[Consumer] = Consumer,
        start: Position | None = None,
    ) -> Consumer:
        """Attach a new consumer (of class ``factory``: the HTTP consumer, or a front
        end's own) to the subscription, creating it at ``start`` (else the initial
        position) if it does not exist. Clients that hung up before are gone first
        (:meth:`detached`): an Exclusive subscription of theirs is free."""
        check_subscription_type(options.subscription_type)
        await self.detached()
        topic = await self.get_topic(name, create=True)
        self._check_consumer_limits(topic, subscription_name)
        await self.schemas.consumer_schema(topic, options.schema)  # IncompatibleSchemaError
        begin: str | Position = start if start is not None else (
            "earliest" if options.initial_position == "Earliest" else "latest"
        )  # fmt: skip
        subscription = await topic.get_or_create_subscription(subscription_name, begin)
        consumer_id = secrets.token_urlsafe(18)
        consumer = factory(
            consumer_id,
            options.name or f"consumer-{consumer_id[:8]}",
            subscription,
            options.receiver_queue_size,
            options.priority_level,
            options.ack_timeout_ms,
            options.nack_delay_ms,
            self.clock.monotonic_ns(),
        )
        consumer.address = options.address
        consumer.client_version = options.client_version
        consumer.metadata = options.metadata
        consumer.connected_since_ms = self.clock.wall_ms()
        consumer.auto_consume_schema = (
            options.schema is not None and options.schema.type == AUTO_CONSUME
        )
        await subscription.add_consumer(consumer, options.subscription_type)
        if self.topics.get(name) is not topic:
            # the topic was unloaded while this consumer attached: don't leave it orphaned
            consumer.closed = True
            subscription.remove_consumer(consumer)
            raise UnavailableError(f"topic {name} was unloaded meanwhile; retry")
        self.consumers[consumer_id] = consumer
        return consumer

    def _check_consumer_limits(self, topic: PersistentTopic, subscription_name: str) -> None:
        """maxConsumersPerTopic, maxConsumersPerSubscription and, for a new
        subscription, maxSubscriptionsPerTopic. O(subscriptions of the topic) when a
        topic limit is set, else O(1)."""
        config = self.config
        subscription = topic.subscriptions.get(subscription_name)
        if subscription is None:
            limit = config.max_subscriptions_per_topic
            if limit and len(topic.subscriptions) >= limit:
                raise NotAllowedLimitError(
                    f"topic {topic.name} has maxSubscriptionsPerTopic={limit} subscriptions"
                )
        else:
            limit = config.max_consumers_per_subscription
            if limit and len(subscription.consumers) >= limit:
                raise ConsumerLimitError(
                    f"subscription {subscription_name} has maxConsumersPerSubscription="
                    f"{limit} consumers"
                )
        limit = config.max_consumers_per_topic
        if limit and sum(len(s.consumers) for s in topic.subscriptions.values()) >= limit:
            raise ConsumerLimitError(
                f"topic {topic.name} has maxConsumersPerTopic={limit} consumers"
            )

    def check_new_subscription(self, topic: PersistentTopic, subscription_name: str) -> None:
        """maxSubscriptionsPerTopic for the admin route that creates a subscription."""
        limit = self.config.max_subscriptions_per_topic
        subscriptions = topic.subscriptions
        if limit and subscription_name not in subscriptions and len(subscriptions) >= limit:
            raise NotAllowedLimitError(
                f"topic {topic.name} has maxSubscriptionsPerTopic={limit} subscriptions"
            )

    def add_producer(self, topic: PersistentTopic, producer: Producer) -> None:
        """Count a front end's producer (binary or WebSocket) among ``topic``'s;
        ProducerLimitError (Pulsar's ProducerBusy) when it has maxProducersPerTopic
        already. The front end discards it from ``topic.producers`` when it closes.
        O(1)."""
        limit = self.config.max_producers_per_topic
        if limit and len(topic.producers) >= limit:
            raise ProducerLimitError(
                f"topic {topic.name} has maxProducersPerTopic={limit} producers"
            )
        backlog_quota.check_producer(self.policies, self.config, topic, self.clock.wall_ms())
        topic.producers[producer] = None

    def consumer(self, consumer_id: str) -> Consumer:
        consumer = self.consumers.get(consumer_id)
        if consumer is None:
            raise NotFoundError("consumer not found (unknown id, closed, or idle too long)")
        return consumer

    def close_consumer(self, consumer: Consumer) -> None:
        """Disconnect: unacked messages go back to the subscription."""
        if consumer.closed:
            return
        consumer.closed = True
        self.consumers.pop(consumer.consumer_id, None)
        consumer.subscription.remove_consumer(consumer)
        consumer.wake_pollers()
        consumer.detached()

    async def subscription(self, name: TopicName, subscription_name: str) -> Subscription:
        topic = await self.get_topic(name, create=False)
        return topic.subscription(subscription_name)

    async def reset_cursor(
        self, name: TopicName, subscription_name: str, position: Position
    ) -> None:
        subscription = await self.subscription(name, subscription_name)
        await subscription.reset_cursor(position)

    # ------------------------------------------------------------------ upkeep

    async def _upkeep_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.maintenance_interval_s)
            try:
                await self.upkeep()
            except BookieError as error:
                log.warning("upkeep: storage error, will retry: %s", error)

    async def upkeep(self) -> None:
        """One round: close idle consumers and redeliver timed-out messages (O(consumers));
        wake the quiet topics whose timed work is due (O(log topics) each); roll over and
        trim the ledgers of the active topics and offload; when the stats period has
        passed, refresh their rates, check their cursors and put to sleep those that
        stayed untouched and without clients for the whole period. O(active topics): a
        loaded topic nobody uses costs nothing here."""
        now = self.clock.monotonic_ns()
        idle_ns = self.config.consumer_idle_timeout_ms * 1_000_000
        for consumer in list(self.consumers.values()):
            if consumer.polls == 0 and now - consumer.last_active_ns > idle_ns:
                log.info("closing idle consumer %s", consumer.name)
                self.close_consumer(consumer)
            else:
                consumer.subscription.redeliver_timed_out(consumer, now)
        self._wake_due(now)
        active = list(self._active)
        self.upkeep_topics_visited += len(active)
        for topic in active:
            await topic.ledger.maybe_roll_over()
            await topic.ledger.trim_consumed_ledgers()
        if self.tiered is not None:
            config = self.config
            await offload_round(
                self.tiered, active, config.offload_threshold_bytes, config.offload_deletion_lag_ms
            )
        elapsed_s = (now - self._last_stats_ns) / 1e9
        if elapsed_s >= self.config.stats_update_frequency_s:
            self._last_stats_ns = now
            for topic in active:
                if self.topics.get(topic.name) is not topic:
                    continue  # unloaded or deleted during this round
                topic.refresh_rates(elapsed_s)
                topic.check_cursors()
                await topic.deduplication.upkeep()
                self._sleep_if_quiet(topic, now)
            self.cache_rates.refresh(self.cache.stats(), elapsed_s)
        self.upkeep_rounds += 1

    def _sleep_if_quiet(self, topic: PersistentTopic, now_ns: int) -> None:
        """The stats period's verdict on an active topic: touched during the period, it
        stays active (and must be touched again to stay another period); untouched, with
        no client and nothing in progress, it goes quiet, with a wake-up at its ledger's
        next timed work. Its rates were just refreshed over a period without adds: zero.
        O(log topics + #ledgers)."""
        ledger = topic.ledger
        if ledger.touched:
            ledger.touched = False  # the next touch runs on_touch: a cheap no-op while awake
            return
        if topic.has_clients() or topic.busy():
            return
        self._active.pop(topic, None)
        self._quiet[topic] = now_ns
        due_ms = ledger.next_timed_work_ms(self.config.offload_deletion_lag_ms)
        if due_ms is not None:
            due_ns = now_ns + max(0, due_ms - self.clock.wall_ms()) * 1_000_000
            heapq.heappush(self._wakeups, (due_ns, next(self._wakeup_order), topic))
            if len(self._wakeups) > 2 * len(self.topics) + 1024:
                self._compact_wakeups()

    def _wake_due(self, now_ns: int) -> None:
        """Wake the quiet topics whose timed work is due. O(due x log wake-ups)."""
        wakeups = self._wakeups
        while wakeups and wakeups[0][0] <= now_ns:
            topic = heapq.heappop(wakeups)[2]
            if topic in self._quiet:
                self._wake(topic)

    def _compact_wakeups(self) -> None:
        """Drop the wake-ups of topics awake or gone (amortized O(1) per wake-up: it runs
        when they outnumber the loaded topics twice over)."""
        self._wakeups = [entry for entry in self._wakeups if entry[2] in self._quiet]
        heapq.heapify(self._wakeups)

    # ------------------------------------------------------------------ inactive topics

    async def _inactive_topics_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.inactive_topics_frequency_s)
            await self.check_inactive_topics()

    async def check_inactive_topics(self) -> tuple[int, int]:
        """Pulsar's inactive-topic check (``brokerDeleteInactiveTopicsFrequencySeconds``):
        each topic quiet for ``brokerDeleteInactiveTopicsMaxInactiveDurationSeconds``
        (default: the frequency) with no producer or consumer is deleted when its mode
        allows (``delete_when_no_subscriptions``: it has none;
        ``delete_when_subscriptions_caught_up``: none has a backlog), as Pulsar deletes
        it; otherwise, with ``brokerlabUnloadInactiveTopicsEnabled``, unloaded as a bundle
        unload would (cursors and ledger closed durably; the next use loads it again).
        Topics close a bounded number at a time. O(topics due): quiet topics are kept in
        the order they went quiet. Returns (deleted, unloaded)."""
        config = self.config
        if not (config.delete_inactive_topics or config.unload_inactive_topics):
            return 0, 0
        max_inactive_s = config.inactive_topics_max_inactive_s
        if max_inactive_s is None:
            max_inactive_s = config.inactive_topics_frequency_s
        cutoff = self.clock.monotonic_ns() - int(max_inactive_s * 1e9)
        due = []
        for topic, quiet_since in self._quiet.items():
            if quiet_since > cutoff:
                break
            due.append(topic)
        self.upkeep_topics_visited += len(due)
        outcomes = {"deleted": 0, "unloaded": 0}
        remaining = iter(due)

        async def worker() -> None:
            for topic in remaining:
                # a stop cancels the check between topics, never inside one: a topic
                # half deleted would be left for the next owner to recover
                retiring = asyncio.ensure_future(self._retire_inactive(topic))
                try:
                    outcome = await asyncio.shield(retiring)
                except asyncio.CancelledError:
                    await asyncio.wait([retiring])
                    if not retiring.cancelled() and (error := retiring.exception()) is not None:
                        log.error("inactive topic %s", topic.name, exc_info=error)
                    raise
                if outcome is not None:
                    outcomes[outcome] += 1

        await asyncio.gather(*(worker() for _ in range(min(UNLOAD_CONCURRENCY, len(due)))))
        self.inactive_topics_deleted += outcomes["deleted"]
        self.inactive_topics_unloaded += outcomes["unloaded"]
        return outcomes["deleted"], outcomes["unloaded"]

    def _deletable(self, topic: PersistentTopic) -> bool:
        """Pulsar's ``isActive(mode)`` negated, for a topic with no client connected."""
        if self.config.inactive_topics_mode == "delete_when_no_subscriptions":
            return not topic.subscriptions
        return all(subscription.backlog() == 0 for subscription in topic.subscriptions.values())

    async def _retire_inactive(self, topic: PersistentTopic) -> str | None:
        """Delete or unload one topic found inactive, if it still is: the checks and the
        fencing of its ledger happen with no await between them, so an add or a
        subscription that comes after the checks fails (and is retried on a new load),
        and none that came before is lost. "deleted", "unloaded", or None (kept)."""
        name = topic.name
        if topic not in self._quiet or self.topics.get(name) is not topic:
            return None  # woken, unloaded or deleted meanwhile
        if name in self._closing or topic.ledger.touched or topic.has_clients() or topic.busy():
            self._wake(topic)  # in use after all: the upkeep looks at it again
            return None
        config = self.config
        if config.delete_inactive_topics and self._deletable(topic):
            async with self._closing_topic(name):  # not closing: no await here
                self.topics.pop(name)
                self._forget(topic)
                try:
                    await topic.ledger.delete()  # fences the ledger before its first await
                    await topic.deduplication.close()
                    for subscription in topic.subscriptions.values():
                        await subscription.close()
                except BookieError as error:
                    # the record is the commit point: a topic whose record stays is only
                    # unloaded, and loads again as it was
                    log.warning("inactive topic %s not deleted: %s", name, error)
                    return None
            if partition_of(name) is None:
                try:
                    await drop_schemas(self.metadata, name)  # as Pulsar's delete of the topic
                except BookieError as error:
                    # the topic is gone (its ledger's delete was the commit point); its
                    # schema stays behind, for a topic of that name created later
                    log.warning("schema of deleted inactive topic %s kept: %s", name, error)
            log.info("deleted inactive topic %s", name)
            return "deleted"
        if config.unload_inactive_topics:
            await self.unload_topic(name)  # pops it before its first await
            return "unloaded"
        self._quiet.pop(topic, None)  # kept loaded, asleep until something touches it
        return None

    # ------------------------------------------------------------------ offload

    async def offload(self, work: list[tuple[PersistentTopic, list[LedgerInfo]]]) -> int:
        """Upload the given closed ledgers of many topics as one stream set object, then
        mark them offloaded; returns how many ledgers. Nothing changes on failure."""
        return await offload_ledgers(self.tiered, work)

    async def offload_topic(self, name: TopicName, up_to: Position) -> int:
        """The offload route: every closed ledger of the topic up to ``up_to``, now."""
        topic = await self.get_topic(name, create=False)
        return await offload_topic_now(self.tiered, topic, up_to)

    def topic_loads(self) -> list[TopicLoad]:
        """Per loaded topic: backlog, replay-queue size per subscription, rates. O(topics
        x subscriptions x ledgers) (backlogs count across ledgers)."""
        loads = []
        for topic in list(self.topics.values()):
            backlog = 0
            replay: dict[str, int] = {}
            rate_out = 0.0
            for name, subscription in topic.subscriptions.items():
                backlog += subscription.backlog()
                dispatcher = subscription.dispatcher
                replay[name] = len(dispatcher.replay) if dispatcher is not None else 0
                rate_out += sum(consumer.msg_out.rate for consumer in subscription.consumers)
            loads.append(
                TopicLoad(str(topic.name), backlog, replay, topic.msg_in.rate, rate_out,
                          topic.ledger.total_size(),
                          f"{topic.name.tenant}/{topic.name.namespace}")
            )  # fmt: skip
        return loads
