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

#: the answers of an eviction rule
REMOVE, REQUEUE, STOP = 0, 1, 2

#: called with each entry the queue evicts and the pass's reason ("ttl" or "size")
EvictListener = Callable[[CachedEntry, str], None]


class RangeCacheRemovalQueue:
    """The broker-wide FIFO of cached entries and its eviction loop."""

    __slots__ = ("_cutoff_ns", "_extend_accessed", "_max_requeues", "_queue", "_to_free", "add")

    def __init__(self, max_requeues: int, extend_recently_accessed: bool) -> None:
        self._queue: deque[CachedEntry] = deque()
        #: an entry was cached: it joins the tail. O(1). (The deque's own append: one
        #: call per cached entry, on the insert path.)
        self.add = self._queue.append
        self._max_requeues = max_requeues
        self._extend_accessed = extend_recently_accessed
        self._cutoff_ns = 0
        self._to_free = 0

    def __len__(self) -> int:
        """Entries queued, including removed ones not yet reached. O(1)."""
        return len(self._queue)

    def __iter__(self) -> Iterator[CachedEntry]:
        return iter(self._queue)

    def should_requeue(self, entry: CachedEntry) -> bool:
        """Whether the entry gets another TTL instead of eviction. O(1)."""
        return (self._extend_accessed and entry.accessed) or (
            entry.expected_reads >= 1 and entry.requeue_count < self._max_requeues
        )

    # ------------------------------------------------------------------ the two rules

    def _expired_rule(self, entry: CachedEntry, freed: int) -> int:
        if entry.timestamp_ns >= self._cutoff_ns:
            return STOP
        return REQUEUE if self.should_requeue(entry) else REMOVE

    def _size_rule(self, entry: CachedEntry, freed: int) -> int:
        if freed >= self._to_free:
            return STOP
        return REQUEUE if self.should_requeue(entry) else REMOVE

    # ------------------------------------------------------------------ the passes

    def evict_before(
        self, cutoff_ns: int, now_ns: int, listener: EvictListener | None
    ) -> tuple[int, int]:
        """The timestamp pass: entries cached before ``cutoff_ns``. Returns (entries
        removed, bytes freed)."""
        self._cutoff_ns = cutoff_ns
        return self.evict(self._expired_rule, now_ns, listener, "ttl")

    def evict_size(
        self, size_to_free: int, now_ns: int, listener: EvictListener | None
    ) -> tuple[int, int]:
        """The size pass: free at least ``size_to_free`` bytes, or everything that may
        go. Returns (entries removed, bytes freed)."""
        self._to_free = size_to_free
        return self.evict(self._size_rule, now_ns, listener, "size")

    def evict(
        self,
        rule: Callable[[CachedEntry, int], int],
        now_ns: int,
        listener: EvictListener | None,
        reason: str,
    ) -> tuple[int, int]:
        """The one eviction loop: ask ``rule`` about the head until it says STOP or the
        queue is empty. Returns (entries removed, bytes freed)."""
        queue = self._queue
        removed = freed = 0
        while queue:
            entry = queue[0]
            if entry.removed:  # gone by other means: just drop it from the queue
                queue.popleft()
                continue
            verdict = rule(entry, freed)
            if verdict == STOP:
                break
            queue.popleft()
            if verdict == REQUEUE:
                entry.timestamp_ns = now_ns
                entry.accessed = False
                entry.requeue_count += 1
                queue.append(entry)
                continue
            entry.cache._evict(entry)
            removed += 1
            freed += entry.size
            if listener is not None:
                listener(entry, reason)
        return removed, freed
