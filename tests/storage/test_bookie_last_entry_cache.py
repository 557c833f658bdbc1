"""The last-entry cache done as the review of BookKeeper PR 4732 asked: never stale after
a slow seek races a write or a delete, -1 cached, size 0 off, bounded without clearing."""

from __future__ import annotations

import asyncio

import pytest

from storage_stub.bookie import LastEntryCache, LastEntryCachingBookie
from storage_stub.bookie.api import NoSuchLedgerError
from storage_stub.bookie.memory import InMemoryBookie


class SlowSeekBookie(InMemoryBookie):
    """Floor seeks read the index at once, then take their time answering (a slow seek
    in flight), until the test opens the gate. Ledgers can be created again with an id
    that was deleted, as BookKeeper allows."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = asyncio.Event()
        self.gate.set()
        self.seeking = asyncio.Event()
        self.seeks = 0

    async def get_last_entry_in_ledger(self, ledger_id: int) -> int:
        answer = await super().get_last_entry_in_ledger(ledger_id)
        self.seeks += 1
        self.seeking.set()
        await self.gate.wait()
        return answer

    async def create_ledger_with_id(self, ledger_id: int) -> None:
        created = await self.create_ledger()
        # move the fresh ledger to the wanted id (test-only surgery)
        self._ledgers[ledger_id] = self._ledgers.pop(created)  # type: ignore[attr-defined]
        self._ledgers[ledger_id].metadata.ledger_id = ledger_id  # type: ignore[attr-defined]


def caching(size: int = 100) -> tuple[LastEntryCachingBookie, SlowSeekBookie]:
    inner = SlowSeekBookie()
    return LastEntryCachingBookie(inner, LastEntryCache(size)), inner


async def test_a_slow_seek_finishing_after_a_newer_write_does_not_regress() -> None:
    bookie, inner = caching()
    ledger = await bookie.create_ledger()
    await inner.add_entries(ledger, [b"x"] * 5)  # behind the cache's back: not cached
    inner.gate.clear()
    seek = asyncio.create_task(bookie.get_last_entry_in_ledger(ledger))
    await inner.seeking.wait()  # the seek has read 4 and is still in flight
    assert await bookie.add_entries(ledger, [b"y"] * 3) == 7
    inner.gate.set()
    assert await seek == 4, "the seek answers what it read"
    assert await bookie.get_last_entry_in_ledger(ledger) == 7, "but the cache kept the newer"
    assert inner.seeks == 1


async def test_a_seek_in_flight_across_a_delete_and_re_creation_never_answers_stale() -> None:
    bookie, inner = caching()
    ledger = await bookie.create_ledger()
    await bookie.add_entries(ledger, [b"x"] * 6)
    assert await bookie.get_last_entry_in_ledger(ledger) == 5  # from the cache
    inner.gate.clear()
    bookie.cache.forget(ledger)  # make the next read a real seek
    seek = asyncio.create_task(bookie.get_last_entry_in_ledger(ledger))
    await inner.seeking.wait()
    await bookie.delete_ledger(ledger)
    await inner.create_ledger_with_id(ledger)  # the same id, empty
    inner.gate.set()
    assert await seek == 5  # what it read before the delete
    assert await bookie.get_last_entry_in_ledger(ledger) == -1, "never the deleted ledger's"


async def test_a_deleted_ledger_is_not_answered_from_the_cache() -> None:
    bookie, _ = caching()
    ledger = await bookie.create_ledger()
    await bookie.add_entries(ledger, [b"x"] * 3)
    await bookie.delete_ledger(ledger)
    with pytest.raises(NoSuchLedgerError):
        await bookie.get_last_entry_in_ledger(ledger)


async def test_minus_one_is_cached_like_any_entry_id() -> None:
    bookie, inner = caching()
    empty = await bookie.create_ledger()
    assert await bookie.get_last_entry_in_ledger(empty) == -1
    assert await bookie.get_last_entry_in_ledger(empty) == -1
    assert inner.seeks == 1 and (bookie.cache.hits, bookie.cache.misses) == (1, 1)


async def test_size_zero_disables_the_cache() -> None:
    bookie, inner = caching(size=0)
    ledger = await bookie.create_ledger()
    await bookie.add_entries(ledger, [b"x"])
    for _ in range(3):
        assert await bookie.get_last_entry_in_ledger(ledger) == 0
    assert inner.seeks == 3 and len(bookie.cache) == 0


async def test_a_full_cache_drops_the_least_recently_used_ledger_only() -> None:
    bookie, inner = caching(size=2)
    first, second, third = [await bookie.create_ledger() for _ in range(3)]
    for ledger in (first, second):
        await bookie.add_entries(ledger, [b"x"])
    await bookie.get_last_entry_in_ledger(first)  # first is now the most recently used
    await bookie.add_entries(third, [b"x"])  # full: second goes, not everything
    assert len(bookie.cache) == 2
    seeks = inner.seeks
    await bookie.get_last_entry_in_ledger(first)
    await bookie.get_last_entry_in_ledger(third)
    assert inner.seeks == seeks, "first and third still cached"
    await bookie.get_last_entry_in_ledger(second)
    assert inner.seeks == seeks + 1
