"""``brokerlab trace export``: a recorded trace's reads, written as libCacheSim's
oracleGeneral and csv traces, read back by libcachesim's own trace reader as the same
requests (count, entries, sizes, next accesses), and an LRU of libcachesim over the file
counts what ``pipeline.reference``'s LRU counts on the same reads. No Spark, no broker:
a cache event stream recorded on a manual clock."""

from __future__ import annotations

import pathlib
import random
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from broker.cache import CacheConfig, create_stream
from broker.cli import main as brokerlab
from broker.clock import EventClock, ManualClock
from broker.trace.recorder import SCHEMA, TraceRecorder, read_trace, trace_meta
from pipeline import reference
from pipeline.export import ORACLE_GENERAL, next_access_vtimes, read_requests

TOPICS = ("persistent://t/ns/a", "persistent://t/ns/b")
CONFIG = CacheConfig(max_size_bytes=6 * 1024, eviction_time_threshold_ms=60_000)
needs_libcachesim = pytest.mark.skipif(
    not reference.available(), reason="libcachesim: the reference extra"
)


def size_of(ledger: int, entry: int) -> int:
    return 100 + (ledger * 13 + entry * 37) % 400


def payloads(ledger: int, first: int, last: int) -> list[bytes]:
    return [b"x" * size_of(ledger, entry) for entry in range(first, last + 1)]


def record(directory: pathlib.Path, broker: int = 0, rounds: int = 40) -> None:
    """Two topics written a few entries at a time; a tailing reader of each, and a reader
    that reads back over older entries at random: hits, misses (filled from storage),
    entries read many times. The clock advances a quarter second per round."""
    clock = ManualClock()
    recorders: list[TraceRecorder] = []

    def recorder(event_clock: EventClock) -> TraceRecorder:
        recorders.append(
            TraceRecorder(
                directory,
                event_clock,
                roll_events=400,
                max_pending_files=1_000,
                broker=broker,
                meta=trace_meta("pip430", CONFIG, brokers=1),
            )
        )
        return recorders[0]

    stream = create_stream("pip430", CONFIG, clock, trace=recorder)
    chooser = random.Random(broker)
    topics = {name: stream.load_topic(name) for name in TOPICS}
    written = dict.fromkeys(TOPICS, 0)
    for _ in range(rounds):
        for number, (name, events) in enumerate(topics.items()):
            ledger, first, count = 3 + number, written[name], chooser.randint(1, 4)
            events.added(ledger, first, payloads(ledger, first, first + count - 1))
            written[name] += count
            for reader, start in (("tail", first), ("back", chooser.randrange(written[name]))):
                last = min(start + 3, written[name] - 1)
                plan = events.read(reader, ledger, start, last, False)
                for low, high in plan.own:
                    events.filled(ledger, low, payloads(ledger, low, high))
        clock.advance_ms(250)
    recorders[0].close()


#: the module's tests on one xdist worker, which makes its recorded trace (a module fixture)
#: once: each worker running some of them made its own
pytestmark = pytest.mark.xdist_group("test_export")


@pytest.fixture(scope="module")
def trace(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """One broker's trace, recorded once for the module's tests."""
    directory = tmp_path_factory.mktemp("export") / "trace"
    record(directory)
    return directory


def trace_reads(directory: pathlib.Path, broker: int = 0) -> list[dict[str, Any]]:
    rows = read_trace(directory).to_pylist()
    return [row for row in rows if row["kind"] == "read" and row["broker"] == broker]


def test_next_access_is_the_one_based_position_of_the_next_request() -> None:
    got = next_access_vtimes(np.array([7, 8, 7, 9, 7, 8], dtype=np.uint64))
    assert got.tolist() == [3, 6, 5, -1, -1, -1]
    assert ORACLE_GENERAL.itemsize == 24  # libCacheSim's packed record


@needs_libcachesim
def test_an_oracle_general_export_reads_back_as_the_trace_s_reads(
    tmp_path: pathlib.Path, trace: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import libcachesim

    reads = trace_reads(trace)
    assert any(row["hit"] for row in reads) and not all(row["hit"] for row in reads)
    out = tmp_path / "reads.oracleGeneral.bin"
    code = brokerlab(["trace", "export", str(trace), "--out", str(out)])
    assert code == 0
    assert f"{len(reads):,} requests" in capsys.readouterr().out
    assert out.stat().st_size == 24 * len(reads)

    exported = read_requests(str(trace))
    requests = list(libcachesim.TraceReader(str(out), libcachesim.TraceType.ORACLE_GENERAL_TRACE))
    assert len(requests) == len(reads)
    entries = [exported.entries[request.obj_id - 1] for request in requests]
    assert entries == [(row["topic"], row["ledger"], row["entry"]) for row in reads]
    assert [request.obj_size for request in requests] == [
        size_of(row["ledger"], row["entry"]) for row in reads
    ]
    assert [request.clock_time for request in requests] == [
        row["ts_ns"] // 1_000_000_000 for row in reads
    ]
    assert requests[-1].clock_time >= 9  # 40 rounds of a quarter second
    # the next access: the position (from 1) of the entry's next read, or none
    for position, request in enumerate(requests):
        later = [i for i in range(position + 1, len(reads)) if entries[i] == entries[position]]
        expected = later[0] + 1 if later else (1 << 63) - 1  # the reader's "never"
        assert request.next_access_vtime == expected


@needs_libcachesim
@pytest.mark.parametrize("capacity", [2_000, 8_000, 40_000])
def test_libcachesim_s_lru_on_the_export_counts_what_the_reference_lru_counts(
    tmp_path: pathlib.Path, trace: pathlib.Path, capacity: int
) -> None:
    import libcachesim

    out = tmp_path / "reads.bin"
    assert brokerlab(["trace", "export", str(trace), "--out", str(out)]) == 0
    reader = libcachesim.TraceReader(str(out), libcachesim.TraceType.ORACLE_GENERAL_TRACE)
    miss_ratio, byte_miss_ratio = libcachesim.LRU(capacity, hashpower=10).process_trace(reader)

    exported = read_requests(str(trace))
    ids = {entry: number + 1 for number, entry in enumerate(exported.entries)}
    rows = [
        {"kind": "read", "key": ids[row["topic"], row["ledger"], row["entry"]],
         "size": size_of(row["ledger"], row["entry"])}
        for row in trace_reads(trace)
    ]  # fmt: skip
    ours = reference.simulate(rows, "LRU", capacity)
    assert 0 < ours.hits < len(rows)  # both hits and misses at every capacity
    assert miss_ratio == pytest.approx(ours.misses / len(rows), abs=1e-12)
    assert byte_miss_ratio == pytest.approx(
        ours.miss_bytes / (ours.hit_bytes + ours.miss_bytes), abs=1e-12
    )


@needs_libcachesim
def test_a_csv_export_reads_back_with_the_documented_reader_options(
    tmp_path: pathlib.Path, trace: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import libcachesim

    out = tmp_path / "reads.csv"
    argv = ["trace", "export", str(trace), "--format", "csv", "--out", str(out)]
    assert brokerlab(argv) == 0
    printed = capsys.readouterr().out
    assert "time-col=1, obj-id-col=2, obj-size-col=3" in printed
    # what that -t string says, as the Python reader's parameters
    params = libcachesim.ReaderInitParam(
        has_header=True, has_header_set=True, delimiter=",", obj_id_is_num=True,
        obj_id_is_num_set=True,
    )  # fmt: skip
    params.time_field, params.obj_id_field, params.obj_size_field = 1, 2, 3
    requests = list(libcachesim.TraceReader(str(out), libcachesim.TraceType.CSV_TRACE, params))
    reads = trace_reads(trace)
    assert len(requests) == len(reads)
    assert [request.obj_size for request in requests] == [
        size_of(row["ledger"], row["entry"]) for row in reads
    ]
    lines = out.read_text().splitlines()
    assert lines[0] == "time,obj_id,obj_size,next_access_vtime,topic,ledger,entry"
    named = [tuple(line.split(",")[4:]) for line in lines[1:]]
    assert named == [(row["topic"], str(row["ledger"]), str(row["entry"])) for row in reads]
    ids: dict[tuple[str, ...], int] = {}
    for request, entry in zip(requests, named, strict=True):
        assert ids.setdefault(entry, request.obj_id) == request.obj_id  # one id per entry
    assert len(set(ids.values())) == len(ids)


def test_a_trace_of_two_brokers_exports_the_one_asked_for(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    two = tmp_path / "trace"
    record(two, broker=0, rounds=10)
    record(two, broker=1, rounds=20)
    out = tmp_path / "one.bin"
    assert brokerlab(["trace", "export", str(two), "--out", str(out)]) == 2
    error = capsys.readouterr().err
    assert "2 brokers" in error and "--broker" in error and len(error.splitlines()) == 1
    assert not out.exists()
    argv = ["trace", "export", str(two), "--out", str(out), "--broker", "1"]
    assert brokerlab(argv) == 0
    assert out.stat().st_size == 24 * len(trace_reads(two, broker=1))


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--out", "x.bin"], "no such directory"),
        (["--format", "parquet", "--out", "x.bin"], "unknown format 'parquet'"),
        (["--out", "x.bin", "--broker", "1"], "no such directory"),
    ],
)
def test_bad_input_is_one_line_and_exit_code_2(
    tmp_path: pathlib.Path,
    capsys: pytest.CaptureFixture[str],
    arguments: list[str],
    message: str,
) -> None:
    out = str(tmp_path / "x.bin")
    arguments = [out if argument == "x.bin" else argument for argument in arguments]
    assert brokerlab(["trace", "export", str(tmp_path / "nowhere"), *arguments]) == 2
    captured = capsys.readouterr()
    assert message in captured.err and "Traceback" not in captured.err
    assert len(captured.err.splitlines()) == 1 and captured.out == ""


def test_a_file_for_a_directory_and_a_missing_output_directory_are_one_line(
    tmp_path: pathlib.Path, trace: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "file").write_text("not a trace")
    assert brokerlab(["trace", "export", str(tmp_path / "file"), "--out", "x.bin"]) == 2
    assert capsys.readouterr().err.endswith("file: not a directory (give the trace's directory)\n")
    missing = tmp_path / "no" / "x.bin"
    assert brokerlab(["trace", "export", str(trace), "--out", str(missing)]) == 2
    error = capsys.readouterr().err
    assert f"cannot write {missing}: no directory {missing.parent}" in error
    assert len(error.splitlines()) == 1


def _rows(*rows: tuple[str, int | None, int | None, bool | None]) -> pa.Table:
    """A trace file's rows of (kind, entry, size, hit), one topic and ledger, a second
    apart."""
    full = []
    for seq, (kind, entry, size, hit) in enumerate(rows):
        row: dict[str, Any] = dict.fromkeys(SCHEMA.names)
        topic = None if kind == "restart" else TOPICS[0]
        row.update(broker=0, seq=seq, ts_ns=seq * 1_000_000_000, kind=kind, topic=topic,
                   ledger=None if entry is None else 7, entry=entry, last_entry=entry,
                   size=size, hit=hit)  # fmt: skip
        full.append(row)
    return pa.Table.from_pylist(full, schema=SCHEMA)


def test_reads_of_no_known_size_are_left_out_and_restarts_counted(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Entries stored before the recorder started: read (missed, no size), two filled
    from storage, one storage read failed; the broker restarts; the filled ones are read
    again (hits, with their sizes)."""
    trace = tmp_path / "trace"
    trace.mkdir()
    table = _rows(
        ("load", None, None, None),
        ("read", 0, None, False),
        ("read", 1, None, False),
        ("read", 2, None, False),
        ("fill", 0, 300, None),
        ("fill", 1, 400, None),
        ("fill_failed", 2, None, None),
        ("restart", None, None, None),
        ("read", 1, 400, True),
        ("read", 0, 300, True),
    )
    pq.write_table(table, trace / "trace-b0-000001.parquet")
    out = tmp_path / "reads.oracleGeneral.bin"
    assert brokerlab(["trace", "export", str(trace), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "4 requests, 3 objects" in printed
    assert "1 read of entries of no known size left out" in printed
    assert "1 restart not marked" in printed and "note:" not in printed
    records = np.fromfile(out, dtype=ORACLE_GENERAL)
    assert records["obj_id"].tolist() == [1, 2, 2, 1]
    assert records["obj_size"].tolist() == [300, 400, 400, 300]
    assert records["clock_time"].tolist() == [1, 2, 8, 9]
    assert records["next_access_vtime"].tolist() == [4, 3, -1, -1]
