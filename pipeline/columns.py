"""Trace rows to cache events, column-wise: the fast path of every replay.

A trace is one row per entry of an event (``docs/trace-format.md``); the design units
take one call per event. The first replay turned each row into a Python dict and
gathered rows in Python: about 7 µs a row before the design did anything. Here each
Arrow record batch is cut into events with numpy (where an event ends, which rows
continue it), only the values an event needs become Python objects, and the result is a
list of small tuples that any number of design instances then consume: a task that
replays several (design, size) cells decodes the trace once.

The events are exactly those ``pipeline.replay.EventFeeder`` makes from the same rows,
in the same order and at the same times: the rows of an ``add``, ``read``, ``fill`` or
``check`` are consecutive and the last carries ``entry == last_entry``; a row that does
not continue the event in progress (rows dropped) ends it early. The tests replay the
same traces both ways and compare every counter.

Miniature simulation (Waldspurger et al., "Cache Modeling and Optimization using
Miniature Simulations", USENIX ATC 2017): with ``sample_rate`` < 1 only the entries
whose hash of (topic, ledger, entry) falls under the rate are kept, every event about
an entry is cut down to the sampled entries of its range (each a single-entry event,
as a range may no longer be contiguous), and the events about cursors, topics and the
eviction timer are all kept. The replay then runs a cache of ``size * rate`` bytes; its
hit ratio estimates the full cache's. The hash is spatial (the same entry is always in
or always out, whichever broker, batch or run reads it), so reuse is preserved.

A miniature cache must still hold enough entries to behave as the full one does: a
2 MiB cache sampled at 0.01 holds some twenty 1 KiB entries, and there the designs'
per-ledger and per-segment rules are not what they are at full size (measured on the
``rolling-restart`` preset: 1.5 to 4.7 points off at 0.01, under 1 point once the
miniature cache holds about a hundred entries). :func:`effective_sample_rate` therefore
raises the rate until the smallest cache replayed holds ``MIN_SAMPLED_ENTRIES`` entries
of the trace's mean size, and until the sample is expected to hold
``MIN_SAMPLE_POPULATION`` of the trace's entries: fewer, and the estimate is noise. On a
20 s ``catchup`` trace of 107,000 entries, twelve disjoint samples at each rate (windows
of the hash space) were off by: at 0.01 (1,070 entries sampled) 1.0 to 1.2 points (one
standard deviation, by design), up to 4.1, and 0.5 to 0.9 too high on average; at 0.025
(2,700) 0.4 to 0.7, up to 1.6; at 0.05 (5,350) 0.4 to 0.7, up to 1.0, unbiased. A trace
too small for the rate asked is thus replayed at a higher one, up to whole; results
report the rate used. Traces worth sampling (a million entries and more) are sampled at
the rate asked.

Cost: O(rows) numpy work per batch plus O(events) Python work; memory: one batch and
its events.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from broker.cache.api import CursorCheck

# event codes, the first item of every event tuple
ADD, READ, FILL, CHECK = 0, 1, 2, 3
TICK, RESTART, LOAD, UNLOAD, RELEASE, REPLAY_ADD = 4, 5, 6, 7, 8, 9
MOVE, ACTIVATE, DEACTIVATE, FILL_FAILED, TRIM, IGNORED = 10, 11, 12, 13, 14, 15

_CODES = {
    "add": ADD,
    "read": READ,
    "fill": FILL,
    "check": CHECK,
    "tick": TICK,
    "restart": RESTART,
    "load": LOAD,
    "unload": UNLOAD,
    "release": RELEASE,
    "replay_add": REPLAY_ADD,
    "move": MOVE,
    "activate": ACTIVATE,
    "deactivate": DEACTIVATE,
    "fill_failed": FILL_FAILED,
    "trim": TRIM,
}
#: kinds whose events span several rows
_GROUPED_CODES = (ADD, READ, FILL, CHECK)
#: kinds about entries, which sampling thins
_ENTRY_CODES = (ADD, READ, FILL, RELEASE, REPLAY_ADD, FILL_FAILED)

#: the columns an event may need
COLUMNS = (
    "ts_ns", "kind", "topic", "subscription", "ledger", "entry", "last_entry", "size",
    "hit", "md_ledger", "md_entry", "entries_to_read", "has_consumers",
)  # fmt: skip

#: the fewest entries (of the trace's mean size) a miniature cache holds
MIN_SAMPLED_ENTRIES = 200
#: the fewest of the trace's entries a sample is expected to hold
MIN_SAMPLE_POPULATION = 5000

#: sampling resolution: an entry is sampled when its 24-bit hash is under rate * 2^24
_SAMPLE_BITS = 24
_MASK64 = np.uint64((1 << 64) - 1)


def _ints(batch: pa.RecordBatch, name: str) -> np.ndarray:
    """An integer column as int64 numpy, nulls as -1."""
    return np.asarray(pc.fill_null(batch.column(name), -1).to_numpy(zero_copy_only=False),
                      dtype=np.int64)  # fmt: skip


def _codes(column: pa.Array, table: dict[str, int], missing: int) -> tuple[np.ndarray, list[Any]]:
    """A dictionary column: its indices (nulls -1) and its values as Python objects;
    ``table`` maps values to codes when given."""
    if not isinstance(column.type, pa.DictionaryType):
        column = column.dictionary_encode()
    indices = np.asarray(
        pc.fill_null(column.indices, -1).to_numpy(zero_copy_only=False), dtype=np.int64
    )
    values = column.dictionary.to_pylist()
    if table:
        lookup = np.array([table.get(value, missing) for value in values] + [missing])
        return lookup[indices], values  # index -1 reads the trailing ``missing``
    return indices, values


def _mix(values: np.ndarray) -> np.ndarray:
    """splitmix64's finalizer, element-wise on uint64 (wrapping)."""
    with np.errstate(over="ignore"):
        values = (values ^ (values >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        values = (values ^ (values >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return values ^ (values >> np.uint64(31))


def entry_hashes(topic_hashes: np.ndarray, ledgers: np.ndarray, entries: np.ndarray) -> np.ndarray:
    """A 64-bit hash of each (topic, ledger, entry); ``topic_hashes`` are the topics'
    CRC32s (stable across batches, brokers and runs)."""
    with np.errstate(over="ignore"):
        mixed = _mix(topic_hashes.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)
                     ^ ledgers.astype(np.uint64))  # fmt: skip
        return _mix(mixed ^ (entries.astype(np.uint64) * np.uint64(0xD6E8FEB86659FD93)))


class EventDecoder:
    """Cuts one broker's record batches (in order) into event tuples. An event whose rows
    run past the end of a batch is carried into the next one. ``sample_rate`` < 1 keeps
    the sampled entries only (see the module docstring).

    The tuples, by code (``ts`` the event's time, ``topic`` a string):

    - ``(ADD|FILL, ts, topic, ledger, first, sizes)``
    - ``(READ, ts, topic, subscription, ledger, first, last, available)``
    - ``(CHECK, ts, topic, [CursorCheck, ...])``
    - ``(TICK|RESTART, ts)``, ``(LOAD|UNLOAD, ts, topic)``
    - ``(RELEASE, ts, topic, ledger, entries, times)``: consecutive releases of one
      ledger's entries (``times[i]`` the time of ``entries[i]``, ``ts`` the first); a
      trace is about a quarter releases, one row each, and a tuple per run rather than
      per row is most of the decoder's saving
    - ``(REPLAY_ADD, ts, topic, ledger, entry)``, ``(TRIM, ts, topic, ledger)``
    - ``(MOVE, ts, topic, subscription, read_position, mark_delete)``
    - ``(ACTIVATE, ts, topic, subscription, read_position, mark_delete, entries_to_read)``
    - ``(DEACTIVATE, ts, topic, subscription)``
    - ``(FILL_FAILED, ts, topic, ledger, first, last)``

    Tuples, lists and dicts in events are shared by every consumer and never changed.
    """

    __slots__ = ("_carry", "_threshold", "rows", "sample_rate")

    def __init__(self, sample_rate: float = 1.0) -> None:
        if not 0 < sample_rate <= 1:
            raise ValueError(f"sample rate {sample_rate}: in (0, 1]")
        self.sample_rate = sample_rate
        self._threshold = int(sample_rate * (1 << _SAMPLE_BITS))
        self._carry: pa.RecordBatch | None = None
        #: rows decoded so far (sampled out or not)
        self.rows = 0

    def decode(self, batch: pa.RecordBatch, final: bool = False) -> list[tuple[Any, ...]]:
        """The events that end in ``batch`` (an event still open at its end waits for
        the next batch, unless ``final``)."""
        batch = batch.select(list(COLUMNS))
        if self._carry is not None:
            batch = _concat(self._carry, batch)
            self._carry = None
        rows = batch.num_rows
        if rows == 0:
            return []
        ops, _ = _codes(batch.column("kind"), _CODES, IGNORED)
        entries = _ints(batch, "entry")
        lasts = _ints(batch, "last_entry")
        ledgers = _ints(batch, "ledger")
        topic_ids, topics = _codes(batch.column("topic"), {}, -1)
        sub_ids, subscriptions = _codes(batch.column("subscription"), {}, -1)
        grouped = np.isin(ops, _GROUPED_CODES)
        releases = ops == RELEASE
        # row r continues into row r+1: the same event, cut as EventFeeder cuts it, or
        # the same run of releases of one ledger's entries
        cont = np.zeros(rows, dtype=bool)
        if rows > 1:
            nxt = slice(1, None)
            cur = slice(None, -1)
            same_ledger = (topic_ids[nxt] == topic_ids[cur]) & (ledgers[nxt] == ledgers[cur])
            cont[cur] = (
                grouped[cur]
                & (ops[nxt] == ops[cur])
                & (entries[cur] != lasts[cur])
                & (entries[nxt] == entries[cur] + 1)
                & (lasts[nxt] == lasts[cur])
                & same_ledger
                & ((ops[cur] == CHECK) | (sub_ids[nxt] == sub_ids[cur]))
            ) | (releases[cur] & releases[nxt] & same_ledger)
        ends = np.flatnonzero(~cont)  # the last row always ends an event here
        rows_done = rows
        if not final and ((grouped[-1] and entries[-1] != lasts[-1]) or releases[-1]):
            # the last event (or run of releases) may go on in the next batch: keep its
            # rows for then, so the events do not depend on where batches are cut
            ends = ends[:-1]
            rows_done = int(ends[-1]) + 1 if len(ends) else 0
            self._carry = batch.slice(rows_done)
        self.rows += rows_done
        if len(ends) == 0:
            return []
        starts = np.empty_like(ends)
        starts[0] = 0
        starts[1:] = ends[:-1] + 1
        ts = np.asarray(batch.column("ts_ns").to_numpy(zero_copy_only=False), dtype=np.int64)
        # rows that become Python values: not the "evict" rows (the live design's
        # output, not an input: a fifth of a trace, gone here rather than one by one),
        # and, sampling, only the sampled rows of events about entries
        keep = (ops != IGNORED)[:rows_done]
        sampling = self._threshold < 1 << _SAMPLE_BITS
        if sampling:
            # each sampled row of an event about entries becomes an event of its own at
            # its event's time (a run of releases stays a run, each at its own time);
            # every row of the other events is kept. Most of the trace goes here, at
            # small rates, before any Python work
            topic_hashes = np.array(
                [zlib.crc32(topic.encode()) for topic in topics] + [0], dtype=np.uint64
            )
            hashes = entry_hashes(topic_hashes[topic_ids], ledgers, entries)
            sampled = (hashes >> np.uint64(64 - _SAMPLE_BITS)) < np.uint64(self._threshold)
            thinned = np.isin(ops, (ADD, READ, FILL, RELEASE, REPLAY_ADD))
            keep &= (sampled | ~thinned)[:rows_done]
        rows_kept: np.ndarray | None = None
        if not keep.all():
            rows_kept = np.flatnonzero(keep)
            if len(rows_kept) == 0:
                return []
            event_start = np.repeat(starts, ends - starts + 1)[rows_kept]
            begins = (
                (thinned & ~releases)[rows_kept] if sampling else np.zeros_like(keep[rows_kept])
            )
            begins[0] = True
            begins[1:] |= event_start[1:] != event_start[:-1]
            starts = np.flatnonzero(begins)
            ends = np.empty_like(starts)
            ends[:-1] = starts[1:] - 1
            ends[-1] = len(rows_kept) - 1
            ts = np.where(releases[rows_kept], ts[rows_kept], ts[event_start])
            ops, topic_ids, sub_ids = ops[rows_kept], topic_ids[rows_kept], sub_ids[rows_kept]
            ledgers, entries = ledgers[rows_kept], entries[rows_kept]
            lasts = lasts[rows_kept]
        return self._events(batch, rows_kept, ts, ops, starts, ends, topics, topic_ids,
                            subscriptions, sub_ids, ledgers, entries, lasts)  # fmt: skip

    def finish(self) -> list[tuple[Any, ...]]:
        """The events of rows left open at the end of the trace (rows dropped)."""
        carry = self._carry
        if carry is None:
            return []
        self._carry = None
        return self.decode(carry, final=True)

    def _events(
        self,
        batch: pa.RecordBatch,
        rows_kept: np.ndarray | None,
        ts_ns: np.ndarray,
        ops: np.ndarray,
        starts: np.ndarray,
        ends: np.ndarray,
        topics: list[Any],
        topic_ids: np.ndarray,
        subscriptions: list[Any],
        sub_ids: np.ndarray,
        ledgers: np.ndarray,
        entries: np.ndarray,
        lasts: np.ndarray,
    ) -> list[tuple[Any, ...]]:
        """The event tuples of the events ``starts[i]..ends[i]``: indices in the arrays
        given, which are ``batch``'s rows ``rows_kept`` (None: all of them)."""

        def column(name: str, null: int | bool) -> list[Any]:
            values = pc.fill_null(batch.column(name), null).to_numpy(zero_copy_only=False)
            return (values if rows_kept is None else values[rows_kept]).tolist()

        ts = ts_ns.tolist()
        sampling = self._threshold < 1 << _SAMPLE_BITS
        sizes = column("size", 0)
        hits = column("hit", False)
        op_list = ops.tolist()
        topic_list = topic_ids.tolist()
        sub_list = sub_ids.tolist()
        ledger_list = ledgers.tolist()
        entry_list = entries.tolist()
        last_list = lasts.tolist()
        md_ledgers = md_entries = to_read = consumers = None
        events: list[tuple[Any, ...]] = []
        append = events.append
        for start, end in zip(starts.tolist(), ends.tolist(), strict=True):
            op = op_list[start]
            t = ts[start]
            topic = topics[topic_list[start]] if topic_list[start] >= 0 else None
            if op == RELEASE:
                append((op, t, topic, ledger_list[start], entry_list[start : end + 1],
                        ts[start : end + 1]))  # fmt: skip
            elif op == REPLAY_ADD:
                append((op, t, topic, ledger_list[start], entry_list[start]))
            elif op == READ:
                available = {entry_list[r]: sizes[r] for r in range(start, end + 1) if hits[r]}
                append((op, t, topic, subscriptions[sub_list[start]], ledger_list[start],
                        entry_list[start], entry_list[end], available))  # fmt: skip
            elif op in (ADD, FILL):
                append((op, t, topic, ledger_list[start], entry_list[start],
                        sizes[start : end + 1]))  # fmt: skip
            elif op in (MOVE, ACTIVATE):
                if md_ledgers is None:
                    md_ledgers = column("md_ledger", -1)
                    md_entries = column("md_entry", -1)
                    to_read = column("entries_to_read", -1)
                assert md_entries is not None and to_read is not None
                event: tuple[Any, ...] = (
                    op, t, topic, subscriptions[sub_list[start]],
                    (ledger_list[start], entry_list[start]),
                    (md_ledgers[start], md_entries[start]),
                )  # fmt: skip
                append((*event, to_read[start]) if op == ACTIVATE else event)
            elif op == CHECK:
                if to_read is None:
                    md_ledgers = column("md_ledger", -1)
                    md_entries = column("md_entry", -1)
                    to_read = column("entries_to_read", -1)
                if consumers is None:
                    consumers = column("has_consumers", False)
                checks = [
                    CursorCheck(subscriptions[sub_list[r]], consumers[r], to_read[r])
                    for r in range(start, end + 1)
                    if sub_list[r] >= 0  # a check of a topic with no cursor
                ]
                append((op, t, topic, checks))
            elif op in (TICK, RESTART):
                append((op, t))
            elif op in (LOAD, UNLOAD):
                append((op, t, topic))
            elif op == DEACTIVATE:
                append((op, t, topic, subscriptions[sub_list[start]]))
            elif op == FILL_FAILED:
                ledger, first, last = ledger_list[start], entry_list[start], last_list[start]
                if not sampling:
                    append((op, t, topic, ledger, first, last))
                else:
                    # the sampled entries of the failed range, each alone
                    low = np.arange(first, last + 1, dtype=np.int64)
                    topic_hash = np.full(len(low), zlib.crc32(str(topic).encode()), dtype=np.uint64)
                    mask = entry_hashes(topic_hash, np.full(len(low), ledger), low)
                    chosen = (mask >> np.uint64(64 - _SAMPLE_BITS)) < np.uint64(self._threshold)
                    for entry in low[chosen].tolist():
                        append((op, t, topic, ledger, entry, entry))
            elif op == TRIM:
                append((op, t, topic, ledger_list[start]))
            # IGNORED: "evict" rows are the live design's output, not an input
        return events


def _concat(first: pa.RecordBatch, second: pa.RecordBatch) -> pa.RecordBatch:
    """Two batches of the same columns as one (dictionaries unified)."""
    table = pa.Table.from_batches([first]).cast(second.schema) if first.schema != second.schema \
        else pa.Table.from_batches([first])  # fmt: skip
    combined = pa.concat_tables([table, pa.Table.from_batches([second])]).unify_dictionaries()
    return combined.combine_chunks().to_batches()[0]


def decode_batches(
    batches: Iterable[pa.RecordBatch], sample_rate: float = 1.0
) -> Iterator[list[tuple[Any, ...]]]:
    """One broker's batches, in order, as lists of events (see :class:`EventDecoder`)."""
    decoder = EventDecoder(sample_rate)
    for batch in batches:
        events = decoder.decode(batch)
        if events:
            yield events
    tail = decoder.finish()
    if tail:
        yield tail


def mean_entry_bytes(batch: pa.RecordBatch) -> float:
    """The mean size of the entries a batch adds or fills (0 if none)."""
    kinds = batch.column("kind")
    if isinstance(kinds.type, pa.DictionaryType):
        kinds = kinds.dictionary_decode()
    sizes = batch.column("size").filter(pc.is_in(kinds, pa.array(["add", "fill"])))
    mean = pc.mean(sizes).as_py()
    return float(mean) if mean is not None else 0.0


def effective_sample_rate(
    requested: float, smallest_cache_bytes: int, entry_bytes: float, entries: int = 0
) -> float:
    """``requested``, raised (up to 1) until a cache of ``smallest_cache_bytes`` scaled
    by it holds ``MIN_SAMPLED_ENTRIES`` entries of ``entry_bytes``, and until a sample
    of a trace of ``entries`` entries (0: not known) holds ``MIN_SAMPLE_POPULATION``."""
    if requested >= 1:
        return 1.0
    needed = requested
    if smallest_cache_bytes > 0:
        needed = max(needed, MIN_SAMPLED_ENTRIES * entry_bytes / smallest_cache_bytes)
    if entries > 0:
        needed = max(needed, MIN_SAMPLE_POPULATION / entries)
    return min(1.0, needed)


def count_entries(kind_batches: Iterable[pa.RecordBatch]) -> int:
    """The entries of a trace, from its ``kind`` column: its ``add`` rows (one per entry
    stored) or, for a trace of reads of older entries, its ``fill`` rows if more."""
    adds = fills = 0
    for batch in kind_batches:
        kinds = batch.column(0)
        if isinstance(kinds.type, pa.DictionaryType):
            kinds = kinds.dictionary_decode()
        counts = {item["values"]: item["counts"] for item in pc.value_counts(kinds).to_pylist()}
        adds += counts.get("add", 0)
        fills += counts.get("fill", 0)
    return max(adds, fills)
