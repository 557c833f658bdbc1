"""PIP-430's removal queue: every cached entry of the broker in insertion order, and the
one eviction loop both of its passes run.

Pulsar's ``RangeCacheRemovalQueue``: an entry joins the tail when it is cached; eviction
only ever looks at the head. For the entry at the head a *rule* answers one of

- ``REMOVE``: evict it (its per-ledger cache drops it) and look at the next;
- ``REQUEUE``: give it another TTL: timestamp now, accessed flag cleared, one more
  requeue counted, moved to the tail;
- ``STOP``: leave it at the head and end the pass.

An entry already removed by other means (invalidation, a trimmed ledger) is flagged and
dropped when it reaches the head (Pulsar's ``MISSING``). The two passes differ only in
their rule:

- the timestamp pass: not expired -> STOP; expired -> REQUEUE if the entry may be kept,
  else REMOVE;
- the size pass: enough freed -> STOP; else REQUEUE if the entry may be kept, else
  REMOVE.

"May be kept" is :meth:`RangeCacheRemovalQueue.should_requeue`: accessed since the last
check with ``managedLedgerCacheEvictionExtendTTLOfRecentlyAccessed``, or expected reads
left (``expected_reads >= 1``) and requeued fewer than
``managedLedgerCacheEvictionExtendTTLOfEntriesWithRemainingExpectedReadsMaxTimes`` times.
Where the expected read counts come from: ``broker/cache/pip430.py``
(:class:`~broker.cache.pip430.ExpectedReadCounts`).

Costs: add O(1); a pass O(entries it looks at), whatever the number of ledgers; every
entry is requeued a bounded number of times per pass, so a pass always ends.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator

from broker.cache.entry import CachedEntry

#: called with each entry the queue evicts and the pass's reason ("ttl" or "size")
EvictListener = Callable[[CachedEntry, str], None]


class RangeCacheRemovalQueue:
    """The broker-wide FIFO of cached entries and its eviction loop."""

    __slots__ = ("_extend_accessed", "_max_requeues", "_queue", "add")

    def __init__(self, max_requeues: int, extend_recently_accessed: bool) -> None:
        self._queue: deque[CachedEntry] = deque()
        #: an entry was cached: it joins the tail. O(1). (The deque's own append: one
        #: call per cached entry, on the insert path.)
        self.add = self._queue.append
        self._max_requeues = max_requeues
        self._extend_accessed = extend_recently_accessed

    def __len__(self) -> int:
        """Entries queued, including removed ones not yet reached. O(1)."""
        return len(self._queue)

    def __iter__(self) -> Iterator[CachedEntry]:
        return iter(self._queue)

    def should_requeue(self, entry: CachedEntry) -> bool:
        """Whether the entry gets another TTL instead of eviction. O(1). (:meth:`evict`
        asks the same of each entry inline: it runs once per entry a pass looks at.)"""
        return (self._extend_accessed and entry.accessed) or (
            entry.expected_reads >= 1 and entry.requeue_count < self._max_requeues
        )

    def first_timestamp_ns(self) -> int | None:
        """The timestamp of the entry at the head, the first a pass looks at (removed
        entries before it are dropped, as a pass drops them); None when the queue is
        empty. O(1) amortized."""
        queue = self._queue
        while queue:
            entry = queue[0]
            if not entry.removed:
                return entry.timestamp_ns
            queue.popleft()
        return None

    # ------------------------------------------------------------------ the passes

    def evict_before(
        self, cutoff_ns: int, now_ns: int, listener: EvictListener | None
    ) -> tuple[int, int]:
        """The timestamp pass: entries cached before ``cutoff_ns``. Returns (entries
        removed, bytes freed)."""
        return self.evict(True, cutoff_ns, now_ns, listener, "ttl")

    def evict_size(
        self, size_to_free: int, now_ns: int, listener: EvictListener | None
    ) -> tuple[int, int]:
        """The size pass: free at least ``size_to_free`` bytes, or everything that may
        go. Returns (entries removed, bytes freed)."""
        return self.evict(False, size_to_free, now_ns, listener, "size")

    def evict(
        self,
        by_time: bool,
        limit: int,
        now_ns: int,
        listener: EvictListener | None,
        reason: str,
    ) -> tuple[int, int]:
        """The one eviction loop. Its rule, for the entry at the head: STOP if the pass
        is done (``by_time``: the entry was timestamped at or after ``limit``; else:
        ``limit`` bytes freed); REQUEUE if :meth:`should_requeue`; else REMOVE. Until
        STOP or the queue is empty. Returns (entries removed, bytes freed).

        The rule is written out in the loop rather than called: a pass looks at every
        expired entry, and two calls per entry were a third of a replay's cache work."""
        queue = self._queue
        extend_accessed = self._extend_accessed
        max_requeues = self._max_requeues
        removed = freed = 0
        while queue:
            entry = queue[0]
            if entry.removed:  # gone by other means: just drop it from the queue
                queue.popleft()
                continue
            if (entry.timestamp_ns >= limit) if by_time else (freed >= limit):
                break  # STOP
            queue.popleft()
            if (extend_accessed and entry.accessed) or (
                entry.expected_reads >= 1 and entry.requeue_count < max_requeues
            ):  # REQUEUE
                entry.timestamp_ns = now_ns
                entry.accessed = False
                entry.requeue_count += 1
                queue.append(entry)
                continue
            entry.cache._evict(entry)  # REMOVE
            removed += 1
            freed += entry.size
            if listener is not None:
                listener(entry, reason)
        return removed, freed
