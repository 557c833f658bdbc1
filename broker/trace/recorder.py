"""Access traces: the cache event stream of a broker (``broker/cache/stream.py``) as
Parquet files, which a replay feeds back to any cache design. The format is documented
in ``docs/trace-format.md``.

The hot path extends column lists in bulk (one call per column per event, whatever the
number of entries it names); every ``roll_events`` rows the lists are handed to one
writer thread that writes a Parquet file (``trace-b0-000001.parquet`` for broker 0,
written under a temporary name and renamed, so readers never see half a file). The
buffer is bounded: while ``max_pending_files`` files wait for the writer, new events are
dropped and counted in ``dropped``, never silently.

Several brokers (a cluster in one process) record into one directory, one recorder
each: every row carries its recorder's ``broker`` index, and so does every file name.
A recorder outlives its broker's restarts: ``restart`` marks where the broker's cache
starts again empty.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import json
import logging
import os
import pathlib
import re
import threading
from collections.abc import Sequence
from itertools import repeat
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from broker.cache.api import CursorCheck, Pos
from broker.cache.config import CacheConfig
from broker.clock import Clock

log = logging.getLogger(__name__)

META_FILE = "trace-meta.json"
#: the trace format; a replay refuses other versions
FORMAT = 3
KINDS = (
    "load", "unload", "add", "read", "fill", "fill_failed", "release", "replay_add",
    "activate", "deactivate", "move", "check", "trim", "tick", "evict", "restart",
)  # fmt: skip
#: the largest broker index (the ``broker`` column is an int16)
MAX_BROKER = 2**15 - 1
#: a trace file's name: ``trace-b<broker>-<number>.parquet``
FILE_NAME = re.compile(r"^trace-b(\d+)-(\d+)\.parquet$")

SCHEMA = pa.schema(
    [
        pa.field("broker", pa.int16(), nullable=False),
        pa.field("seq", pa.int64(), nullable=False),
        pa.field("ts_ns", pa.int64(), nullable=False),
        pa.field("kind", pa.dictionary(pa.int8(), pa.string()), nullable=False),
        pa.field("topic", pa.dictionary(pa.int32(), pa.string())),
        pa.field("subscription", pa.dictionary(pa.int32(), pa.string())),
        pa.field("ledger", pa.int64()),
        pa.field("entry", pa.int64()),
        pa.field("last_entry", pa.int64()),
        pa.field("size", pa.int32()),
        pa.field("hit", pa.bool_()),
        pa.field("replay", pa.bool_()),
        pa.field("md_ledger", pa.int64()),
        pa.field("md_entry", pa.int64()),
        pa.field("entries_to_read", pa.int64()),
        pa.field("has_consumers", pa.bool_()),
        pa.field("reason", pa.dictionary(pa.int8(), pa.string())),
    ]
)
COLUMNS = tuple(field.name for field in SCHEMA)
#: the columns a recorder buffers row by row (``broker`` is one value per recorder,
#: added when a file is written)
_BUFFERED = COLUMNS[1:]
#: the columns an event may set (``seq``, ``ts_ns``, ``kind`` and ``topic`` are always set)
_OPTIONAL = _BUFFERED[4:]


def file_prefix(broker: int) -> str:
    """The name prefix of one broker's files (``trace-b1-``): ``pipeline.trace_io``
    streams one broker's events by it."""
    return f"trace-b{broker}-"


def file_name(broker: int, number: int) -> str:
    return f"{file_prefix(broker)}{number:06d}.parquet"


def trace_meta(implementation: str, settings: CacheConfig, brokers: int = 1) -> dict[str, Any]:
    """What ``trace-meta.json`` records: the format, the live design and its settings,
    so a replay can rebuild the live design at the live size, and the number of brokers
    recording into the directory (each with its own cache of these settings)."""
    return {
        "format": FORMAT,
        "implementation": implementation,
        "settings": dataclasses.asdict(settings),
        "brokers": brokers,
    }


class TraceRecorder:
    """Appends events; rolls files; O(1) per event on the calling (event-loop) thread.

    ``broker``: the index of the broker whose cache events this recorder records (0 for
    a single broker); recorders of different brokers may share a directory. ``clock``
    is the broker's cache event clock (``broker.cache.stream.CacheEventStream.clock``),
    so a row's ``ts_ns`` is the instant the designs saw for the event."""

    __slots__ = (
        "_broker",
        "_clock",
        "_columns",
        "_count",
        "_directory",
        "_executor",
        "_lists",
        "_lock",
        "_max_pending",
        "_origin_ns",
        "_pending",
        "_roll",
        "_seq",
        "closed",
        "dropped",
        "events",
        "files",
        "write_errors",
    )

    def __init__(
        self,
        directory: pathlib.Path,
        clock: Clock,
        roll_events: int = 100_000,
        max_pending_files: int = 4,
        meta: dict[str, Any] | None = None,
        broker: int = 0,
        threaded: bool = True,
    ) -> None:
        """``threaded``: files are written on a thread of their own (the live broker's
        loop never waits on Parquet); False: each is written when it rolls, on the
        caller's thread (virtual time, where a thread would race the clock and events
        dropped while it is behind would differ from run to run)."""
        if roll_events < 1 or max_pending_files < 1:
            raise ValueError("roll_events and max_pending_files must be at least 1")
        if not 0 <= broker <= MAX_BROKER:
            raise ValueError(f"broker must be between 0 and {MAX_BROKER}")
        directory.mkdir(parents=True, exist_ok=True)
        # Every recorder of the directory writes the meta file; the brokers of a cluster
        # pass the same content. Written whole under a name of its own, then renamed: a
        # reader (or another broker's recorder) never sees half of it.
        partial = directory / f"{META_FILE}.b{broker}.{os.getpid()}.partial"
        partial.write_text(json.dumps(meta or {}, indent=2, sort_keys=True))
        os.replace(partial, directory / META_FILE)
        self._directory = directory
        self._broker = broker
        self._clock = clock
        self._origin_ns = clock.monotonic_ns()
        self._roll = roll_events
        self._max_pending = max_pending_files
        self._columns: dict[str, list[Any]] = {name: [] for name in _BUFFERED}
        #: the same lists in _BUFFERED order, for single-row appends
        self._lists = tuple(self._columns.values())
        self._count = 0
        self._seq = 0
        self._pending = 0
        self._lock = threading.Lock()
        self._executor = (
            concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="trace")
            if threaded
            else None
        )
        #: events recorded (kept), dropped (buffer full), files written, write failures
        self.events = 0
        self.dropped = 0
        self.files = 0
        self.write_errors = 0
        self.closed = False

    @property
    def directory(self) -> pathlib.Path:
        return self._directory

    @property
    def broker(self) -> int:
        return self._broker

    def _row(
        self,
        kind: str,
        topic: str | None,
        subscription: str | None = None,
        ledger: int | None = None,
        entry: int | None = None,
        last_entry: int | None = None,
        size: int | None = None,
        md_ledger: int | None = None,
        md_entry: int | None = None,
        entries_to_read: int | None = None,
        reason: str | None = None,
    ) -> None:
        """Append one row (the columns not named are null). O(1): about 20 list appends,
        for the events that happen once per entry handed over or per cursor move."""
        if self.closed or self._pending >= self._max_pending:
            self.dropped += 1
            return
        (
            seq, ts_ns, kinds, topics, subscriptions, ledgers, entries, last_entries, sizes,
            hits, replays, md_ledgers, md_entries, to_read, consumers, reasons,
        ) = self._lists  # fmt: skip
        seq.append(self._seq)
        ts_ns.append(self._clock.monotonic_ns() - self._origin_ns)
        kinds.append(kind)
        topics.append(topic)
        subscriptions.append(subscription)
        ledgers.append(ledger)
        entries.append(entry)
        last_entries.append(last_entry)
        sizes.append(size)
        hits.append(None)
        replays.append(None)
        md_ledgers.append(md_ledger)
        md_entries.append(md_entry)
        to_read.append(entries_to_read)
        consumers.append(None)
        reasons.append(reason)
        self._seq += 1
        self.events += 1
        self._count += 1
        if self._count >= self._roll:
            self.flush()

    def _rows(self, kind: str, count: int, topic: str | None, **values: Any) -> None:
        """Append ``count`` rows of ``kind``: each named column takes a sequence of
        ``count`` values or one value for every row; the others are null. O(count) in C
        loops plus O(columns) Python calls per event, for events that name many entries."""
        if self.closed or self._pending >= self._max_pending:
            self.dropped += count
            return
        columns = self._columns
        columns["seq"].extend(range(self._seq, self._seq + count))
        columns["ts_ns"].extend(repeat(self._clock.monotonic_ns() - self._origin_ns, count))
        columns["kind"].extend(repeat(kind, count))
        columns["topic"].extend(repeat(topic, count))
        for name in _OPTIONAL:
            value = values.get(name)
            if isinstance(value, (list, range, tuple)):
                columns[name].extend(value)
            else:
                columns[name].extend(repeat(value, count))
        self._seq += count
        self.events += count
        self._count += count
        if self._count >= self._roll:
            self.flush()

    # ----------------------------------------------------------------- the events
    # One method per cache event (``broker.cache.stream.TraceSink``).

    def load(self, topic: str) -> None:
        self._row("load", topic)

    def unload(self, topic: str) -> None:
        self._row("unload", topic)

    def add(self, topic: str, ledger: int, first: int, sizes: Sequence[int]) -> None:
        count = len(sizes)
        entries = range(first, first + count)
        self._rows(
            "add", count, topic, ledger=ledger, entry=entries, last_entry=first + count - 1,
            size=list(sizes),
        )  # fmt: skip

    def read(
        self,
        topic: str,
        reader: str,
        ledger: int,
        first: int,
        last: int,
        replay: bool,
        hits: dict[int, int],
    ) -> None:
        """One row per entry of the range, each naming the range's last entry; a hit
        carries its size (the live design held it), a miss none."""
        entries = range(first, last + 1)
        self._rows(
            "read",
            last - first + 1,
            topic,
            subscription=reader,
            ledger=ledger,
            entry=entries,
            last_entry=last,
            size=[hits.get(entry) for entry in entries],
            hit=[entry in hits for entry in entries],
            replay=replay,
        )

    def fill(self, topic: str, ledger: int, first: int, sizes: Sequence[int]) -> None:
        count = len(sizes)
        entries = range(first, first + count)
        self._rows(
            "fill", count, topic, ledger=ledger, entry=entries, last_entry=first + count - 1,
            size=list(sizes),
        )  # fmt: skip

    def fill_failed(self, topic: str, ledger: int, first: int, last: int) -> None:
        self._row("fill_failed", topic, None, ledger, first, last)

    def release(self, topic: str, reader: str, ledger: int, entry: int) -> None:
        self._row("release", topic, reader, ledger, entry)

    def replay_add(self, topic: str, reader: str, ledger: int, entry: int) -> None:
        self._row("replay_add", topic, reader, ledger, entry)

    def activate(
        self, topic: str, cursor: str, read: Pos, mark_delete: Pos, entries_to_read: int
    ) -> None:
        self._row(
            "activate", topic, cursor, read[0], read[1], None, None, mark_delete[0],
            mark_delete[1], entries_to_read,
        )  # fmt: skip

    def deactivate(self, topic: str, cursor: str) -> None:
        self._row("deactivate", topic, cursor)

    def move(self, topic: str, cursor: str, read: Pos, mark_delete: Pos) -> None:
        self._row(
            "move", topic, cursor, read[0], read[1], None, None, mark_delete[0], mark_delete[1]
        )

    def check(self, topic: str, cursors: Sequence[CursorCheck]) -> None:
        """One row per cursor; ``entry`` numbers them and ``last_entry`` names the last,
        so a replay hands the check to a design whole. A topic with no cursor gets one
        row with no subscription: the check still happened."""
        count = len(cursors)
        if not count:
            self._row("check", topic, None, None, 0, 0)
            return
        self._rows(
            "check",
            count,
            topic,
            subscription=[check.name for check in cursors],
            has_consumers=[check.has_consumers for check in cursors],
            entries_to_read=[check.entries_to_read for check in cursors],
            entry=range(count),
            last_entry=count - 1,
        )

    def trim(self, topic: str, ledger: int) -> None:
        self._row("trim", topic, None, ledger)

    def tick(self) -> None:
        self._row("tick", None)

    def evict(self, topic: str, ledger: int, entry: int, size: int, reason: str) -> None:
        """The live design evicted an entry (``reason``: ttl or size). Replays recompute
        evictions for each design; these rows show what the live one did."""
        self._row("evict", topic, None, ledger, entry, None, size, reason=reason)

    def restart(self, clock: Clock | None = None) -> TraceRecorder:
        """The broker restarted: its cache is a new, empty one (a new stream with new
        design instances) from here on, and a replay starts a fresh instance of each
        design at this row. ``seq`` goes on from where it was; ``ts_ns`` too, counted
        from the same origin.

        ``clock``: the new stream's event clock, which the designs now read (the old
        stream's clock no longer moves); the row's time is read from it. The recorder
        returns itself, so it is the new stream's trace factory as it stands::

            stream = create_stream(design, config, clock, shadows, trace=recorder.restart)
        """
        if clock is not None:
            self._clock = clock
        self._row("restart", None)
        return self

    # ---------------------------------------------------------------- files

    def flush(self) -> None:
        """Hand the buffered events to the writer (no wait)."""
        if not self._count:
            return
        columns, self._columns = self._columns, {name: [] for name in _BUFFERED}
        self._lists = tuple(self._columns.values())
        self._count = 0
        self.files += 1
        path = self._directory / file_name(self._broker, self.files)
        with self._lock:
            self._pending += 1
        if self._executor is None:
            self._write(path, columns)
        else:
            self._executor.submit(self._write, path, columns)

    def _write(self, path: pathlib.Path, columns: dict[str, list[Any]]) -> None:
        try:
            rows = len(columns["seq"])
            broker = pa.repeat(pa.scalar(self._broker, pa.int16()), rows)
            table = pa.Table.from_pydict({"broker": broker, **columns}, schema=SCHEMA)
            partial = path.with_suffix(".parquet.partial")
            pq.write_table(table, partial, compression="zstd")
            os.replace(partial, path)
        except Exception:  # a trace failure must not take the broker down
            log.exception("trace: writing %s failed", path)
            with self._lock:
                self.write_errors += 1
        finally:
            with self._lock:
                self._pending -= 1

    def close(self) -> None:
        """Write what is buffered and wait for the writer; later events are dropped."""
        if self.closed:
            return
        self.flush()
        self.closed = True
        if self._executor is not None:
            self._executor.shutdown(wait=True)

    def stats(self) -> dict[str, Any]:
        return {
            "enabled": True,
            "directory": str(self._directory),
            "broker": self._broker,
            "events": self.events,
            "dropped": self.dropped,
            "files": self.files - self._pending,
            "pendingFiles": self._pending,
            "writeErrors": self.write_errors,
        }


def trace_files(directory: pathlib.Path | str) -> list[tuple[int, pathlib.Path]]:
    """The complete files of a trace directory as (broker, path), ordered by broker and
    then by number: each broker's events in ``seq`` order. ValueError for a file of an
    older format (``trace-000001.parquet``: no broker in its name)."""
    found = []
    for path in pathlib.Path(directory).glob("trace-*.parquet"):
        match = FILE_NAME.match(path.name)
        if match is None:
            raise ValueError(
                f"{path}: not a trace file of format {FORMAT} (trace-b<broker>-<n>.parquet); "
                "record the trace again with this brokerlab"
            )
        found.append((int(match.group(1)), int(match.group(2)), path))
    return [(broker, path) for broker, _, path in sorted(found)]


def trace_brokers(directory: pathlib.Path | str) -> list[int]:
    """The brokers that wrote files into a trace directory, in order."""
    return sorted({broker for broker, _ in trace_files(directory)})


def read_trace(directory: pathlib.Path | str) -> pa.Table:
    """Every complete file of a trace directory as one table, ordered by (broker, seq)
    (for tests and small traces; the pipeline reads the files with Spark)."""
    files = trace_files(directory)
    if not files:
        return SCHEMA.empty_table()
    return pa.concat_tables(pq.read_table(path, schema=SCHEMA) for _, path in files)


def read_meta(directory: pathlib.Path | str) -> dict[str, Any]:
    """The live cache's design and settings recorded with a trace ({} if absent)."""
    path = pathlib.Path(directory) / META_FILE
    return dict(json.loads(path.read_text())) if path.exists() else {}
