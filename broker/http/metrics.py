"""``GET /metrics``: Prometheus text, from the counters the broker already keeps.

A collector reads them at scrape time, so nothing is added to hot paths except the two
latency histograms. Pulsar-compatible ``pulsar_ml_cache_*`` gauges carry the rates of
the last stats period (``statsUpdateFrequencyInSecs``); ``brokerlab_*`` counters carry
totals since start, by design (live cache and shadows), reason and storage tier.
Topic-labelled series appear only with ``exposeTopicLevelMetricsInPrometheus``, labelled
as Pulsar labels them (``namespace`` ``tenant/ns``, ``topic`` the full name), for at most
``brokerlabMetricsMaxTopics`` topics (the largest backlogs); the others are summed per
namespace under ``topic="_other"``, so a scrape's size is bounded by the cap plus the
namespaces, whatever the topic count.
Every series carries a ``broker`` label, the broker's index in its cluster (0 alone), so
the brokers of a cluster scraped together stay apart.
"""

from __future__ import annotations

import asyncio
import time
from bisect import bisect_left
from collections.abc import Callable, Iterator
from itertools import accumulate
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from broker.cluster import BrokerNode
    from broker.dispatch.service import BrokerService
    from broker.dispatch.service_config import TopicLoad
    from broker.http.codec import CodecPool
    from storage_stub.bookie import Storage

#: the ``topic`` label of the series that sum the topics beyond brokerlabMetricsMaxTopics
OTHER_TOPICS = "_other"

#: up to an hour, as the load generator's latencies (HdrHistograms up to an hour): a
#: catch-up read of a backlog minutes old is a publish-to-delivery latency of minutes,
#: and with 30 s the top bucket a p99 beyond it read 30.0 (histogram_quantile's cap)
LATENCY_BUCKETS = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0,
)  # fmt: skip

#: how often the loop-lag watcher's timer is due
LOOP_LAG_INTERVAL_S = 0.1
LOOP_LAG_BUCKETS = (
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
)  # fmt: skip


async def watch_loop_lag(
    histogram: LatencyHistogram, also: Callable[[float], None] | None = None
) -> None:
    """Observe, every LOOP_LAG_INTERVAL_S, how late the loop ran this task's timer: the
    time something held the loop (a callback that does not yield, a burst of ready
    tasks); ``also`` hears each lag too (the dashboard's sampler). Runs until cancelled;
    one timer at a time, so on a virtual-time loop (where timers are never late) it only
    adds a wake-up per interval. O(1) a wake-up."""
    loop = asyncio.get_running_loop()
    while True:
        due = loop.time() + LOOP_LAG_INTERVAL_S
        await asyncio.sleep(LOOP_LAG_INTERVAL_S)
        lag = max(0.0, loop.time() - due)
        histogram.observe(lag)
        if also is not None:
            also(lag)


class BrokerMetrics:
    """The app's registry: the collector plus the latency histograms handlers observe."""

    def __init__(
        self,
        node: BrokerNode,
        storage: Storage,
        topic_level: bool,
        watermark: float = 0.9,
    ) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(BrokerCollector(node, storage, topic_level, watermark))
        broker = str(node.index)
        self.produce_latency = LatencyHistogram(
            "brokerlab_produce_latency_seconds",
            "Time to store a produce request durably (receipt of the body to the answer).",
            broker,
        )
        self.dispatch_latency = LatencyHistogram(
            "brokerlab_dispatch_latency_seconds",
            "Publish to delivery: from a message's publishTime to the poll that returns it.",
            broker,
        )
        self.registry.register(self.produce_latency)
        self.registry.register(self.dispatch_latency)
        #: how late the event loop runs a timer (:func:`watch_loop_lag`)
        self.loop_lag = LatencyHistogram(
            "brokerlab_event_loop_lag_seconds",
            f"How late the event loop ran a timer due every {LOOP_LAG_INTERVAL_S} s: the "
            "longest any request, message or timer waited behind work holding the loop.",
            broker,
            LOOP_LAG_BUCKETS,
        )
        self.registry.register(self.loop_lag)


class CodecCollector(Collector):
    """``brokerlab_http_codec_requests_total``: produce bodies a codec process encoded or
    refused (refused ones the loop encoded again and reported). O(1) a scrape."""

    def __init__(self, pool: CodecPool, broker: str) -> None:
        self._pool = pool
        self._broker = broker

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily(
            "brokerlab_http_codec_requests",
            "Produce bodies sent to a codec process (httpCodecProcesses), by outcome.",
            labels=["outcome", "broker"],
        )
        family.add_metric(["encoded", self._broker], self._pool.encoded)
        family.add_metric(["refused", self._broker], self._pool.refused)
        yield family


class LatencyHistogram(Collector):
    """A latency histogram cheap enough to observe once per delivered message, exposed
    as Prometheus exposes its histograms (cumulative ``le`` buckets, ``_count``,
    ``_sum``, ``_created``) with a ``broker`` label.

    ``observe`` is a bisect over the bucket bounds and two additions: about 0.15 us,
    against about 1-2 us for prometheus_client's Histogram, which takes a lock and walks
    its buckets; at 100 messages a poll that was some 6% of the broker's CPU under
    produce+consume. Observed from the event loop's thread only (no lock). O(log
    buckets) per observation, O(buckets) per scrape."""

    __slots__ = ("_bounds", "_broker", "_counts", "_created", "_documentation", "_name", "_sum")

    def __init__(
        self,
        name: str,
        documentation: str,
        broker: str,
        bounds: tuple[float, ...] = LATENCY_BUCKETS,
    ) -> None:
        self._name = name.removesuffix("_seconds") + "_seconds"
        self._documentation = documentation
        self._broker = broker
        self._bounds = bounds
        #: observations per bucket, not cumulative; the last is above every bound (+Inf)
        self._counts = [0] * (len(bounds) + 1)
        self._sum = 0.0
        self._created = time.time()

    def observe(self, seconds: float, times: int = 1) -> None:
        """Count ``times`` observations of ``seconds``: in the first bucket whose bound is
        >= it (``le``). A poll observes each run of messages published in the same
        millisecond at once."""
        self._counts[bisect_left(self._bounds, seconds)] += times
        self._sum += seconds * times

    def collect(self) -> Iterator[Metric]:
        family = HistogramMetricFamily(self._name, self._documentation, labels=("broker",))
        cumulative = list(accumulate(self._counts))
        buckets = [
            (_bound_text(bound), count)
            for bound, count in zip(self._bounds, cumulative[:-1], strict=True)
        ]
        buckets.append(("+Inf", cumulative[-1]))
        family.add_metric([self._broker], buckets, self._sum)
        family.add_sample(self._name + "_created", {"broker": self._broker}, self._created)
        yield family


def _bound_text(bound: float) -> str:
    """A bucket bound as prometheus_client writes it (``0.005``, ``1.0``, ``30.0``)."""
    return repr(float(bound))


def _gauge(name: str, documentation: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, documentation, value=value)


class BrokerCollector(Collector):
    """Everything but the histograms. A scrape costs O(topics + subscriptions) in
    arithmetic (plus a pass over PIP-430's queue for the expected-reads gauge) and
    O(topics log topics) to rank them; its output is O(brokerlabMetricsMaxTopics +
    their subscriptions) series."""

    def __init__(
        self, node: BrokerNode, storage: Storage, topic_level: bool, watermark: float
    ) -> None:
        self._node = node
        self._storage = storage
        self._topic_level = topic_level
        self._watermark = watermark

    def collect(self) -> Iterator[Metric]:
        """Every family, each sample labelled with the broker's index."""
        broker = str(self._node.index)
        for metric in self._families():
            metric.samples = [
                sample._replace(labels={**sample.labels, "broker": broker})
                for sample in metric.samples
            ]
            yield metric

    def _families(self) -> Iterator[Metric]:
        node = self._node
        service = node.service
        if service is not None:
            cache = node.cache_stats()
            yield from self._pulsar_cache(service, cache)
            yield from self._cache(cache)
            yield from self._dispatch(service)
        yield from self._storage_metrics()
        trace = node.trace
        if trace is not None:
            yield CounterMetricFamily(
                "brokerlab_trace_events", "Access trace events recorded.", value=trace.events
            )
            yield CounterMetricFamily(
                "brokerlab_trace_dropped_events",
                "Access trace events dropped while the writer was behind.",
                value=trace.dropped,
            )

    def _pulsar_cache(self, service: BrokerService, cache: dict[str, Any]) -> Iterator[Metric]:
        rates = service.cache_rates
        evicted = cache["evicted"]
        yield _gauge("pulsar_ml_count", "Managed ledgers loaded.", len(service.topics))
        yield _gauge("pulsar_ml_cache_used_size", "Bytes in the entry cache.", cache["sizeBytes"])
        yield _gauge("pulsar_ml_cache_entries", "Entries in the entry cache.", cache["entries"])
        yield _gauge("pulsar_ml_cache_hits_rate", "Cache hits per second.", rates.hits_rate)
        yield _gauge("pulsar_ml_cache_misses_rate", "Cache misses per second.", rates.misses_rate)
        yield _gauge(
            "pulsar_ml_cache_hits_throughput", "Bytes per second from the cache.",
            rates.hits_throughput,
        )  # fmt: skip
        yield _gauge(
            "pulsar_ml_cache_misses_throughput", "Bytes per second read on misses.",
            rates.misses_throughput,
        )  # fmt: skip
        yield _gauge(
            "pulsar_ml_cache_evictions", "Size evictions in the last stats period.",
            rates.evictions,
        )  # fmt: skip
        yield _gauge(
            "pulsar_ml_cache_inserted_entries_total", "Entries inserted into the cache.",
            cache["inserted"],
        )  # fmt: skip
        yield _gauge(
            "pulsar_ml_cache_evicted_entries_total", "Entries evicted from the cache.",
            evicted["ttl"] + evicted["size"] + evicted["invalidated"],
        )  # fmt: skip

    def _cache(self, cache: dict[str, Any]) -> Iterator[Metric]:
        labels = ["design", "role"]
        hits = CounterMetricFamily(
            "brokerlab_cache_hits", "Entries read from the cache.", labels=labels
        )
        misses = CounterMetricFamily(
            "brokerlab_cache_misses",
            "Entries read from storage for reads (a read that waits for another's counts none).",
            labels=labels,
        )
        hit_bytes = CounterMetricFamily(
            "brokerlab_cache_hit_bytes", "Bytes read from the cache.", labels=labels
        )
        miss_bytes = CounterMetricFamily(
            "brokerlab_cache_miss_bytes", "Bytes of the misses.", labels=labels
        )
        size = GaugeMetricFamily("brokerlab_cache_size_bytes", "Bytes cached.", labels=labels)
        entries = GaugeMetricFamily("brokerlab_cache_entries", "Entries cached.", labels=labels)
        evictions = CounterMetricFamily(
            "brokerlab_cache_evictions", "Entries evicted, by reason.", labels=[*labels, "reason"]
        )
        rows = [(cache["implementation"], "live", cache)]
        rows += [(name, "shadow", shadow) for name, shadow in cache["shadows"].items()]
        for design, role, stats in rows:
            key = [design, role]
            hits.add_metric(key, stats["hits"])
            misses.add_metric(key, stats["misses"])
            hit_bytes.add_metric(key, stats["hitBytes"])
            miss_bytes.add_metric(key, stats["missBytes"])
            size.add_metric(key, stats["sizeBytes"])
            entries.add_metric(key, stats["entries"])
            for reason, count in stats["evicted"].items():
                evictions.add_metric([*key, reason], count)
        yield from (hits, misses, hit_bytes, miss_bytes, size, entries, evictions)
        live = [cache["implementation"]]
        inserts = CounterMetricFamily(
            "brokerlab_cache_inserts", "Entries inserted.", labels=["design"]
        )
        inserts.add_metric(live, cache["inserted"])
        runs = CounterMetricFamily(
            "brokerlab_cache_eviction_runs", "Eviction passes.", labels=["design"]
        )
        runs.add_metric(live, cache["evictionRuns"])
        eviction_cpu = CounterMetricFamily(
            "brokerlab_cache_eviction_cpu_seconds",
            "CPU time spent in eviction passes.",
            labels=["design"],
        )
        eviction_cpu.add_metric(live, cache["evictionCpuSeconds"])
        limit = GaugeMetricFamily(
            "brokerlab_cache_max_size_bytes", "Cache size limit.", labels=["design"]
        )
        limit.add_metric(live, cache["maxSizeBytes"])
        watermark = GaugeMetricFamily(
            "brokerlab_cache_watermark_bytes",
            "A size eviction frees down to this (managedLedgerCacheEvictionWatermark x max).",
            labels=["design"],
        )
        watermark.add_metric(live, cache["maxSizeBytes"] * self._watermark)
        expected = GaugeMetricFamily(
            "brokerlab_cache_entries_with_expected_reads",
            "Cached entries a cursor is still expected to read (PIP-430).",
            labels=["design"],
        )
        expected.add_metric(live, cache["entriesWithExpectedReads"])
        yield from (inserts, runs, eviction_cpu, limit, watermark, expected)

    def _storage_metrics(self) -> Iterator[Metric]:
        bookie = self._storage.stats()
        tier = ["tier"]
        requests = CounterMetricFamily(
            "brokerlab_storage_read_requests", "Storage read calls.", labels=tier
        )
        entries = CounterMetricFamily(
            "brokerlab_storage_read_entries", "Entries read from storage.", labels=tier
        )
        nbytes = CounterMetricFamily(
            "brokerlab_storage_read_bytes", "Bytes read from storage.", labels=tier
        )
        requests.add_metric(["bookie"], bookie["readRequests"])
        entries.add_metric(["bookie"], bookie["entriesRead"])
        nbytes.add_metric(["bookie"], bookie["bytesRead"])
        tiered = self._storage.tiered.stats()
        requests.add_metric(["tiered"], tiered["readRequests"])
        entries.add_metric(["tiered"], tiered["entriesRead"])
        nbytes.add_metric(["tiered"], tiered["entryBytesRead"])
        yield from (requests, entries, nbytes)
        counters = (
            (
                "brokerlab_bookie_last_entry_cache_hits",
                "Last-entry cache hits.",
                "lastEntryCacheHits",
            ),
            (
                "brokerlab_bookie_last_entry_cache_misses",
                "Last-entry cache misses.",
                "lastEntryCacheMisses",
            ),
            ("brokerlab_bookie_floor_seeks", "Floor seeks on the location index.", "getFloorCalls"),
            ("brokerlab_bookie_read_cache_hits", "Bookie read cache hits.", "readCacheHits"),
            ("brokerlab_bookie_read_cache_misses", "Bookie read cache misses.", "readCacheMisses"),
        )
        for name, documentation, key in counters:
            yield CounterMetricFamily(name, documentation, value=bookie[key])
        yield _gauge(
            "brokerlab_bookie_read_only",
            "1 while the bookie is read-only (disk usage at diskUsageThreshold), else 0.",
            bookie["readOnly"],
        )
        yield _gauge(
            "brokerlab_bookie_disk_usage_ratio",
            "Used fraction of the data directory's file system at the last disk check.",
            bookie["diskUsage"],
        )
        tiered_counters = (
            ("brokerlab_tiered_object_gets", "Object GETs (whole or ranged).", "objectGets"),
            ("brokerlab_tiered_object_bytes_read", "Bytes of object GETs.", "bytesRead"),
            ("brokerlab_tiered_index_loads", "Index blocks loaded.", "indexLoads"),
            ("brokerlab_tiered_bloom_skips", "Index loads a bloom filter avoided.", "bloomSkips"),
        )
        for name, documentation, key in tiered_counters:
            yield CounterMetricFamily(name, documentation, value=tiered[key])

    def _dispatch(self, service: BrokerService) -> Iterator[Metric]:
        totals = service.totals
        yield CounterMetricFamily(
            "brokerlab_messages_produced", "Messages stored.", value=totals.produced
        )
        yield CounterMetricFamily(
            "brokerlab_messages_dispatched",
            "Messages handed to consumers.",
            value=totals.dispatched,
        )
        yield CounterMetricFamily(
            "brokerlab_messages_redelivered",
            "Messages handed over again.",
            value=totals.redelivered,
        )
        yield CounterMetricFamily(
            "brokerlab_upkeep_topics_visited",
            "Topics looked at by the broker's upkeep rounds and inactive-topic checks (each"
            " once per round): it grows with the active topics, not the loaded ones.",
            value=service.upkeep_topics_visited,
        )
        yield _gauge(
            "brokerlab_upkeep_active_topics",
            "Topics each upkeep round visits now (touched during the last stats period, or"
            " with clients).",
            service.active_topics,
        )
        yield CounterMetricFamily(
            "brokerlab_inactive_topics_deleted",
            "Topics deleted as inactive (brokerDeleteInactiveTopicsEnabled).",
            value=service.inactive_topics_deleted,
        )
        yield CounterMetricFamily(
            "brokerlab_inactive_topics_unloaded",
            "Inactive topics unloaded (brokerlabUnloadInactiveTopicsEnabled).",
            value=service.inactive_topics_unloaded,
        )
        loads = service.topic_loads()
        backlog = sum(load.backlog for load in loads)
        replay = sum(sum(load.replay_by_subscription.values()) for load in loads)
        yield _gauge(
            "brokerlab_backlog_messages", "Unacknowledged messages, all subscriptions.", backlog
        )
        yield _gauge(
            "brokerlab_replay_queue_messages", "Messages waiting in replay queues.", replay
        )
        namespaces: dict[str, list[TopicLoad]] = {}
        for load in loads:
            namespaces.setdefault(load.namespace, []).append(load)
        topics_count = GaugeMetricFamily(
            "pulsar_topics_count", "Topics loaded, per namespace.", labels=["namespace"]
        )
        for namespace in sorted(namespaces):
            topics_count.add_metric([namespace], len(namespaces[namespace]))
        yield topics_count
        if not self._topic_level:
            # as Pulsar then: the topic families summed per namespace, with no topic label
            yield from _namespace_families(namespaces)
            return
        # Pulsar's topic labels (its cluster label comes from prometheus.yml's target)
        topic = ["namespace", "topic"]
        t_backlog = GaugeMetricFamily("pulsar_msg_backlog", "Backlog per topic.", labels=topic)
        t_rate_in = GaugeMetricFamily("pulsar_rate_in", "Messages per second in.", labels=topic)
        t_rate_out = GaugeMetricFamily("pulsar_rate_out", "Messages per second out.", labels=topic)
        t_storage = GaugeMetricFamily("pulsar_storage_size", "Stored bytes.", labels=topic)
        t_replay = GaugeMetricFamily(
            "brokerlab_replay_queue_messages_by_subscription",
            "Messages waiting in a replay queue.",
            labels=[*topic, "subscription"],
        )
        cap = self._node.config.brokerlabMetricsMaxTopics
        shown, rest = loads, []
        if len(loads) > cap:
            ranked = sorted(loads, key=lambda load: (load.backlog, load.storage_size), reverse=True)
            shown, rest = ranked[:cap], ranked[cap:]
        for load in shown:
            label = [load.namespace, load.topic]
            t_backlog.add_metric(label, load.backlog)
            t_rate_in.add_metric(label, load.rate_in)
            t_rate_out.add_metric(label, load.rate_out)
            t_storage.add_metric(label, load.storage_size)
            for name, waiting in load.replay_by_subscription.items():
                t_replay.add_metric([*label, name], waiting)
        # the rest summed per namespace, so sums by namespace stay whole
        by_namespace: dict[str, list[TopicLoad]] = {}
        for load in rest:
            by_namespace.setdefault(load.namespace, []).append(load)
        for namespace in sorted(by_namespace):
            group = by_namespace[namespace]
            other = [namespace, OTHER_TOPICS]
            t_backlog.add_metric(other, sum(load.backlog for load in group))
            t_rate_in.add_metric(other, sum(load.rate_in for load in group))
            t_rate_out.add_metric(other, sum(load.rate_out for load in group))
            t_storage.add_metric(other, sum(load.storage_size for load in group))
            t_replay.add_metric(
                [*other, OTHER_TOPICS],
                sum(sum(load.replay_by_subscription.values()) for load in group),
            )
        yield from (t_backlog, t_rate_in, t_rate_out, t_storage, t_replay)
        yield _gauge(
            "brokerlab_metrics_topics_aggregated",
            'Topics summed under topic="_other" (beyond brokerlabMetricsMaxTopics).',
            len(rest),
        )


def _namespace_families(namespaces: dict[str, list[TopicLoad]]) -> Iterator[Metric]:
    """The topic families per namespace (exposeTopicLevelMetricsInPrometheus=false).
    O(topics)."""
    label = ["namespace"]
    backlog = GaugeMetricFamily("pulsar_msg_backlog", "Backlog per namespace.", labels=label)
    rate_in = GaugeMetricFamily("pulsar_rate_in", "Messages per second in.", labels=label)
    rate_out = GaugeMetricFamily("pulsar_rate_out", "Messages per second out.", labels=label)
    storage = GaugeMetricFamily("pulsar_storage_size", "Stored bytes.", labels=label)
    for namespace in sorted(namespaces):
        group = namespaces[namespace]
        backlog.add_metric([namespace], sum(load.backlog for load in group))
        rate_in.add_metric([namespace], sum(load.rate_in for load in group))
        rate_out.add_metric([namespace], sum(load.rate_out for load in group))
        storage.add_metric([namespace], sum(load.storage_size for load in group))
    yield from (backlog, rate_in, rate_out, storage)
