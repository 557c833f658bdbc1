"""Replays of recorded traces through the real design units: a replay of the live design
at the live size reproduces the live broker's hits and misses exactly, and a replay of
any other design reproduces that design's shadow in the same run exactly: a trace is the
cache event stream, and every consumer of it runs the same code."""

from __future__ import annotations

import pathlib

import pytest

from broker.cache import DESIGNS, CursorCheck, create_stream
from broker.cache.config import CacheConfig
from broker.clock import EventClock, ManualClock
from broker.trace.recorder import TraceRecorder, read_meta, read_trace
from pipeline.analyze import trace_settings
from pipeline.replay import ReplaySpec, replay, replay_batches
from pipeline.trace_io import rows_of
from tests.pipeline.workload import record


def live_spec(trace_dir: pathlib.Path) -> ReplaySpec:
    meta = read_meta(trace_dir)
    settings = CacheConfig(**trace_settings(meta, str(trace_dir)))
    return ReplaySpec(meta["implementation"], settings.max_size_bytes, settings, live=True)


@pytest.mark.parametrize("design", list(DESIGNS))
async def test_replays_reproduce_the_live_design_and_every_shadow_exactly(
    tmp_path: pathlib.Path, design: str
) -> None:
    others = [name for name in DESIGNS if name != design]
    live = await record(tmp_path, design, ",".join(others))
    assert live["misses"] > 0 and live["hits"] > 0  # the workload exercises both
    spec = live_spec(tmp_path)
    assert spec.design == design and spec.size_bytes == 1024 * 1024
    table = read_trace(tmp_path)
    rows = table.to_pylist()
    # the live design's evictions are rows of the trace, with their reasons
    evictions = [row for row in rows if row["kind"] == "evict"]
    assert len(evictions) == live["evicted"]["ttl"] + live["evicted"]["size"]
    if design != "legacy":  # legacy frees this workload by invalidation alone
        assert evictions
    assert {row["reason"] for row in evictions} <= {"ttl", "size"}
    # one fill row per entry the live design read from storage: its misses
    assert sum(row["kind"] == "fill" for row in rows) == live["misses"]
    result = replay(rows_of(table.to_batches()), spec)
    assert (result.hits, result.misses) == (live["hits"], live["misses"])
    assert (result.hit_bytes, result.miss_bytes) == (live["hitBytes"], live["missBytes"])
    # the shadows in one pass over the batches (``replay`` above goes through a dict per
    # row, seconds per replay on a loaded machine; test_columns checks the two agree)
    other_specs = [ReplaySpec(other, spec.size_bytes, spec.settings) for other in others]
    for other, again in zip(others, replay_batches(table.to_batches(), other_specs), strict=True):
        shadow = live["shadows"][other]
        assert (again.hits, again.misses) == (shadow["hits"], shadow["misses"]), other


#: a cache too small for the workload's catch-ups, and one that holds the whole trace
SIZES = (256 * 1024, 64 << 20)


async def test_more_cache_reads_storage_no_more_often(tmp_path: pathlib.Path) -> None:
    await record(tmp_path, "pip430")
    table = read_trace(tmp_path)
    settings = live_spec(tmp_path).settings
    # every design at both sizes in one pass over the batches
    specs = [ReplaySpec(design, size, settings) for design in DESIGNS for size in SIZES]
    replayed = iter(replay_batches(table.to_batches(), specs))
    for design in DESIGNS:
        small, large = next(replayed), next(replayed)
        assert large.misses <= small.misses, design
        assert large.hits >= small.hits, design


def test_a_trace_of_another_format_is_refused_with_a_clear_message() -> None:
    from pipeline.analyze import TraceFormatError

    with pytest.raises(TraceFormatError, match="record the trace again"):
        trace_settings({"implementation": "pip430", "max_size_bytes": 1}, "old-trace")


def test_a_check_of_a_topic_without_cursors_is_replayed(tmp_path: pathlib.Path) -> None:
    """The legacy backlog-caching choice is reset by a check that finds no cursor; the
    trace must say that check happened, or a replay keeps caching for the old choice."""
    config = CacheConfig(min_backlog_cursors_for_caching=1, min_backlog_entries_for_caching=1)
    clock = ManualClock()
    recorders: list[TraceRecorder] = []

    def recorder(event_clock: EventClock) -> TraceRecorder:
        recorders.append(TraceRecorder(tmp_path, event_clock))
        return recorders[0]

    stream = create_stream("legacy", config, clock, trace=recorder)
    events = stream.load_topic("persistent://t/ns/checked")
    events.added(3, 0, [b"x" * 10] * 5)
    events.checked([CursorCheck("s", False, 5), CursorCheck("t", False, 5)])  # both chosen
    events.checked([])  # both deleted since
    for _ in range(2):  # "s" is back and reads twice before the next check
        plan = events.read("s", 3, 0, 4, False)
        for first, last in plan.own:
            events.filled(3, first, [b"x" * 10] * (last - first + 1))
    recorders[0].close()
    live = stream.stats()
    assert (live["hits"], live["misses"]) == (0, 10), "nothing chosen: reads not cached"
    again = replay(
        rows_of(read_trace(tmp_path).to_batches()),
        ReplaySpec("legacy", config.max_size_bytes, config, live=True),
    )
    assert (again.hits, again.misses) == (live["hits"], live["misses"])
