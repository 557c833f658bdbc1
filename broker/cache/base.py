"""What the cache structures share: payload ownership, and the manager's registry of
per-ledger caches, counters and stats shape."""

from __future__ import annotations

from collections.abc import Callable
from time import thread_time_ns
from typing import Any, Generic, TypeVar

from broker.cache.config import CacheConfig
from broker.cache.entry import CachedEntry
from broker.cache.stats import CacheCounters
from broker.clock import Clock


def owned_payload(data: bytes | memoryview, copy: bool) -> bytes | memoryview:
    """``managedLedgerCacheCopyEntries``: an owned copy of a view (exact memory), or the
    object storage handed over (no copy; a view may pin a larger buffer)."""
    return bytes(data) if copy and not isinstance(data, bytes) else data


C = TypeVar("C")


class ManagerBase(Generic[C]):
    """Per-ledger caches by managed-ledger name, the counters, the stats shape, and the
    size pass after inserts (Pulsar triggers it on its eviction executor when an insert
    crosses 0.98 x max; here it runs right after the event that inserted, so a shadow
    and a replay run it at the same point of the event stream as the live design)."""

    implementation = ""
    shares_pending_reads = True
    #: False for a design that evicts only by overwriting (the ring): no timestamp or
    #: size pass
    has_eviction_passes = True

    def __init__(self, config: CacheConfig, clock: Clock, new_cache: Callable[[str], C]) -> None:
        self.config = config
        self.clock = clock
        self.counters = CacheCounters()
        #: called with each entry evicted (by "ttl" or "size"), for the access trace;
        #: None (the default) costs one check per eviction
        self.evict_listener: Callable[[CachedEntry, str], None] | None = None
        self.disabled = config.max_size_bytes <= 0
        self.copy_entries = config.copy_entries
        self._trigger = config.trigger_bytes
        self._new_cache = new_cache
        self._caches: dict[str, C] = {}

    def get_entry_cache(self, name: str) -> C:
        cache = self._caches.get(name)
        if cache is None:
            cache = self._caches[name] = self._new_cache(name)
        return cache

    def remove_entry_cache(self, name: str) -> None:
        cache = self._caches.pop(name, None)
        if cache is not None:
            cache.clear()  # type: ignore[attr-defined]

    @property
    def size(self) -> int:
        return self.counters.size

    def needs_eviction(self) -> bool:
        """True above 0.98 x max: the size pass has work. O(1)."""
        return not self.disabled and self.counters.size > self._trigger

    def evict_expired(self) -> int:
        raise NotImplementedError

    def evict_entries(self, size_to_free: int) -> int:
        raise NotImplementedError

    def evict_to_watermark(self) -> int:
        """The size pass, when above the trigger: free down to the watermark. Returns
        bytes freed."""
        if not self.needs_eviction():
            return 0
        return self.evict_entries(self.counters.size - self.config.watermark_bytes)

    def after_insert(self) -> None:
        """The size pass if the cache is above its trigger; its CPU time goes to
        ``eviction_cpu_ns``. O(1) when below the trigger."""
        if self.counters.size > self._trigger and not self.disabled:
            started = thread_time_ns()
            self.evict_to_watermark()
            self.counters.eviction_cpu_ns += thread_time_ns() - started

    def quiet_until_ns(self) -> int | None:
        """See ``EntryCacheManager.quiet_until_ns``: None here (a design that does not
        say is given every round)."""
        return None

    def do_cache_eviction(self) -> None:
        """One round of the broker's eviction timer: the timestamp pass, then the size
        pass if still above the trigger. Its CPU time goes to ``eviction_cpu_ns``."""
        started = thread_time_ns()
        self.evict_expired()
        self.evict_to_watermark()
        self.counters.eviction_cpu_ns += thread_time_ns() - started

    def stats(self) -> dict[str, Any]:
        return self.counters.snapshot(self.implementation, self.config.max_size_bytes)
