"""The access trace: the cache event stream as Parquet files, rolled, bounded (drops
counted, never silent), and complete enough to replay every design."""

from __future__ import annotations

import pathlib
import threading

import pytest

from broker.clock import EventClock, ManualClock
from broker.trace.recorder import FORMAT, TraceRecorder, read_meta, read_trace
from tests.conftest import in_process_broker


def test_files_roll_every_n_events_and_read_back_in_order(tmp_path: pathlib.Path) -> None:
    clock = ManualClock()
    recorder = TraceRecorder(tmp_path, clock, roll_events=3)
    for entry in range(7):
        clock.advance_ms(1)
        recorder.add("t", 5, entry, [100 + entry])
    recorder.close()
    files = sorted(p.name for p in tmp_path.glob("trace-*.parquet"))
    assert files == [f"trace-b0-{number:06d}.parquet" for number in (1, 2, 3)]
    table = read_trace(tmp_path).to_pylist()
    assert [row["entry"] for row in table] == list(range(7))
    assert [row["seq"] for row in table] == list(range(7))
    assert [row["ts_ns"] for row in table] == [(n + 1) * 1_000_000 for n in range(7)]
    assert {row["kind"] for row in table} == {"add"}
    assert table[4]["size"] == 104 and table[4]["last_entry"] == 4
    assert recorder.stats()["files"] == 3 and recorder.stats()["dropped"] == 0
    # no half-written files are left behind
    assert not list(tmp_path.glob("*.partial"))


def test_a_writer_that_falls_behind_drops_events_and_counts_them(tmp_path: pathlib.Path) -> None:
    recorder = TraceRecorder(tmp_path, ManualClock(), roll_events=2, max_pending_files=1)
    gate = threading.Event()
    # hold the writer thread: the first file waits behind this
    recorder._executor.submit(gate.wait)
    for entry in range(10):
        recorder.release("t", "s", 1, entry)
    # the first two filled a file that waits for the writer; the other eight were dropped
    assert recorder.stats()["pendingFiles"] == 1
    assert recorder.dropped == 8 and recorder.events == 2
    gate.set()
    recorder.close()
    rows = read_trace(tmp_path).to_pylist()
    assert [row["entry"] for row in rows] == [0, 1]
    assert recorder.stats()["dropped"] == 8


def test_a_bad_roll_size_is_refused(tmp_path: pathlib.Path) -> None:
    with pytest.raises(ValueError):
        TraceRecorder(tmp_path, ManualClock(), roll_events=0)


async def test_a_live_broker_records_its_cache_events(tmp_path: pathlib.Path) -> None:
    trace_dir = tmp_path / "trace"
    topic = "public/default/traced"
    # a TTL longer than the test: the tailing reads hit however slow the machine is
    async with in_process_broker(
        brokerlabTraceDir=str(trace_dir), managedLedgerCacheEvictionTimeThresholdMillis=120_000
    ) as client:
        consumer = await client.subscribe(
            topic, "sub", subscriptionType="Exclusive", subscriptionInitialPosition="Earliest"
        )
        status, _ = await client.request(
            "PUT", f"/admin/v2/persistent/{topic}/subscription/late?messageId=earliest"
        )
        assert status == 204
        ids = await client.produce(topic, [f"m{n}" for n in range(50)])
        got = await client.receive_until(consumer, 50)
        assert len(got) == 50
        await client.ack(consumer, ids)
        # after an unload the late subscription reads everything from storage
        status, _ = await client.request("POST", "/admin/v2/namespaces/public/default/unload")
        assert status == 204
        late = await client.subscribe(topic, "late", subscriptionType="Exclusive")
        assert len(await client.receive_until(late, 50)) == 50
        status, stats = await client.request("GET", "/admin/v2/broker-stats/trace")
        assert status == 200 and stats["enabled"] is True and stats["dropped"] == 0
        status, cache = await client.request("GET", "/admin/v2/broker-stats/cache")
    assert read_meta(trace_dir)["format"] == FORMAT
    rows = read_trace(trace_dir).to_pylist()
    by_kind: dict[str, list[dict]] = {}
    for row in rows:
        by_kind.setdefault(row["kind"], []).append(row)
    topic_name = f"persistent://{topic}"
    assert [r["topic"] for r in by_kind["load"]] == [topic_name] * 2, "loaded, unloaded, loaded"
    adds = by_kind["add"]
    assert len(adds) == 50
    assert all(row["topic"] == topic_name and row["size"] > 0 for row in adds)
    reads = by_kind["read"]
    assert sorted((r["ledger"], r["entry"]) for r in reads) == sorted(
        (a["ledger"], a["entry"]) for a in adds for _ in ("sub", "late")
    )
    assert {r["subscription"] for r in reads} == {"sub", "late"}
    # the trace's hits and storage reads are the cache's hits and misses
    assert sum(r["hit"] for r in reads) == cache["hits"] == 50
    assert len(by_kind["fill"]) == cache["misses"] == 50
    assert all(r["size"] is not None for r in reads if r["hit"])
    assert all(r["size"] is None for r in reads if not r["hit"])
    assert len(by_kind["release"]) == 100
    assert [r["subscription"] for r in by_kind["activate"]] == ["sub", "late"]
    moves = [r for r in by_kind["move"] if r["subscription"] == "sub"]
    last = adds[-1]
    assert (moves[-1]["md_ledger"], moves[-1]["md_entry"]) == (last["ledger"], last["entry"])
    # events are in time order
    assert [r["seq"] for r in rows] == sorted(r["seq"] for r in rows)
    assert [r["ts_ns"] for r in rows] == sorted(r["ts_ns"] for r in rows)
    # every eviction of the live design is a row, with its reason
    evictions = by_kind.get("evict", [])
    assert len(evictions) == cache["evicted"]["ttl"] + cache["evicted"]["size"]
    assert {r["reason"] for r in evictions} <= {"ttl", "size"}
    # the unload, and the broker closed the topic on shutdown
    assert [r["topic"] for r in by_kind["unload"]] == [topic_name] * 2


def test_the_eviction_timer_s_rounds_are_events_at_their_time(tmp_path: pathlib.Path) -> None:
    from broker.cache import CacheConfig, create_stream

    clock = ManualClock()
    recorders: list[TraceRecorder] = []

    def recorder(event_clock: EventClock) -> TraceRecorder:
        recorders.append(TraceRecorder(tmp_path, event_clock))
        return recorders[0]

    stream = create_stream("pip430", CacheConfig(), clock, trace=recorder)
    for _ in range(3):
        clock.advance_ms(10)
        stream.tick()
    recorders[0].close()
    rows = read_trace(tmp_path).to_pylist()
    assert [(row["kind"], row["ts_ns"]) for row in rows] == [
        ("tick", 10_000_000),
        ("tick", 20_000_000),
        ("tick", 30_000_000),
    ]


def test_brokers_share_a_directory_each_in_files_of_its_own(tmp_path: pathlib.Path) -> None:
    """Format 3: every row names its broker, every file too; the meta file records the
    number of brokers; read_trace orders the rows by (broker, seq)."""
    from broker.cache import CacheConfig
    from broker.trace.recorder import trace_brokers, trace_meta

    clock = ManualClock()
    meta = trace_meta("pip430", CacheConfig(), brokers=2)
    recorders = [
        TraceRecorder(tmp_path, clock, roll_events=2, meta=meta, broker=index) for index in (1, 0)
    ]
    for entry in range(3):
        clock.advance_ms(1)
        for recorder in recorders:
            recorder.add("t", 5 + recorder.broker, entry, [10])
    for recorder in recorders:
        recorder.close()
    assert sorted(p.name for p in tmp_path.glob("trace-*.parquet")) == [
        "trace-b0-000001.parquet",
        "trace-b0-000002.parquet",
        "trace-b1-000001.parquet",
        "trace-b1-000002.parquet",
    ]
    assert read_meta(tmp_path) == {**meta, "format": FORMAT} and meta["brokers"] == 2
    assert not list(tmp_path.glob("*.partial"))
    assert trace_brokers(tmp_path) == [0, 1]
    rows = read_trace(tmp_path).to_pylist()
    assert [(row["broker"], row["seq"]) for row in rows] == [
        (broker, seq) for broker in (0, 1) for seq in range(3)
    ]
    assert all(row["ledger"] == 5 + row["broker"] for row in rows)
    assert [recorder.stats()["broker"] for recorder in recorders] == [1, 0]
    with pytest.raises(ValueError):
        TraceRecorder(tmp_path, clock, broker=-1)


def test_a_restart_is_a_row_and_the_recorder_reads_the_new_stream_s_clock(
    tmp_path: pathlib.Path,
) -> None:
    """The broker's cache is replaced by a new stream with a clock of its own: the
    recorder goes on (seq and ts_ns go on) and reads the new clock from the restart on."""
    from broker.cache import CacheConfig, create_stream

    clock = ManualClock()
    made: list[TraceRecorder] = []

    def first(event_clock: EventClock) -> TraceRecorder:
        made.append(TraceRecorder(tmp_path, event_clock, broker=3))
        return made[0]

    stream = create_stream("pip430", CacheConfig(), clock, trace=first)
    recorder = made[0]
    clock.advance_ms(5)
    stream.tick()
    clock.advance_ms(5)
    stream = create_stream("pip430", CacheConfig(), clock, trace=recorder.restart)
    assert stream.trace is recorder
    clock.advance_ms(5)
    stream.tick()
    recorder.close()
    rows = read_trace(tmp_path).to_pylist()
    assert [(r["kind"], r["seq"], r["ts_ns"], r["broker"]) for r in rows] == [
        ("tick", 0, 5_000_000, 3),
        ("restart", 1, 10_000_000, 3),
        ("tick", 2, 15_000_000, 3),
    ]
    assert rows[1]["topic"] is None


def test_a_trace_of_an_older_format_is_refused(tmp_path: pathlib.Path) -> None:
    (tmp_path / "trace-000001.parquet").write_bytes(b"")
    with pytest.raises(ValueError, match="record the trace again"):
        read_trace(tmp_path)
