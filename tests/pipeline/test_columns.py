"""The column-wise replay (``pipeline.columns``) against the first, row-by-row one: the
same events for any cut of the trace into batches, with rows dropped, for several specs
in one pass; and the miniature simulation's sampling."""

from __future__ import annotations

import itertools
import pathlib

import pyarrow as pa
import pytest

from broker.cache import DESIGNS
from broker.trace.recorder import read_trace
from pipeline.columns import EventDecoder
from pipeline.replay import (
    ReplayResult,
    ReplaySpec,
    replay_batches,
    replay_rows_before,
    replay_uri,
)
from tests.pipeline.test_replay import live_spec
from tests.pipeline.workload import record

#: the module's tests on one xdist worker, which records its trace and makes its row-by-row
#: replays (module fixtures) once: each worker running some of them made its own
pytestmark = pytest.mark.xdist_group("test_columns")


@pytest.fixture(scope="module")
def trace(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    import asyncio

    directory = tmp_path_factory.mktemp("trace")
    asyncio.run(record(directory, "pip430"))
    return directory


def counts(result: ReplayResult) -> tuple[int, int, int, int, dict[str, int]]:
    return result.hits, result.misses, result.hit_bytes, result.miss_bytes, result.evicted


def specs_of(trace: pathlib.Path, size: int) -> list[ReplaySpec]:
    settings = live_spec(trace).settings
    return [ReplaySpec(design, size, settings) for design in DESIGNS]


Expected = dict[int | None, tuple[list[ReplaySpec], list[ReplayResult]]]


@pytest.fixture(scope="module")
def row_by_row() -> Expected:
    """Per prefix length (None: the whole trace), the live spec and every design at 256
    KiB, each replayed row by row: filled in by the tests that need them."""
    return {}


#: a cut at every row costs a decoder call per row: it is made over the trace's first
#: rows (about this many), where every kind of event but the last ones already is
#: (checked below)
PREFIX_ROWS = 4000


def inside_the_first_catch_up(table: pa.Table, near: int) -> int:
    """The length of a prefix of about ``near`` rows that ends inside a read of the slow
    subscription's first catch-up: the row before the cut and the row after it are both
    its reads. Found in the trace rather than fixed, since where the catch-up's reads
    fall among the other rows depends on the timing of the recording."""
    kinds = table.column("kind").to_pylist()
    subscriptions = table.column("subscription").to_pylist()
    slow = [index for index, name in enumerate(subscriptions) if name == "slow"]
    for before, after in itertools.pairwise(slow):
        if before + 1 >= near and kinds[before] == "read" and kinds[after] == "read":
            return before + 1
    raise AssertionError("the slow subscription reads no run of entries past the cut")


@pytest.mark.parametrize(("chunk", "prefix"), [(1, PREFIX_ROWS), (7, None), (1000, None)])
def test_any_cut_into_batches_replays_as_the_row_by_row_replay(
    trace: pathlib.Path, row_by_row: Expected, chunk: int, prefix: int | None
) -> None:
    table = read_trace(trace)
    if prefix is not None:
        whole = table.num_rows
        table = table.slice(0, inside_the_first_catch_up(table, prefix))
        kinds = set(table.column("kind").to_pylist())
        assert kinds >= {
            "load",
            "activate",
            "add",
            "fill",
            "read",
            "release",
            "evict",
            "tick",
            "move",
        }
        # the first catch-up (the slow subscription's reads) has begun, and runs past
        # the cut: the cut falls between two of its reads
        slow = [row["kind"] for row in table.to_pylist() if row["subscription"] == "slow"]
        assert slow[-1] == "read" and table.num_rows < whole
    if prefix not in row_by_row:
        rows = table.to_pylist()
        specs = [live_spec(trace), *specs_of(trace, 256 * 1024)]
        row_by_row[prefix] = specs, [replay_rows_before(rows, spec) for spec in specs]
    specs, before = row_by_row[prefix]
    # the specs in one pass: the batches are cut into events once, for all of them
    replayed = replay_batches(table.to_batches(max_chunksize=chunk), specs)
    for spec, expected, after in zip(specs, before, replayed, strict=True):
        assert counts(after) == counts(expected), (spec.design, spec.size_bytes)
        assert after.events == table.num_rows
    assert before[0].hits > 0 and before[0].misses > 0


def test_rows_dropped_inside_events_cut_them_as_the_row_by_row_replay(
    trace: pathlib.Path,
) -> None:
    rows = read_trace(trace).to_pylist()
    # drop every 13th row: reads, adds and fills lose rows in their middle and at their
    # ends, so events end early or run into the next one's rows
    kept = [row for index, row in enumerate(rows) if index % 13 != 5]
    table = pa.Table.from_pylist(kept, schema=read_trace(trace).schema)
    for spec in specs_of(trace, 512 * 1024):
        before = replay_rows_before(kept, spec)
        after = replay_batches(table.to_batches(max_chunksize=97), [spec])[0]
        assert counts(after) == counts(before), spec.design
    assert before.misses > 0 and before.hits > 0


def test_several_specs_in_one_pass_are_each_as_alone(trace: pathlib.Path) -> None:
    specs = specs_of(trace, 300 * 1024) + specs_of(trace, 2 << 20)
    together = replay_uri(str(trace), specs)
    for spec, result in zip(specs, together, strict=True):
        alone = replay_uri(str(trace), [spec])[0]
        assert counts(result) == counts(alone), (spec.design, spec.size_bytes)
        assert result.sample_rate == 1.0
    # the sizes differ: the instances are separate, not one shared
    assert {counts(r)[:2] for r in together[: len(DESIGNS)]} != {
        counts(r)[:2] for r in together[len(DESIGNS) :]
    }


def test_sampling_keeps_the_same_entries_whatever_the_batches(trace: pathlib.Path) -> None:
    table = read_trace(trace)

    def sampled(chunk: int) -> list[tuple[object, ...]]:
        decoder = EventDecoder(0.3)
        events = [e for b in table.to_batches(max_chunksize=chunk) for e in decoder.decode(b)]
        return events + decoder.finish()

    whole = sampled(1 << 20)
    assert sampled(11) == whole
    full = EventDecoder(1.0)
    everything = full.decode(table.to_batches()[0]) if table.num_rows else []
    # entries are thinned: fewer entry events, no entry outside the full trace's
    assert 0 < len(whole) < len(everything) + table.num_rows


def test_a_sampled_replay_estimates_the_full_one(
    trace: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the workload's 3,000 entries are under the sample floor, lowered here so that
    # half of them (1,500) may be sampled
    monkeypatch.setattr("pipeline.columns.MIN_SAMPLE_POPULATION", 1000)
    spec = specs_of(trace, 2 << 20)[0]  # at 0.5, about 500 of its 2,000 B entries
    full = replay_uri(str(trace), [spec])[0]
    estimate = replay_uri(str(trace), [spec], sample_rate=0.5)[0]
    assert estimate.sample_rate == 0.5
    assert estimate.size_bytes == spec.size_bytes  # reported at the size asked
    # counts are scaled back: about as many reads as the full replay
    reads, estimated = full.hits + full.misses, estimate.hits + estimate.misses
    assert 0.6 * reads < estimated < 1.4 * reads
    assert abs(estimate.hit_ratio - full.hit_ratio) < 0.1


@pytest.mark.parametrize("rate", [0.0, -0.5, 1.5])
def test_a_sample_rate_outside_zero_to_one_is_refused(rate: float) -> None:
    with pytest.raises(ValueError, match="sample rate"):
        EventDecoder(rate)


def test_a_cache_too_small_to_sample_is_sampled_at_a_raised_rate(trace: pathlib.Path) -> None:
    from pipeline.columns import MIN_SAMPLED_ENTRIES, effective_sample_rate

    assert effective_sample_rate(0.01, 64 << 20, 1024) == 0.01
    raised = effective_sample_rate(0.01, 2 << 20, 1024)
    assert raised == MIN_SAMPLED_ENTRIES * 1024 / (2 << 20) and raised > 0.01
    assert effective_sample_rate(0.01, 100 * 1024, 1024) == 1.0
    # the workload's entries are 2,000 B: a 256 KiB cache would hold about 1 at 0.01,
    # so it is replayed whole, and counts exactly as the full replay
    spec = specs_of(trace, 256 * 1024)[0]
    sampled = replay_uri(str(trace), [spec], sample_rate=0.01)[0]
    assert sampled.sample_rate == 1.0
    assert counts(sampled) == counts(replay_uri(str(trace), [spec])[0])


def test_a_trace_too_small_to_sample_is_sampled_at_a_raised_rate(trace: pathlib.Path) -> None:
    from pipeline.columns import MIN_SAMPLE_POPULATION, count_entries, effective_sample_rate
    from pipeline.trace_io import iter_batches

    assert effective_sample_rate(0.01, 64 << 20, 1024, entries=10_000_000) == 0.01
    assert effective_sample_rate(0.01, 64 << 20, 1024, entries=20_000) == (
        MIN_SAMPLE_POPULATION / 20_000
    )
    # the workload stores 3,000 entries: at 0.01 a sample would hold 30 of them, and
    # fewer than the floor even whole: it is replayed whole, and counts as the full one
    assert count_entries(iter_batches(str(trace), "trace-b0-", ["kind"])) == 3000
    assert MIN_SAMPLE_POPULATION > 3000
    spec = specs_of(trace, 64 << 20)[0]
    sampled = replay_uri(str(trace), [spec], sample_rate=0.01)[0]
    assert sampled.sample_rate == 1.0
    assert counts(sampled) == counts(replay_uri(str(trace), [spec])[0])
