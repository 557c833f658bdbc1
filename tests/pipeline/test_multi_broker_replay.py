"""A trace of two brokers in one directory, one of them restarted half way: each
broker's replay at the live design and size gives that broker's live hits and misses
exactly (summed over its restart), the replay of any other design gives that broker's
shadow of it, and the Spark analysis gives the sums: each broker has a cache of its own
of every size, for the replays, the bound and the statistics alike.

Both brokers serve topics of the same names and ledgers (as a topic moved between them
would): anything that mixed the brokers' rows would count differently."""

from __future__ import annotations

import pathlib
import random
from typing import Any

import pytest

from broker.cache import DESIGNS, CacheConfig, CacheEventStream, CursorCheck, create_stream
from broker.clock import EventClock, ManualClock
from broker.trace.recorder import TraceRecorder, read_meta, read_trace, trace_meta
from pipeline.belady import belady
from pipeline.replay import ReplayResult, ReplaySpec, replay, replay_trace_dir
from pipeline.trace_io import rows_of

TOPICS = ("persistent://t/ns/a", "persistent://t/ns/b")
SUBSCRIPTIONS = ("fast", "slow", "audit")
#: a cache that holds a few rounds of entries: evictions by size as well as by age
CONFIG = CacheConfig(max_size_bytes=24 * 1024, eviction_time_threshold_ms=1000)
ROUNDS = 32
RESTART_AT = 23  # a catch-up round
#: the most entries one read asks for (the dispatcher's read batch)
BATCH = 8
COUNTERS = ("hits", "misses", "hitBytes", "missBytes")


def size_of(ledger: int, entry: int) -> int:
    """An entry's size: the same (topic, ledger, entry) is the same entry everywhere."""
    return 200 + (ledger * 31 + entry * 17) % 300


def payloads(ledger: int, first: int, last: int) -> list[bytes]:
    return [b"x" * size_of(ledger, entry) for entry in range(first, last + 1)]


class Broker:
    """One broker's cache: a stream fed by a workload, recorded by a recorder of its
    own that outlives the restarts. ``counts`` sums the live design's and the shadows'
    counters over every stream the broker had."""

    def __init__(
        self,
        index: int,
        directory: pathlib.Path,
        clock: ManualClock,
        design: str,
        roll_events: int = 97,
    ) -> None:
        self.index = index
        self.clock = clock
        self.design = design
        self.shadows = [name for name in DESIGNS if name != design]
        self.rng = random.Random(index)
        self.recorder: TraceRecorder | None = None
        self.retired: list[dict[str, Any]] = []

        def first(event_clock: EventClock) -> TraceRecorder:
            self.recorder = TraceRecorder(
                directory,
                event_clock,
                roll_events=roll_events,  # several files per broker
                max_pending_files=10_000,  # the writer may fall behind: no drops
                meta=trace_meta(design, CONFIG, brokers=2),
                broker=index,
            )
            return self.recorder

        self.stream = self._stream(first)
        #: per topic: the ledger written to and the next entry id
        self.ledger = {topic: 10 + number for number, topic in enumerate(TOPICS)}
        self.next_entry = dict.fromkeys(TOPICS, 0)
        #: per (topic, subscription): the next entry to read
        self.position = {(topic, sub): 0 for topic in TOPICS for sub in SUBSCRIPTIONS}
        self._load()

    def _stream(self, trace: Any) -> CacheEventStream:
        return create_stream(self.design, CONFIG, self.clock, self.shadows, trace)

    def _load(self) -> None:
        self.events = {topic: self.stream.load_topic(topic) for topic in TOPICS}
        for topic, events in self.events.items():
            ledger = self.ledger[topic]
            for sub in SUBSCRIPTIONS:
                read = self.position[topic, sub]
                backlog = self.next_entry[topic] - read
                events.activated(sub, (ledger, read), (ledger, read - 1), backlog)

    def restart(self) -> None:
        """The broker restarts: a new, empty cache (new stream, new design instances),
        the same recorder; the topics are loaded again and the consumers come back."""
        assert self.recorder is not None
        self.retired.append(self.stream.stats())
        self.stream = self._stream(self.recorder.restart)
        self._load()

    def _read(self, topic: str, subs: tuple[str, ...], last: int) -> None:
        """``subs`` read up to ``last``, ``BATCH`` entries at a time, together: each
        read of a batch is asked before any storage read of it completes (the later
        ones wait for the first one's)."""
        events, ledger = self.events[topic], self.ledger[topic]
        while True:
            ranges = [
                (sub, start, min(last, start + BATCH - 1))
                for sub in subs
                if (start := self.position[topic, sub]) <= last
            ]
            if not ranges:
                return
            plans = [events.read(sub, ledger, first, end, False) for sub, first, end in ranges]
            for plan in plans:
                for own_first, own_last in plan.own:
                    events.filled(ledger, own_first, payloads(ledger, own_first, own_last))
            for sub, first, end in ranges:
                for entry in range(first, end + 1):
                    events.released(sub, ledger, entry)
                self.position[topic, sub] = end + 1
                events.moved(sub, (ledger, end + 1), (ledger, end))

    def round(self, number: int, restart: bool = False) -> None:
        """Entries added and read at once; a nack now and then; every eighth round the
        catch-up readers, just after the broker's restart when ``restart`` (the
        entries they read were in the cache that is gone); the cursor check; a tick."""
        rng = self.rng
        for topic in TOPICS:
            events, ledger = self.events[topic], self.ledger[topic]
            first, count = self.next_entry[topic], rng.randint(4, 12)
            last = first + count - 1
            events.added(ledger, first, payloads(ledger, first, last))
            self.next_entry[topic] = last + 1
            self._read(topic, ("fast",), last)  # tailing
            if rng.random() < 0.3:  # a nack: the entry is read again from the replay queue
                entry = rng.randint(first, last)
                events.replay_added("fast", ledger, entry)
                plan = events.read("fast", ledger, entry, entry, True)
                for own_first, own_last in plan.own:
                    events.filled(ledger, own_first, payloads(ledger, own_first, own_last))
                events.released("fast", ledger, entry)
        if restart:
            self.restart()
        for topic in TOPICS:
            if number % 8 == 7:  # catch-up readers, in lock step
                self._read(topic, ("slow", "audit"), self.next_entry[topic] - 1)
            if number % 3 == 0:
                self.events[topic].checked(
                    [
                        CursorCheck(sub, True, self.next_entry[topic] - self.position[topic, sub])
                        for sub in SUBSCRIPTIONS
                    ]
                )
        self.clock.advance_ms(rng.randint(50, 400))
        self.stream.tick()

    def counts(self) -> dict[str, dict[str, int]]:
        """Per design (the live one and each shadow): the counters summed over the
        broker's streams."""
        summed: dict[str, dict[str, int]] = {
            name: dict.fromkeys(COUNTERS, 0) for name in [self.design, *self.shadows]
        }
        for stats in [*self.retired, self.stream.stats()]:
            for name in summed:
                counters = stats if name == self.design else stats["shadows"][name]
                for key in COUNTERS:
                    summed[name][key] += counters[key]
        return summed


def record(
    directory: pathlib.Path, design: str, roll_events: int = 97
) -> dict[int, dict[str, dict[str, int]]]:
    """Two brokers on one clock, their rounds interleaved; broker 1 restarts in round
    ``RESTART_AT``; each broker's recorder starts a new file every ``roll_events``
    events (the default: 50 files or so per broker).
    Returns each broker's counts (see :meth:`Broker.counts`)."""
    clock = ManualClock()
    brokers = [Broker(index, directory, clock, design, roll_events) for index in (0, 1)]
    for number in range(ROUNDS):
        for broker in brokers:
            broker.round(number, restart=broker.index == 1 and number == RESTART_AT)
    counts = {}
    for broker in brokers:
        assert broker.recorder is not None
        broker.recorder.close()
        assert broker.recorder.dropped == 0
        counts[broker.index] = broker.counts()
        counts[broker.index]["_retired"] = {
            key: sum(stats[key] for stats in broker.retired) for key in COUNTERS
        }
    return counts


def as_counts(result: ReplayResult) -> dict[str, int]:
    values = (result.hits, result.misses, result.hit_bytes, result.miss_bytes)
    return dict(zip(COUNTERS, values, strict=True))


def live_spec(directory: pathlib.Path) -> ReplaySpec:
    meta = read_meta(directory)
    settings = CacheConfig(**meta["settings"])
    return ReplaySpec(meta["implementation"], settings.max_size_bytes, settings, live=True)


@pytest.mark.parametrize("design", list(DESIGNS))
def test_each_broker_s_replay_is_its_live_cache_and_its_shadows_across_a_restart(
    tmp_path: pathlib.Path, design: str
) -> None:
    live = record(tmp_path, design)
    meta = read_meta(tmp_path)
    assert meta["brokers"] == 2 and meta["implementation"] == design
    # the workload exercises what it is meant to, on both brokers
    for broker in (0, 1):
        assert live[broker][design]["hits"] > 0 and live[broker][design]["misses"] > 0
    retired = live[1]["_retired"]
    assert 0 < retired["misses"] < live[1][design]["misses"], "misses before and after"
    rows = read_trace(tmp_path).to_pylist()
    assert [row["kind"] for row in rows].count("restart") == 1
    assert {row["broker"] for row in rows if row["kind"] == "restart"} == {1}

    spec = live_spec(tmp_path)
    replayed = replay_trace_dir(tmp_path, spec)
    assert sorted(replayed) == [0, 1]
    for broker in (0, 1):
        assert as_counts(replayed[broker]) == live[broker][design], broker
    for other in DESIGNS:
        if other == design:
            continue
        shadow_spec = ReplaySpec(other, spec.size_bytes, spec.settings)
        replayed = replay_trace_dir(tmp_path, shadow_spec)
        for broker in (0, 1):
            assert as_counts(replayed[broker]) == live[broker][other], (other, broker)
    # every row of the directory at once: the brokers' counts summed
    total = replay(rows_of(read_trace(tmp_path).to_batches()), spec)
    assert as_counts(total) == {
        key: live[0][design][key] + live[1][design][key] for key in COUNTERS
    }


# ------------------------------------------------------------------- Spark


def _caches(rows: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """The rows of each cache life: per broker, split at its restarts."""
    parts: list[list[dict[str, Any]]] = []
    key = None
    for row in rows:  # read_trace's order: (broker, seq)
        if row["broker"] != key or row["kind"] == "restart":
            parts.append([])
            key = row["broker"]
        parts[-1].append(row)
    return parts


def python_bound(rows: list[dict[str, Any]], capacity: int) -> tuple[int, int]:
    """The bound computed without Spark: each cache life on its own, next reads within
    it. Returns (hits, misses)."""
    sizes: dict[tuple[str, int, int], int] = {}
    for row in rows:
        if row["kind"] in ("add", "fill") and row["size"] is not None:
            key = (row["topic"], row["ledger"], row["entry"])
            sizes[key] = max(sizes.get(key, 0), row["size"])
    hits = misses = 0
    for part in _caches(rows):
        accesses = [
            {
                "kind": row["kind"],
                "key": (row["topic"], row["ledger"], row["entry"]),
                "size": row["size"] or sizes[row["topic"], row["ledger"], row["entry"]],
            }
            for row in part
            if row["kind"] in ("add", "read")
        ]
        upcoming: dict[tuple[str, int, int], int | None] = {}
        for position in range(len(accesses) - 1, -1, -1):
            access = accesses[position]
            access["next_read"] = upcoming.get(access["key"])
            if access["kind"] == "read":
                upcoming[access["key"]] = position
        result = belady(accesses, capacity)
        hits += result.hits
        misses += result.misses
    return hits, misses


def python_reuses(rows: list[dict[str, Any]]) -> int:
    """Reads of an entry that the same broker read before."""
    seen: set[tuple[int, str, int, int]] = set()
    reuses = 0
    for row in rows:
        if row["kind"] == "read":
            key = (row["broker"], row["topic"], row["ledger"], row["entry"])
            reuses += key in seen
            seen.add(key)
    return reuses


@pytest.mark.slow
@pytest.mark.usefixtures("no_charts")
def test_the_analysis_of_a_two_broker_trace_is_the_sum_of_per_broker_caches(
    spark: Any, tmp_path: pathlib.Path
) -> None:
    from pipeline.analyze import AnalyzeOptions, analyze

    trace = tmp_path / "trace"
    # a few files per broker (the analysis reads each file in a task of its own)
    live = record(trace, "pip430", roll_events=1500)
    files = [len(list(trace.glob(f"trace-b{broker}-*.parquet"))) for broker in (0, 1)]
    assert min(files) >= 2 and max(files) <= 5, files
    sizes = [8 * 1024, CONFIG.max_size_bytes]
    summary = analyze(spark, AnalyzeOptions(str(trace), str(tmp_path / "out"), sizes=sizes))
    assert summary["brokers"] == 2
    # the live design at the live size: the brokers' live counts summed
    (row,) = [row for row in summary["sweep"] if row["live"]]
    assert (row["design"], row["size_bytes"]) == ("pip430", CONFIG.max_size_bytes)
    assert (row["hits"], row["misses"], row["hit_bytes"], row["miss_bytes"]) == tuple(
        live[0]["pip430"][key] + live[1]["pip430"][key] for key in COUNTERS
    )
    # every other cell: the sum of the brokers' replays
    for row in summary["sweep"]:
        spec = ReplaySpec(row["design"], row["size_bytes"], CONFIG, row["live"])
        per_broker = replay_trace_dir(trace, spec)
        total = ReplayResult.total(spec, per_broker.values())
        assert (row["hits"], row["misses"]) == (total.hits, total.misses), row
    # the bound: each broker's cache on its own, emptied by the restart
    rows = read_trace(trace).to_pylist()
    bound = {row["size_bytes"]: row for row in summary["bound"]}
    for size in sizes:
        assert (bound[size]["hits"], bound[size]["misses"]) == python_bound(rows, size), size
        for row in summary["sweep"]:
            if row["size_bytes"] == size:
                assert bound[size]["hits"] >= row["hits"], row
    # reuse distances are counted within a broker
    reuse = summary["statistics"]["reuse"]
    assert sum(row["reads"] for row in reuse) == python_reuses(rows)
