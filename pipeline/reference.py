"""Reference policies from libcachesim (LRU, S3-FIFO, ARC, W-TinyLFU) on the same
request stream, when the optional ``reference`` extra is installed.

They are general-purpose caches, not broker designs: every added entry goes through
them as a request whose result is not counted (so, like the broker designs, they can
keep what was just written), and every read is a counted request. Sizes are bytes.
As for the bound (``pipeline.belady``), each broker of a trace has a cache of its own,
of the full capacity, which starts again empty at each of the broker's restarts.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipeline.outcome import CacheOutcome

POLICIES = ("LRU", "S3FIFO", "ARC", "WTinyLFU")
#: libcachesim's hash table: 2^20 buckets, not the default 2^24 that dominates small runs
HASHPOWER = 20
UINT64 = (1 << 64) - 1


def available() -> bool:
    try:
        import libcachesim  # noqa: F401
    except ImportError:
        return False
    return True


@dataclasses.dataclass(kw_only=True)
class ReferenceResult(CacheOutcome):
    design: str
    size_bytes: int


def simulate(rows: Iterable[dict[str, Any]], policy: str, capacity: int) -> ReferenceResult:
    """Rows in (``broker``, ``seq``) order with ``kind`` (add, read or restart), ``key``
    and ``size``; a row without ``broker`` is broker 0's."""
    run = ReferenceRun(policy, [capacity])
    run.feed(rows)
    return run.results()[0]


class ReferenceRun:
    """``policy`` at several capacities in one pass: rows (as :func:`simulate` takes
    them) are fed in order, in as many calls as the caller likes (a batch at a time),
    each row to every capacity's cache. Each capacity has a cache and a request of its
    own, so it counts what a run of that capacity alone counts. O(rows x capacities)
    calls into libcachesim."""

    __slots__ = (
        "_broker",
        "_caches",
        "_capacities",
        "_clock",
        "_counts",
        "_make",
        "_requests",
        "policy",
    )

    def __init__(self, policy: str, capacities: Sequence[int]) -> None:
        import libcachesim

        self._make = getattr(libcachesim, policy)
        self.policy = policy
        self._capacities = list(capacities)
        self._caches: list[Any] = []
        self._requests = [libcachesim.Request() for _ in capacities]
        #: per capacity: hits, misses, hit bytes, miss bytes
        self._counts = [[0, 0, 0, 0] for _ in capacities]
        self._broker: Any = None
        #: the request's time: the row's position in the stream (restarts included)
        self._clock = 0

    def feed(self, rows: Iterable[dict[str, Any]]) -> None:
        requests, counts = self._requests, self._counts
        for row in rows:
            clock = self._clock
            self._clock += 1
            kind = row["kind"]
            if not self._caches or row.get("broker", 0) != self._broker or kind == "restart":
                # another broker's caches, or this one's again empty
                self._broker = row.get("broker", 0)
                self._caches = [self._make(size, hashpower=HASHPOWER) for size in self._capacities]
                if kind == "restart":
                    continue
            size = row["size"]
            key = row["key"] & UINT64
            read = kind == "read"
            for cache, request, count in zip(self._caches, requests, counts, strict=True):
                request.obj_id = key
                request.obj_size = size
                request.clock_time = clock
                hit = cache.get(request)
                if not read:
                    continue
                if hit:
                    count[0] += 1
                    count[2] += size
                else:
                    count[1] += 1
                    count[3] += size

    def results(self) -> list[ReferenceResult]:
        """The counts so far, one result per capacity, in the order given."""
        return [
            ReferenceResult(
                design=self.policy,
                size_bytes=capacity,
                hits=hits,
                misses=misses,
                hit_bytes=hit_bytes,
                miss_bytes=miss_bytes,
            )
            for capacity, (hits, misses, hit_bytes, miss_bytes) in zip(
                self._capacities, self._counts, strict=True
            )
        ]


#: libCacheSim's oracleGeneral record: clock time, object id, size, next access (packed)
ORACLE_GENERAL = np.dtype(
    [("clock_time", "<u4"), ("obj_id", "<u8"), ("obj_size", "<u4"), ("next_access", "<i8")]
)


class BatchReferences:
    """Every ``policy`` at every capacity over the accesses of ``next_reads``, fed a
    record batch at a time (columns ``kind``, ``key``, ``size`` and, for a trace of
    several brokers, ``broker``; the rows in (``broker``, ``seq``) order), counting what
    :class:`ReferenceRun` counts row by row, through libcachesim's own trace reader.

    Each broker's stretch between restarts (a *segment*: one cache's life) is written as
    a libCacheSim ``oracleGeneral`` file, and each (policy, capacity) is a fresh cache
    that replays the file in libcachesim's C loop (``process_trace``), which returns the
    miss ratio and byte miss ratio of all the segment's requests. The reads' counts
    follow from those: an added entry is new to its broker's cache (an entry is added
    once, and the cache starts empty at each restart), so every add is a miss, never a
    hit. A segment where an added key was seen before (not met in a broker's trace; a
    64-bit key collision) is counted row by row instead, as :class:`ReferenceRun` does.

    Cost: O(rows) numpy work and one file write per segment, then O(rows) C work per
    cell; memory: one segment's four columns (16 bytes a row) and its file (24)."""

    __slots__ = ("_broker", "_capacities", "_chunks", "_counts", "policies")

    def __init__(self, policies: Sequence[str], capacities: Sequence[int]) -> None:
        self.policies = list(policies)
        self._capacities = list(capacities)
        #: per (policy, capacity): hits, misses, hit bytes, miss bytes
        self._counts = {
            (policy, capacity): [0, 0, 0, 0] for policy in policies for capacity in capacities
        }
        #: the current segment's (keys, sizes, reads) pieces
        self._chunks: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self._broker: int | None = None

    def feed_batch(self, batch: pa.RecordBatch) -> None:
        """The next rows, in order. O(rows) numpy work (plus a segment's runs, when a
        restart or another broker's first row ends it)."""
        rows = batch.num_rows
        if rows == 0:
            return
        kinds = batch.column("kind")
        if isinstance(kinds.type, pa.DictionaryType):
            kinds = kinds.dictionary_decode()
        reads = np.asarray(pc.equal(kinds, "read").to_numpy(zero_copy_only=False), dtype=bool)
        restarts = np.asarray(pc.equal(kinds, "restart").to_numpy(zero_copy_only=False), dtype=bool)
        if "broker" in batch.schema.names:
            brokers = np.asarray(
                pc.fill_null(batch.column("broker"), 0).to_numpy(zero_copy_only=False),
                dtype=np.int64,
            )
        else:
            brokers = np.zeros(rows, dtype=np.int64)
        keys = np.asarray(
            pc.fill_null(batch.column("key"), 0).to_numpy(zero_copy_only=False), dtype=np.int64
        ).view(np.uint64)
        sizes = np.asarray(
            pc.fill_null(batch.column("size"), 0).to_numpy(zero_copy_only=False), dtype=np.int64
        )
        # a segment ends before a restart row and before another broker's first row
        previous = np.empty(rows, dtype=np.int64)
        previous[0] = brokers[0] if self._broker is None else self._broker
        previous[1:] = brokers[:-1]
        cuts = np.flatnonzero(restarts | (brokers != previous)).tolist()
        start = 0
        for cut in [*cuts, rows]:
            if cut > start:
                piece = slice(start, cut)
                self._chunks.append((keys[piece], sizes[piece], reads[piece]))
            if cut < rows:
                self._flush()
                # a restart row is the cut itself: the rows after it are the next segment
                start = cut + 1 if restarts[cut] else cut
        self._broker = int(brokers[-1])

    def results(self) -> list[ReferenceResult]:
        """The counts (the segment in progress included), per policy then capacity."""
        self._flush()
        return [
            ReferenceResult(
                design=policy,
                size_bytes=capacity,
                hits=hits,
                misses=misses,
                hit_bytes=hit_bytes,
                miss_bytes=miss_bytes,
            )
            for policy in self.policies
            for capacity in self._capacities
            for hits, misses, hit_bytes, miss_bytes in [self._counts[policy, capacity]]
        ]

    def _flush(self) -> None:
        chunks, self._chunks = self._chunks, []
        if not chunks:
            return
        keys = np.concatenate([chunk[0] for chunk in chunks])
        sizes = np.concatenate([chunk[1] for chunk in chunks])
        reads = np.concatenate([chunk[2] for chunk in chunks])
        adds = ~reads
        _, first = np.unique(keys, return_index=True)
        fresh = np.zeros(len(keys), dtype=bool)
        fresh[first] = True
        if (adds & ~fresh).any():
            self._count_rows(keys, sizes, reads)
            return
        added, added_bytes = int(adds.sum()), int(sizes[adds].sum())
        requests, request_bytes = len(keys), int(sizes.sum())
        import libcachesim

        path = self._write(keys, sizes)
        try:
            reader = libcachesim.TraceReader(
                path,
                libcachesim.TraceType.ORACLE_GENERAL_TRACE,
                libcachesim.ReaderInitParam(ignore_obj_size=False, ignore_size_zero_req=False),
            )
            for (policy, capacity), count in self._counts.items():
                cache = getattr(libcachesim, policy)(capacity, hashpower=HASHPOWER)
                miss_ratio, byte_miss_ratio = cache.process_trace(reader)
                misses = round(miss_ratio * requests)
                miss_bytes = round(byte_miss_ratio * request_bytes)
                # adds are all misses: the rest are the reads'
                count[0] += requests - misses
                count[1] += misses - added
                count[2] += request_bytes - miss_bytes
                count[3] += miss_bytes - added_bytes
        finally:
            os.unlink(path)

    @staticmethod
    def _write(keys: np.ndarray, sizes: np.ndarray) -> str:
        """The segment as a temporary oracleGeneral file; its path."""
        records = np.zeros(len(keys), dtype=ORACLE_GENERAL)
        # the request's time: its position in the segment (the policies have no TTL)
        records["clock_time"] = np.arange(len(keys), dtype=np.uint32)
        records["obj_id"] = keys
        records["obj_size"] = sizes
        records["next_access"] = -1
        handle, path = tempfile.mkstemp(prefix="brokerlab-", suffix=".oracleGeneral")
        with os.fdopen(handle, "wb") as stream:
            stream.write(records.tobytes())
        return path

    def _count_rows(self, keys: np.ndarray, sizes: np.ndarray, reads: np.ndarray) -> None:
        """One segment, row by row (the request API, as :class:`ReferenceRun`)."""
        rows = [
            {"kind": "read" if read else "add", "key": key, "size": size}
            for key, size, read in zip(keys.tolist(), sizes.tolist(), reads.tolist(), strict=True)
        ]
        for policy in self.policies:
            run = ReferenceRun(policy, self._capacities)
            run.feed(rows)
            for result in run.results():
                count = self._counts[policy, result.size_bytes]
                count[0] += result.hits
                count[1] += result.misses
                count[2] += result.hit_bytes
                count[3] += result.miss_bytes
