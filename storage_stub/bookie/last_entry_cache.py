"""BookKeeper's last-entry cache (ledger id -> last entry id) in front of the floor seek
of ``getLastEntryInLedger``, done as the review of BookKeeper PR 4732 asked:

- max-wins: a value replaces the cached one only if it is greater, so a slow floor seek
  that finishes after a newer entry was added never makes the answer go back;
- a delete bumps the ledger's generation before and after the storage delete, and a seek
  started under an older generation may not insert: a deleted ledger (also one created
  again with the same id) is never answered from the cache;
- bounded by ``dbStorage_lastEntryCacheMaxSize``, evicting the least recently used
  ledger, never clearing everything; entry id -1 (an empty ledger) is cached like any
  other; a size <= 0 disables the cache;
- hits and misses are counted apart, and only a real seek pays the seek's latency.
"""

from __future__ import annotations

import asyncio
import functools
from collections import OrderedDict
from collections.abc import Sequence

from storage_stub.bookie.api import Bookie, LedgerMetadata, when_done


class LastEntryCache:
    """Costs: get, offer, forget O(1)."""

    __slots__ = ("_entries", "_generations", "hits", "max_size", "misses")

    def __init__(self, max_size: int) -> None:
        self.max_size = max_size
        self._entries: OrderedDict[int, int] = OrderedDict()
        self._generations: dict[int, int] = {}
        self.hits = 0
        self.misses = 0

    @property
    def enabled(self) -> bool:
        return self.max_size > 0

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, ledger_id: int) -> int | None:
        """The cached last entry id (possibly -1), or None; counts a hit or a miss."""
        last = self._entries.get(ledger_id)
        if last is None:
            self.misses += 1
            return None
        self._entries.move_to_end(ledger_id)
        self.hits += 1
        return last

    def generation(self, ledger_id: int) -> int:
        return self._generations.get(ledger_id, 0)

    def offer(self, ledger_id: int, last_entry_id: int, generation: int) -> None:
        """Cache ``last_entry_id`` if it is newer than what is cached and the ledger was
        not deleted since ``generation`` was read."""
        if not self.enabled or generation != self._generations.get(ledger_id, 0):
            return
        entries = self._entries
        cached = entries.get(ledger_id)
        if cached is not None:
            if last_entry_id > cached:
                entries[ledger_id] = last_entry_id
            entries.move_to_end(ledger_id)
            return
        if len(entries) >= self.max_size:
            entries.popitem(last=False)
        entries[ledger_id] = last_entry_id

    def forget(self, ledger_id: int) -> None:
        """The ledger is being (or was) deleted: drop it and void seeks in flight."""
        self._entries.pop(ledger_id, None)
        self._generations[ledger_id] = self._generations.get(ledger_id, 0) + 1


class LastEntryCachingBookie:
    """A bookie with the last-entry cache in front of ``get_last_entry_in_ledger``;
    writes, closes and recoveries feed it. Everything else passes through."""

    def __init__(self, inner: Bookie, cache: LastEntryCache) -> None:
        self._inner = inner
        self.cache = cache

    @property
    def inner(self) -> Bookie:
        return self._inner

    async def create_ledger(self) -> int:
        return await self._inner.create_ledger()

    async def add_entries(self, ledger_id: int, entries: Sequence[bytes]) -> int:
        return await asyncio.shield(self.start_add(ledger_id, entries))

    def start_add(self, ledger_id: int, entries: Sequence[bytes]) -> asyncio.Future[int]:
        """The inner bookie's add; the cache is offered its last entry id once stored."""
        generation = self.cache.generation(ledger_id)
        write = self._inner.start_add(ledger_id, entries)
        when_done(write, functools.partial(self._offer, ledger_id, generation))
        return write

    def _offer(self, ledger_id: int, generation: int, write: asyncio.Future[int]) -> None:
        if not write.cancelled() and write.exception() is None:
            self.cache.offer(ledger_id, write.result(), generation)

    async def read_entries(self, ledger_id: int, first: int, last: int) -> list[bytes]:
        return await self._inner.read_entries(ledger_id, first, last)

    async def last_add_confirmed(self, ledger_id: int) -> int:
        return await self._inner.last_add_confirmed(ledger_id)

    async def get_last_entry_in_ledger(self, ledger_id: int) -> int:
        cache = self.cache
        if cache.enabled:
            cached = cache.get(ledger_id)
            if cached is not None:
                return cached
        generation = cache.generation(ledger_id)
        last = await self._inner.get_last_entry_in_ledger(ledger_id)
        cache.offer(ledger_id, last, generation)
        return last

    async def close_ledger(self, ledger_id: int) -> int:
        generation = self.cache.generation(ledger_id)
        last = await self._inner.close_ledger(ledger_id)
        self.cache.offer(ledger_id, last, generation)
        return last

    async def recover_and_close(self, ledger_id: int) -> int:
        generation = self.cache.generation(ledger_id)
        last = await self._inner.recover_and_close(ledger_id)
        self.cache.offer(ledger_id, last, generation)
        return last

    async def delete_ledger(self, ledger_id: int) -> None:
        self.cache.forget(ledger_id)
        try:
            await self._inner.delete_ledger(ledger_id)
        finally:
            self.cache.forget(ledger_id)

    async def ledger_metadata(self, ledger_id: int) -> LedgerMetadata:
        return await self._inner.ledger_metadata(ledger_id)

    async def close(self) -> None:
        await self._inner.close()
