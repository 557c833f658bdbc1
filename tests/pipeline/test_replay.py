"""Replays of recorded traces through the real cache classes: a faithful replay of the
live design reproduces the live broker's hits and misses; what-if replays of the other
designs run on the same trace."""

from __future__ import annotations

import pathlib

import pytest

from broker.cache.config import CacheConfig
from broker.trace.recorder import read_meta, read_trace
from pipeline.replay import ReplaySpec, replay
from pipeline.trace_io import rows_of
from tests.pipeline.workload import record


def live_spec(trace_dir: pathlib.Path) -> ReplaySpec:
    meta = read_meta(trace_dir)
    settings = CacheConfig(
        **{k: v for k, v in meta.items() if k not in ("implementation", "segments")}
    )
    return ReplaySpec(
        meta["implementation"], settings.max_size_bytes, settings, meta["segments"], live=True
    )


@pytest.mark.parametrize("design", ["pip430", "legacy", "segmented"])
async def test_a_faithful_replay_reproduces_the_live_hits(
    tmp_path: pathlib.Path, design: str
) -> None:
    live = await record(tmp_path, design)
    assert live["misses"] > 0 and live["hits"] > 0  # the workload exercises both
    spec = live_spec(tmp_path)
    assert spec.design == design and spec.size_bytes == 1024 * 1024
    table = read_trace(tmp_path)
    # the live design's evictions are rows of the trace, with their reasons
    evictions = [row for row in table.to_pylist() if row["kind"] == "evict"]
    assert len(evictions) == live["evicted"]["ttl"] + live["evicted"]["size"]
    if design != "legacy":  # legacy frees this workload by invalidation alone
        assert evictions
    assert {row["reason"] for row in evictions} <= {"ttl", "size"}
    result = replay(rows_of(table.to_batches()), spec)
    assert result.hits == pytest.approx(live["hits"], rel=0.01)
    assert result.misses == pytest.approx(live["misses"], rel=0.01)
    assert result.hits + result.misses == live["hits"] + live["misses"]


async def test_what_if_replays_see_the_same_reads_and_more_cache_helps(
    tmp_path: pathlib.Path,
) -> None:
    live = await record(tmp_path, "pip430")
    table = read_trace(tmp_path)
    settings = live_spec(tmp_path).settings
    reads = live["hits"] + live["misses"]
    for design in ("pip430", "legacy", "segmented"):
        small = replay(rows_of(table.to_batches()), ReplaySpec(design, 256 * 1024, settings))
        large = replay(rows_of(table.to_batches()), ReplaySpec(design, 64 << 20, settings))
        assert small.hits + small.misses == reads
        assert large.hits + large.misses == reads
        assert large.hits >= small.hits, design
