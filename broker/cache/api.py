"""The seams of a cache design, named as Pulsar names them.

A design is a whole unit (``broker/cache/unit.py``): a broker-wide
:class:`EntryCacheManager` with one :class:`EntryCache` per managed ledger (what is held
and evicted), plus a :class:`TopicPolicy` per managed ledger (the ledger-side rules:
which adds and storage reads are cached with how many expected reads, and what is
invalidated as cursors move). Both are driven by the topic's cache events.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

from broker.cache.entry import CachedEntry
from broker.cache.stats import CacheCounters

#: An inclusive range of entry ids of one ledger.
MissingRange = tuple[int, int]

#: A position as the designs see it: (ledger id, entry id).
Pos = tuple[int, int]


class EntryCache(Protocol):
    """The entries of one managed ledger that a design holds. ``data`` None holds only
    the size (shadows and replays)."""

    @property
    def name(self) -> str: ...

    def insert(
        self,
        ledger_id: int,
        first: int,
        datas: Sequence[bytes | memoryview] | None,
        sizes: Sequence[int],
        expected_reads: int,
        counts: Sequence[int] | None = None,
    ) -> None:
        """The write path: cache consecutive entries from ``first`` (a position already
        cached keeps its entry). ``counts``: each entry's messages as the produce path
        checked them, kept on the cached entry where the design keeps payloads (a read
        then needs no parse for it); None: not known."""
        ...

    def insert_from_read(
        self,
        ledger_id: int,
        entry_id: int,
        data: bytes | memoryview | None,
        size: int,
        expected_reads: int,
    ) -> None:
        """An entry read from storage, offered with the policy's ``expected_reads`` (> 0);
        a design that does not cache reads ignores it."""
        ...

    def get_range(
        self, ledger_id: int, first: int, last: int, hits: list[CachedEntry]
    ) -> list[MissingRange]:
        """Append cached entries of ``first..last`` to ``hits`` in order, count them as
        hits, and return the missing sub-ranges in order (the design's rule: partial
        hits, or all or nothing)."""
        ...

    def mark_read(self, ledger_id: int, entry_id: int) -> None:
        """An entry was handed to a consumer: one expected read happened."""
        ...

    def add_expected_read(self, ledger_id: int, entry_id: int) -> None:
        """The entry joined a replay queue: one more read is expected."""
        ...

    def invalidate_entries(self, ledger_id: int, entry_id: int) -> int:
        """Drop every entry strictly before ``(ledger_id, entry_id)``; returns how many."""
        ...

    def invalidate_all_entries(self, ledger_id: int) -> int:
        """Drop every entry of ``ledger_id`` (trimmed or deleted)."""
        ...

    def clear(self) -> None:
        """Drop every entry of this managed ledger."""
        ...

    def cached_entries(self) -> list[CachedEntry]:
        """What is held, in position order (tests and stats, not hot paths)."""
        ...


#: ``EntryCacheManager.quiet_until_ns`` of a design no round of the timer can change
QUIET_FOREVER = 1 << 62


class EntryCacheManager(Protocol):
    """The broker-wide side of a design: the per-ledger caches, the size limit, eviction."""

    implementation: str
    counters: CacheCounters
    #: readers that miss entries another reader is reading from storage wait for that
    #: read (Pulsar's PendingReadsManager) instead of reading them again
    shares_pending_reads: bool
    #: called with each entry evicted by TTL or size (the live design's trace rows)
    evict_listener: Callable[[CachedEntry, str], None] | None

    def get_entry_cache(self, name: str) -> EntryCache: ...

    def remove_entry_cache(self, name: str) -> None:
        """The topic was unloaded: its cache goes, as the design does it."""
        ...

    def after_insert(self) -> None:
        """After inserts: the size pass, if the cache is above its trigger."""
        ...

    def do_cache_eviction(self) -> None:
        """One round of the broker's eviction timer."""
        ...

    def quiet_until_ns(self) -> int | None:
        """The design-clock time until which a round of the eviction timer would do
        nothing (evict, requeue or count nothing): a round at a later time may act.
        ``QUIET_FOREVER`` while no round can act (nothing cached); None when the design
        cannot tell (a round may act at any time). O(1) amortized."""
        ...

    def stats(self) -> dict[str, Any]:
        """Counters since start, in the shape of ``GET /admin/v2/broker-stats/cache``."""
        ...


class CursorCheck:
    """One cursor as the broker's periodic check sees it (the stats period)."""

    __slots__ = ("entries_to_read", "has_consumers", "name")

    def __init__(self, name: str, has_consumers: bool, entries_to_read: int) -> None:
        self.name = name
        self.has_consumers = has_consumers
        #: entries from the read position to the end, not acknowledged (Pulsar's
        #: ``ManagedCursor.getNumberOfEntries``, what both of its checks compare)
        self.entries_to_read = entries_to_read


class TopicPolicy(Protocol):
    """A design's ledger-side rules for one managed ledger."""

    def added_reads(self) -> int | None:
        """Expected reads of entries just added, or None not to cache them."""
        ...

    def storage_read_reads(self, reader: str) -> int:
        """Expected reads of entries ``reader`` read from storage; <= 0: not cached."""
        ...

    def activated(
        self, cursor: str, read_position: Pos, mark_delete: Pos, entries_to_read: int
    ) -> None:
        """A consumer subscribed on ``cursor``."""
        ...

    def deactivated(self, cursor: str) -> None:
        """``cursor`` lost its last consumer (or was deleted)."""
        ...

    def moved(self, cursor: str, read_position: Pos, mark_delete: Pos) -> None:
        """``cursor``'s read or mark-delete position changed."""
        ...

    def checked(self, cursors: Sequence[CursorCheck]) -> None:
        """The broker's periodic check of the topic's cursors."""
        ...
