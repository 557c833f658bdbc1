"""``brokerlab analyze``'s work done in one process without Spark: the yardstick of
``brokerlab bench analyze`` (``broker/bench/analyze.py``), which times both on the same
trace.

The same outputs from the same code where there is code to share: the designs replayed
by ``pipeline.replay.replay_uri`` (every cell in one pass over the trace), the bound by
``pipeline.belady.BoundRun`` and the references by ``pipeline.reference.BatchReferences``
on the same ``next_reads`` rows, the report by ``pipeline.report``. What Spark does with
DataFrames (the reads' sizes, ``next_reads``, the read patterns, reuse, the working set)
is done here with pyarrow and numpy on the whole trace in memory: fine for a bench's
trace (a few million rows), not a way to analyze a trace of any size.

The entries' keys are Spark's ``xxhash64(topic, ledger, entry)`` (:func:`spark_xxhash64`),
so that libcachesim sees the same object ids either way (W-TinyLFU's sketch hashes
them) and the two analyses' tables can be compared row for row.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from broker.trace.recorder import META_FILE
from pipeline import jobs, reference, trace_io
from pipeline.analyze import (
    REPORT_PATTERN_ROWS,
    AnalyzeOptions,
    ranking,
    result_table,
    sweep_cells,
    trace_settings,
)
from pipeline.belady import BoundRun
from pipeline.replay import replay_uri, sample_rate_for

_P1 = 11400714785074694791
_P2 = 14029467366897019727
_P3 = 1609587929392839161
_P4 = 9650029242287828579
_P5 = 2870177450012600261
_M = (1 << 64) - 1
#: Spark's seed of ``xxhash64``
SPARK_SEED = 42


def _rotl(value: int, bits: int) -> int:
    return ((value << bits) | (value >> (64 - bits))) & _M


def _round(accumulator: int, lane: int) -> int:
    accumulator = (accumulator + lane * _P2) & _M
    return (_rotl(accumulator, 31) * _P1) & _M


def xxh64(data: bytes, seed: int) -> int:
    """XXH64 of ``data`` (unsigned 64-bit), as Spark's ``XXH64.hashUnsafeBytes``."""
    length = len(data)
    position = 0
    if length >= 32:
        lanes = [(seed + _P1 + _P2) & _M, (seed + _P2) & _M, seed & _M, (seed - _P1) & _M]
        while position + 32 <= length:
            for index in range(4):
                word = int.from_bytes(data[position : position + 8], "little")
                lanes[index] = _round(lanes[index], word)
                position += 8
        value = (
            _rotl(lanes[0], 1) + _rotl(lanes[1], 7) + _rotl(lanes[2], 12) + _rotl(lanes[3], 18)
        ) & _M
        for lane in lanes:
            value = ((value ^ _round(0, lane)) * _P1 + _P4) & _M
    else:
        value = (seed + _P5) & _M
    value = (value + length) & _M
    while position + 8 <= length:
        word = int.from_bytes(data[position : position + 8], "little")
        value = (_rotl(value ^ _round(0, word), 27) * _P1 + _P4) & _M
        position += 8
    if position + 4 <= length:
        word = int.from_bytes(data[position : position + 4], "little")
        value = (_rotl(value ^ (word * _P1 & _M), 23) * _P2 + _P3) & _M
        position += 4
    while position < length:
        value = (_rotl(value ^ (data[position] * _P5 & _M), 11) * _P1) & _M
        position += 1
    return _avalanche(value)


def _avalanche(value: int) -> int:
    value ^= value >> 33
    value = (value * _P2) & _M
    value ^= value >> 29
    value = (value * _P3) & _M
    return value ^ (value >> 32)


def _xxh64_longs(values: np.ndarray, seeds: np.ndarray) -> np.ndarray:
    """XXH64 of each 8-byte little-endian value with its seed (Spark's ``hashLong``),
    element-wise on uint64 (wrapping)."""
    u = np.uint64
    with np.errstate(over="ignore"):
        value = seeds + u(_P5) + u(8)
        lane = values.astype(np.uint64) * u(_P2)
        lane = ((lane << u(31)) | (lane >> u(33))) * u(_P1)
        value ^= lane
        value = ((value << u(27)) | (value >> u(37))) * u(_P1) + u(_P4)
        value ^= value >> u(33)
        value *= u(_P2)
        value ^= value >> u(29)
        value *= u(_P3)
        return value ^ (value >> u(32))


def spark_xxhash64(topics: pa.Array, ledgers: np.ndarray, entries: np.ndarray) -> np.ndarray:
    """Spark's ``xxhash64(topic, ledger, entry)`` (a signed 64-bit int64), each column's
    hash the next one's seed: the key ``jobs.next_reads`` gives an entry."""
    encoded = topics.dictionary_encode() if not pa.types.is_dictionary(topics.type) else topics
    by_topic = np.array(
        [xxh64(str(topic).encode(), SPARK_SEED) for topic in encoded.dictionary.to_pylist()],
        dtype=np.uint64,
    )
    indices = np.asarray(encoded.indices.to_numpy(zero_copy_only=False), dtype=np.int64)
    # the topic's hash seeds the ledger's, which seeds the entry's
    hashed = _xxh64_longs(entries, _xxh64_longs(ledgers, by_topic[indices]))
    return hashed.view(np.int64)


# ---------------------------------------------------------------------- the trace


def load_trace(uri: str) -> pa.Table:
    """Every trace file under ``uri``, as one table in (broker, seq) order, its
    dictionary columns plain strings (as the trace DataFrame has them)."""
    fs, _ = trace_io.filesystem(uri)
    tables = [pq.read_table(path, filesystem=fs) for path in trace_io.parquet_files(uri, "trace-")]
    table = pa.concat_tables([jobs_conform(table) for table in tables])
    return table.sort_by([("broker", "ascending"), ("seq", "ascending")])


def jobs_conform(table: pa.Table) -> pa.Table:
    """A file's table with the trace DataFrame's columns and types (``jobs.TRACE_SCHEMA``)."""
    columns = []
    for field in jobs.TRACE_SCHEMA:
        if field.name in table.schema.names:
            columns.append(pc.cast(table.column(field.name), field.type))
        else:
            columns.append(pa.nulls(table.num_rows, field.type))
    return pa.Table.from_arrays(columns, schema=jobs.TRACE_SCHEMA)


def reads_with_sizes(trace: pa.Table) -> pa.Table:
    """``jobs.reads_with_sizes``: the reads, a missing size from the entry's add or
    fill rows (the largest), in (broker, seq) order."""
    keys = ["topic", "ledger", "entry"]
    kinds = trace.column("kind")
    sized = trace.filter(pc.and_(pc.is_in(kinds, pa.array(["add", "fill"])),
                                 pc.is_valid(trace.column("size"))))  # fmt: skip
    known = sized.group_by(keys).aggregate([("size", "max")]).rename_columns([*keys, "known_size"])
    reads = trace.filter(pc.equal(kinds, "read"))
    joined = reads.join(known, keys, join_type="left outer")
    size = pc.coalesce(joined.column("size"), joined.column("known_size"))
    joined = joined.set_column(joined.schema.get_field_index("size"), "size", size)
    joined = joined.drop_columns(["known_size"]).select(trace.schema.names)
    return joined.sort_by([("broker", "ascending"), ("seq", "ascending")])


def _ints(table: pa.Table, name: str, null: int = -1) -> np.ndarray:
    column = pc.fill_null(table.column(name), null)
    return np.asarray(column.to_numpy(), dtype=np.int64)


def next_reads(trace: pa.Table, reads: pa.Table) -> pa.Table:
    """``jobs.next_reads``' rows: adds, reads and restarts in (broker, seq) order, each
    access with its key and the seq of the entry's next read by the same broker."""
    columns = ["broker", "seq", "kind", "topic", "ledger", "entry", "size"]
    adds = trace.filter(pc.equal(trace.column("kind"), "add")).select(columns)
    accesses = pa.concat_tables([adds, reads.select(columns)])
    keys = spark_xxhash64(
        accesses.column("topic").combine_chunks(),
        _ints(accesses, "ledger"),
        _ints(accesses, "entry"),
    )
    brokers = _ints(accesses, "broker")
    seqs = _ints(accesses, "seq")
    is_read = np.asarray(pc.equal(accesses.column("kind"), "read").to_numpy(), dtype=bool)
    # by (broker, key, seq): an access's next read is the first read after it in its group
    order = np.lexsort((seqs, keys, brokers))
    sorted_reads = np.flatnonzero(is_read[order])
    following = np.searchsorted(sorted_reads, np.arange(len(order)), side="right")
    upcoming = np.full(len(order), -1, dtype=np.int64)
    found = following < len(sorted_reads)
    candidate = np.where(found, sorted_reads[np.minimum(following, len(sorted_reads) - 1)], 0)
    same = (
        found
        & (keys[order][candidate] == keys[order])
        & (brokers[order][candidate] == brokers[order])
    )
    upcoming[same] = seqs[order][candidate[same]]
    next_read = np.full(len(order), -1, dtype=np.int64)
    next_read[order] = upcoming
    annotated = pa.table(
        {
            "broker": accesses.column("broker"),
            "seq": accesses.column("seq"),
            "kind": accesses.column("kind"),
            "key": pa.array(keys, pa.int64()),
            "size": accesses.column("size"),
            "next_read": pa.array(next_read, pa.int64(), mask=next_read < 0),
        }
    )
    restarts = trace.filter(pc.equal(trace.column("kind"), "restart"))
    marks = pa.table(
        {
            "broker": restarts.column("broker"),
            "seq": restarts.column("seq"),
            "kind": restarts.column("kind"),
            "key": pa.nulls(restarts.num_rows, pa.int64()),
            "size": pa.nulls(restarts.num_rows, pa.int32()),
            "next_read": pa.nulls(restarts.num_rows, pa.int64()),
        }
    )
    both = pa.concat_tables([annotated, marks])
    return both.sort_by([("broker", "ascending"), ("seq", "ascending")])


# ---------------------------------------------------------------------- statistics


def statistics(trace: pa.Table, reads: pa.Table, window: int) -> dict[str, pa.Table]:
    """``jobs.trace_statistics`` with pyarrow: read patterns, reuse, the working set."""
    entry = ["broker", "topic", "ledger", "entry"]
    adds = trace.filter(pc.equal(trace.column("kind"), "add")).select([*entry, "ts_ns"])
    adds = adds.rename_columns([*entry, "added_ns"])
    joined = reads.join(adds, entry, join_type="left outer")
    ts = _ints(joined, "ts_ns")
    added = _ints(joined, "added_ns", -(1 << 62))
    has_add = np.asarray(pc.is_valid(joined.column("added_ns")).to_numpy(), dtype=bool)
    replay = np.asarray(pc.fill_null(joined.column("replay"), False).to_numpy(), dtype=bool)
    tailing = has_add & (ts - added < jobs.TAILING_LAG_NS)
    pattern = np.where(replay, "replay", np.where(tailing, "tailing", "catch-up"))
    patterns = (
        joined.append_column("pattern", pa.array(pattern))
        .append_column("hit_count", pc.cast(joined.column("hit"), pa.int64()))
        .group_by(["topic", "subscription", "pattern"])
        .aggregate([("seq", "count"), ("hit_count", "sum"), ("size", "sum")])
        .rename_columns(["topic", "subscription", "pattern", "reads", "hits", "bytes"])
    )
    patterns = patterns.cast(
        pa.schema(
            [
                ("topic", pa.string()),
                ("subscription", pa.string()),
                ("pattern", pa.string()),
                ("reads", pa.int64()),
                ("hits", pa.int64()),
                ("bytes", pa.int64()),
            ]
        )
    )
    # reuse: the events and seconds since the same broker's previous read of the entry
    keys = spark_xxhash64(
        reads.column("topic").combine_chunks(), _ints(reads, "ledger"), _ints(reads, "entry")
    )
    brokers, seqs, times = _ints(reads, "broker"), _ints(reads, "seq"), _ints(reads, "ts_ns")
    order = np.lexsort((seqs, keys, brokers))
    k, b, s, t = keys[order], brokers[order], seqs[order], times[order]
    again = np.flatnonzero((k[1:] == k[:-1]) & (b[1:] == b[:-1])) + 1
    gaps = s[again] - s[again - 1]
    buckets = (2 ** np.floor(np.log2(gaps.astype(np.float64)))).astype(np.int64)
    seconds = (t[again] - t[again - 1]) / 1e9
    reuse = (
        pa.table({"events_bucket": buckets, "seconds": seconds})
        .group_by("events_bucket")
        .aggregate([("seconds", "count"), ("seconds", "mean")])
        .rename_columns(["events_bucket", "reads", "mean_seconds"])
    )
    # the working set per window: distinct entries (any broker) and their bytes
    width = window * 1_000_000_000
    second = (times // width) * window
    windows = reads.select(["topic", "ledger", "entry", "size"]).append_column(
        "second", pa.array(second, pa.int64())
    )
    distinct = windows.group_by(["second", "topic", "ledger", "entry"]).aggregate([("size", "max")])
    working_set = (
        distinct.group_by("second")
        .aggregate([([], "count_all"), ("size_max", "sum")])
        .rename_columns(["second", "entries", "bytes"])
        .select(["second", "entries", "bytes"])
    )
    working_set = working_set.append_column(
        "window_seconds", pa.array([window] * working_set.num_rows, pa.int64())
    )
    return {"patterns": patterns, "reuse": reuse, "working_set": working_set}


# ---------------------------------------------------------------------- the analysis


def analyze_single(options: AnalyzeOptions) -> dict[str, Any]:
    """``pipeline.analyze.analyze``'s outputs and summary, in this process; the
    summary's ``phaseSeconds`` times each phase."""
    phases: dict[str, float] = {}
    started = mark = time.monotonic()

    def lap(name: str) -> None:
        nonlocal mark
        now = time.monotonic()
        phases[name] = phases.get(name, 0.0) + now - mark
        mark = now

    trace_uri = trace_io.resolve_uri(options.trace_uri)
    out = trace_io.resolve_uri(options.out_uri)
    meta = trace_io.read_json(trace_uri, META_FILE)
    settings = trace_settings(meta, trace_uri)
    trace = load_trace(trace_uri)
    reads = reads_with_sizes(trace)
    events = trace.num_rows
    last_ns = int(pc.max(trace.column("ts_ns")).as_py() or 0)
    per_broker = (
        reads.group_by(["broker", "topic", "ledger", "entry"])
        .aggregate([("size", "max")])
        .group_by("broker")
        .aggregate([("size_max", "sum")])
    )
    working = int(pc.max(per_broker.column("size_max_sum")).as_py() or 0) if per_broker.num_rows \
        else 0  # fmt: skip
    lap("trace extent and working set")
    sizes, specs = sweep_cells(options, working, meta, settings)
    live_design = meta.get("implementation")
    live_size = settings.get("max_size_bytes")
    sample_rate = sample_rate_for(trace_uri, specs, options.sample_rate)
    rows = [result.as_row() for result in replay_uri(trace_uri, specs, sample_rate,
                                                     raise_rate=False)]  # fmt: skip
    lap("sweep")
    accesses = next_reads(trace, reads)
    trace_io.write_table(trace_io.join_uri(out, "next_reads"), accesses)
    lap("next_reads: accesses with their next reads")
    batches = accesses.to_batches(max_chunksize=trace_io.BATCH_ROWS)
    bound_run = BoundRun(sizes)
    for batch in batches:
        bound_run.feed_batch(batch)
    bound_rows = [result.as_row() for result in bound_run.results()]
    lap("bound")
    policies = list(reference.POLICIES) if reference.available() else []
    reference_rows: list[dict[str, Any]] = []
    if policies:
        runs = reference.BatchReferences(policies, sizes)
        for batch in batches:
            runs.feed_batch(batch)
        reference_rows = [result.as_row() for result in runs.results()]
        trace_io.write_table(trace_io.join_uri(out, "references"), result_table(reference_rows))
    trace_io.write_table(trace_io.join_uri(out, "sweep"), result_table(rows))
    trace_io.write_table(trace_io.join_uri(out, "bound"), result_table(bound_rows))
    lap("references (libcachesim, driver)")
    window = jobs.window_seconds(last_ns)
    found = statistics(trace, reads, window)
    for name in ("patterns", "reuse", "working_set"):
        trace_io.write_table(trace_io.join_uri(out, name), found[name])
    patterns = found["patterns"]
    most = patterns.sort_by(
        [
            ("reads", "descending"),
            ("topic", "ascending"),
            ("subscription", "ascending"),
            ("pattern", "ascending"),
        ]
    ).slice(0, REPORT_PATTERN_ROWS)
    by_kind = (
        patterns.group_by("pattern")
        .aggregate([("reads", "sum"), ("hits", "sum"), ("pattern", "count")])
        .rename_columns(["pattern", "reads", "hits", "rows"])
        .select(["pattern", "reads", "hits", "rows"])
    )
    collected = {
        "patterns": most.to_pylist(),
        "patterns_by_kind": sorted(by_kind.to_pylist(), key=lambda row: row["pattern"]),
        "reuse": sorted(found["reuse"].to_pylist(), key=lambda row: row["events_bucket"]),
        "working_set": sorted(found["working_set"].to_pylist(), key=lambda row: row["second"]),
    }
    lap("statistics")
    summary: dict[str, Any] = {
        "trace": trace_uri,
        "out": out,
        "events": events,
        "brokers": len(trace_io.trace_brokers(trace_uri)),
        "workingSetBytes": working,
        "workingSetWindowSeconds": window,
        "sizes": sizes,
        "sampleRate": sample_rate,
        "sampleRateAsked": options.sample_rate,
        "live": {"design": live_design, "sizeBytes": live_size},
        "sweep": sorted(rows, key=lambda r: (r["design"], r["size_bytes"], r["live"])),
        "bound": bound_rows,
        "references": sorted(reference_rows, key=lambda r: (r["design"], r["size_bytes"])),
        "statistics": collected,
        "patternRows": patterns.num_rows,
        "ranking": ranking(rows),
        "sweepSeconds": round(phases["sweep"], 3),
        "referencesRanOn": "driver" if policies else None,
    }
    from pipeline.report import write_report

    summary["seconds"] = round(time.monotonic() - started, 3)
    write_report(summary, trace_io.join_uri(out, "report.html"))
    lap("report")
    summary["phaseSeconds"] = {name: round(value, 3) for name, value in phases.items()}
    summary["seconds"] = round(time.monotonic() - started, 3)
    return summary
