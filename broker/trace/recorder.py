"""Access traces: what the broker's cache was asked, as Parquet files that a replay can
drive any cache design with. The format is documented in ``docs/trace-format.md``.

The hot path appends to column lists (no per-event objects beyond the values); every
``roll_events`` events the lists are handed to one writer thread that writes a Parquet
file (``trace-000001.parquet``, written under a temporary name and renamed, so readers
never see half a file). The buffer is bounded: while ``max_pending_files`` files wait
for the writer, new events are dropped and counted in ``dropped``, never silently.
"""

from __future__ import annotations

import concurrent.futures
import json
import logging
import os
import pathlib
import threading
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from broker.clock import Clock

log = logging.getLogger(__name__)

META_FILE = "trace-meta.json"
KINDS = (
    "add", "read", "release", "replay_add", "invalidate", "evict", "activate", "deactivate",
)  # fmt: skip

SCHEMA = pa.schema(
    [
        pa.field("seq", pa.int64(), nullable=False),
        pa.field("ts_ns", pa.int64(), nullable=False),
        pa.field("kind", pa.dictionary(pa.int8(), pa.string()), nullable=False),
        pa.field("topic", pa.dictionary(pa.int32(), pa.string()), nullable=False),
        pa.field("subscription", pa.dictionary(pa.int32(), pa.string())),
        pa.field("ledger", pa.int64()),
        pa.field("entry", pa.int64()),
        pa.field("last_entry", pa.int64()),
        pa.field("size", pa.int32()),
        pa.field("hit", pa.bool_()),
        pa.field("expected_reads", pa.int32()),
        pa.field("active_cursors", pa.int32()),
        pa.field("replay", pa.bool_()),
        pa.field("reason", pa.dictionary(pa.int8(), pa.string())),
    ]
)
COLUMNS = tuple(field.name for field in SCHEMA)


class TraceRecorder:
    """Appends events; rolls files; O(1) per event on the calling (event-loop) thread."""

    __slots__ = (
        "_clock",
        "_columns",
        "_count",
        "_directory",
        "_executor",
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
    ) -> None:
        if roll_events < 1 or max_pending_files < 1:
            raise ValueError("roll_events and max_pending_files must be at least 1")
        directory.mkdir(parents=True, exist_ok=True)
        (directory / META_FILE).write_text(json.dumps(meta or {}, indent=2, sort_keys=True))
        self._directory = directory
        self._clock = clock
        self._origin_ns = clock.monotonic_ns()
        self._roll = roll_events
        self._max_pending = max_pending_files
        self._columns: dict[str, list[Any]] = {name: [] for name in COLUMNS}
        self._count = 0
        self._seq = 0
        self._pending = 0
        self._lock = threading.Lock()
        self._executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="trace")
        #: events recorded (kept), dropped (buffer full), files written, write failures
        self.events = 0
        self.dropped = 0
        self.files = 0
        self.write_errors = 0
        self.closed = False

    @property
    def directory(self) -> pathlib.Path:
        return self._directory

    def _append(
        self,
        kind: str,
        topic: str,
        subscription: str | None,
        ledger: int | None,
        entry: int | None,
        last_entry: int | None,
        size: int | None,
        hit: bool | None,
        expected_reads: int | None,
        active_cursors: int | None,
        replay: bool | None,
        reason: str | None = None,
    ) -> None:
        if self.closed or self._pending >= self._max_pending:
            self.dropped += 1
            return
        columns = self._columns
        columns["seq"].append(self._seq)
        columns["ts_ns"].append(self._clock.monotonic_ns() - self._origin_ns)
        columns["kind"].append(kind)
        columns["topic"].append(topic)
        columns["subscription"].append(subscription)
        columns["ledger"].append(ledger)
        columns["entry"].append(entry)
        columns["last_entry"].append(last_entry)
        columns["size"].append(size)
        columns["hit"].append(hit)
        columns["expected_reads"].append(expected_reads)
        columns["active_cursors"].append(active_cursors)
        columns["replay"].append(replay)
        columns["reason"].append(reason)
        self._seq += 1
        self.events += 1
        self._count += 1
        if self._count >= self._roll:
            self.flush()

    # ----------------------------------------------------------------- the events

    def add(
        self,
        topic: str,
        ledger: int,
        entry: int,
        size: int,
        active_cursors: int,
        expected_reads: int | None,
    ) -> None:
        """An entry was added; ``expected_reads`` None: the live design did not cache it."""
        self._append(
            "add", topic, None, ledger, entry, None, size, None, expected_reads,
            active_cursors, None,
        )  # fmt: skip

    def read(
        self,
        topic: str,
        subscription: str,
        ledger: int,
        entry: int,
        size: int,
        hit: bool,
        expected_reads: int,
        replay: bool,
        last_entry: int,
    ) -> None:
        """A reader asked for an entry: a hit, or a miss read from storage and offered to
        the cache with ``expected_reads``; ``replay``: from the replay queue;
        ``last_entry``: the last entry of the range it was read with (the rows of one
        range read are consecutive, in entry order)."""
        self._append(
            "read", topic, subscription, ledger, entry, last_entry, size, hit,
            expected_reads, None, replay,
        )  # fmt: skip

    def release(self, topic: str, subscription: str, ledger: int, entry: int) -> None:
        """An entry was handed to a consumer: one expected read happened."""
        self._append(
            "release", topic, subscription, ledger, entry, None, None, None, None, None, None
        )

    def replay_add(self, topic: str, subscription: str, ledger: int, entry: int) -> None:
        """An entry went back to a subscription's replay queue (one more expected read)."""
        self._append(
            "replay_add", topic, subscription, ledger, entry, None, None, None, None, None, None
        )

    def invalidate(self, topic: str, ledger: int, first: int | None, last: int | None) -> None:
        """Entries ``first..last`` of ``ledger`` left the cache because no reader needs
        them (None, None: the whole ledger; ledger -1: the whole topic, unloaded)."""
        self._append("invalidate", topic, None, ledger, first, last, None, None, None, None, None)

    def evict(self, topic: str, ledger: int, entry: int, size: int, reason: str) -> None:
        """The live design evicted an entry (``reason``: ttl or size). Replays recompute
        evictions for each design; these rows show what the live one did."""
        self._append(
            "evict", topic, None, ledger, entry, None, size, None, None, None, None, reason
        )

    def cursor_active(self, topic: str, subscription: str, active: bool) -> None:
        self._append(
            "activate" if active else "deactivate", topic, subscription, None, None, None,
            None, None, None, None, None,
        )  # fmt: skip

    # ---------------------------------------------------------------- files

    def flush(self) -> None:
        """Hand the buffered events to the writer (no wait)."""
        if not self._count:
            return
        columns, self._columns = self._columns, {name: [] for name in COLUMNS}
        self._count = 0
        self.files += 1
        path = self._directory / f"trace-{self.files:06d}.parquet"
        with self._lock:
            self._pending += 1
        self._executor.submit(self._write, path, columns)

    def _write(self, path: pathlib.Path, columns: dict[str, list[Any]]) -> None:
        try:
            table = pa.Table.from_pydict(columns, schema=SCHEMA)
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
        self._executor.shutdown(wait=True)

    def stats(self) -> dict[str, Any]:
        return {
            "enabled": True,
            "directory": str(self._directory),
            "events": self.events,
            "dropped": self.dropped,
            "files": self.files - self._pending,
            "pendingFiles": self._pending,
            "writeErrors": self.write_errors,
        }


def read_trace(directory: pathlib.Path | str) -> pa.Table:
    """Every complete file of a trace directory as one table, in event order (for tests
    and small traces; the pipeline reads the files with Spark)."""
    files = sorted(pathlib.Path(directory).glob("trace-*.parquet"))
    if not files:
        return SCHEMA.empty_table()
    return pa.concat_tables(pq.read_table(path, schema=SCHEMA) for path in files)


def read_meta(directory: pathlib.Path | str) -> dict[str, Any]:
    """The live cache's design and settings recorded with a trace ({} if absent)."""
    path = pathlib.Path(directory) / META_FILE
    return dict(json.loads(path.read_text())) if path.exists() else {}
