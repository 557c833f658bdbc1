"""The Bookie and MetadataStore contract, run against memory and disk in every sync mode."""

from __future__ import annotations

import asyncio

import pytest

from storage_stub.bookie import (
    LedgerClosedError,
    NoSuchEntryError,
    NoSuchLedgerError,
    Storage,
    StorageFaultError,
)


def payload(ledger_id: int, entry_id: int, size: int = 40) -> bytes:
    head = f"L{ledger_id}:E{entry_id}|".encode()
    return (head * (size // len(head) + 1))[:size]


async def test_entries_added_in_many_batches_read_back_byte_for_byte(storage: Storage) -> None:
    bookie = storage.bookie
    ledger = await bookie.create_ledger()
    next_id = 0
    for batch_size in [1, 3, 10, 1, 50, 7, 200]:
        batch = [
            payload(ledger, next_id + i, size=10 + (next_id + i) % 300) for i in range(batch_size)
        ]
        last = await bookie.add_entries(ledger, batch)
        assert last == next_id + batch_size - 1
        next_id = last + 1

    everything = await bookie.read_entries(ledger, 0, next_id - 1)
    assert everything == [payload(ledger, e, size=10 + e % 300) for e in range(next_id)]
    assert await bookie.read_entries(ledger, 13, 13) == [payload(ledger, 13, size=23)]
    assert await bookie.read_entries(ledger, 100, 120) == everything[100:121]
    assert await bookie.last_add_confirmed(ledger) == next_id - 1
    metadata = await bookie.ledger_metadata(ledger)
    assert (metadata.closed, metadata.last_entry_id) == (False, next_id - 1)
    assert metadata.length == sum(map(len, everything))
    assert storage.counters.addEntries.entries == next_id
    assert storage.counters.readEntries.bytes == sum(map(len, everything)) + 23 + sum(
        map(len, everything[100:121])
    )


async def test_every_range_across_batches_reads_back_whole_and_in_order(
    storage: Storage,
) -> None:
    bookie = storage.bookie
    ledger = await bookie.create_ledger()
    other = await bookie.create_ledger()
    next_id = 0
    for batch_size in [1, 3, 2, 4, 1]:
        batch = [payload(ledger, next_id + i, size=5 + next_id + i) for i in range(batch_size)]
        next_id = await bookie.add_entries(ledger, batch) + 1
        await bookie.add_entries(other, [b"between"])
    expected = [payload(ledger, e, size=5 + e) for e in range(next_id)]
    for first in range(next_id):
        for last in range(first, next_id):
            assert await bookie.read_entries(ledger, first, last) == expected[first : last + 1]


async def test_interleaved_ledgers_keep_their_own_entries(storage: Storage) -> None:
    bookie = storage.bookie
    ledgers = [await bookie.create_ledger() for _ in range(3)]
    for round_ in range(5):
        for ledger in ledgers:
            await bookie.add_entries(
                ledger, [payload(ledger, round_ * 2), payload(ledger, round_ * 2 + 1)]
            )
    for ledger in ledgers:
        assert await bookie.read_entries(ledger, 0, 9) == [payload(ledger, e) for e in range(10)]


async def test_ledger_ids_increase_and_are_never_reused_after_delete(storage: Storage) -> None:
    bookie = storage.bookie
    first = await bookie.create_ledger()
    second = await bookie.create_ledger()
    await bookie.delete_ledger(second)
    third = await bookie.create_ledger()
    assert first < second < third


async def test_reading_past_the_last_confirmed_entry_is_no_such_entry(storage: Storage) -> None:
    bookie = storage.bookie
    ledger = await bookie.create_ledger()
    await bookie.add_entries(ledger, [b"a", b"b"])
    with pytest.raises(NoSuchEntryError) as missing:
        await bookie.read_entries(ledger, 1, 2)
    assert (missing.value.ledger_id, missing.value.entry_id) == (ledger, 2)
    with pytest.raises(NoSuchEntryError):
        await bookie.read_entries(ledger, -1, 0)
    assert await bookie.read_entries(ledger, 1, 0) == []
    with pytest.raises(NoSuchLedgerError):
        await bookie.read_entries(ledger + 100, 0, 0)


async def test_an_empty_entry_is_stored_and_read_back(storage: Storage) -> None:
    bookie = storage.bookie
    ledger = await bookie.create_ledger()
    await bookie.add_entries(ledger, [b"", b"x", b""])
    assert await bookie.read_entries(ledger, 0, 2) == [b"", b"x", b""]


async def test_an_injected_add_fault_stores_nothing_and_is_counted(storage: Storage) -> None:
    bookie = storage.bookie
    ledger = await bookie.create_ledger()
    await bookie.add_entries(ledger, [b"kept-0", b"kept-1"])

    storage.faults.set("addEntries", error_rate=1.0)
    with pytest.raises(StorageFaultError):
        await bookie.add_entries(ledger, [b"lost-2", b"lost-3", b"lost-4"])
    storage.faults.clear("addEntries")

    assert await bookie.last_add_confirmed(ledger) == 1
    assert await bookie.get_last_entry_in_ledger(ledger) == 1
    with pytest.raises(NoSuchEntryError):
        await bookie.read_entries(ledger, 2, 2)
    assert await bookie.add_entries(ledger, [b"next-2"]) == 2
    assert await bookie.read_entries(ledger, 0, 2) == [b"kept-0", b"kept-1", b"next-2"]
    counter = storage.counters.addEntries
    assert (counter.calls, counter.errors, counter.entries) == (3, 1, 3)
    assert storage.faults.snapshot() == {}


async def test_adding_to_a_closed_ledger_raises_ledger_closed(storage: Storage) -> None:
    bookie = storage.bookie
    ledger = await bookie.create_ledger()
    await bookie.add_entries(ledger, [b"a", b"b", b"c"])
    assert await bookie.close_ledger(ledger) == 2
    assert await bookie.close_ledger(ledger) == 2  # idempotent
    with pytest.raises(LedgerClosedError):
        await bookie.add_entries(ledger, [b"d"])
    assert (await bookie.ledger_metadata(ledger)).closed
    assert await bookie.read_entries(ledger, 0, 2) == [b"a", b"b", b"c"]
    assert storage.counters.addEntries.errors == 1


async def test_floor_seek_finds_the_last_entry_and_minus_one_on_empty(storage: Storage) -> None:
    bookie = storage.bookie
    before = await bookie.create_ledger()
    empty = await bookie.create_ledger()
    after = await bookie.create_ledger()
    await bookie.add_entries(before, [b"x"] * 4)
    await bookie.add_entries(after, [b"y"] * 9)

    assert await bookie.get_last_entry_in_ledger(before) == 3
    assert await bookie.get_last_entry_in_ledger(empty) == -1
    assert await bookie.get_last_entry_in_ledger(after) == 8
    assert await bookie.get_last_entry_in_ledger(empty) == -1
    # the writes filled the last-entry cache; only the never-written ledger needed a
    # real floor seek, and its -1 was cached too
    assert storage.counters.getFloor.calls == 1
    assert storage.counters.getLastEntry.calls == 1
    cache = storage.last_entry_cache
    assert (cache.hits, cache.misses) == (3, 1)


async def test_deleted_ledger_is_unknown_to_floor_seek_reads_and_adds(storage: Storage) -> None:
    bookie = storage.bookie
    ledger = await bookie.create_ledger()
    await bookie.add_entries(ledger, [b"a", b"b"])
    await bookie.delete_ledger(ledger)
    await bookie.delete_ledger(ledger)  # idempotent
    await bookie.delete_ledger(12345)  # unknown: no error

    with pytest.raises(NoSuchLedgerError):
        await bookie.get_last_entry_in_ledger(ledger)
    with pytest.raises(NoSuchLedgerError):
        await bookie.read_entries(ledger, 0, 1)
    with pytest.raises(NoSuchLedgerError):
        await bookie.add_entries(ledger, [b"c"])
    with pytest.raises(NoSuchLedgerError):
        await bookie.ledger_metadata(ledger)

    newer = await bookie.create_ledger()
    assert newer != ledger
    assert await bookie.get_last_entry_in_ledger(newer) == -1
    with pytest.raises(NoSuchLedgerError):
        await bookie.get_last_entry_in_ledger(ledger)


async def test_recover_and_close_closes_an_open_ledger_at_its_last_entry(storage: Storage) -> None:
    bookie = storage.bookie
    ledger = await bookie.create_ledger()
    await bookie.add_entries(ledger, [b"1", b"22", b"333"])
    assert await bookie.recover_and_close(ledger) == 2
    assert await bookie.recover_and_close(ledger) == 2
    metadata = await bookie.ledger_metadata(ledger)
    assert (metadata.closed, metadata.last_entry_id, metadata.length) == (True, 2, 6)
    with pytest.raises(LedgerClosedError):
        await bookie.add_entries(ledger, [b"4"])

    empty = await bookie.create_ledger()
    assert await bookie.recover_and_close(empty) == -1


async def test_ledger_metadata_is_a_copy(storage: Storage) -> None:
    bookie = storage.bookie
    ledger = await bookie.create_ledger()
    copy = await bookie.ledger_metadata(ledger)
    copy.closed = True
    copy.last_entry_id = 99
    assert await bookie.add_entries(ledger, [b"a"]) == 0


async def test_concurrent_adds_to_one_ledger_get_contiguous_ids(storage: Storage) -> None:
    bookie = storage.bookie
    ledger = await bookie.create_ledger()
    lasts = await asyncio.gather(
        *(bookie.add_entries(ledger, [f"{i}-{j}".encode() for j in range(3)]) for i in range(20))
    )
    assert sorted(lasts) == [3 * i + 2 for i in range(20)]
    entries = await bookie.read_entries(ledger, 0, 59)
    by_call = {last: entries[last - 2 : last + 1] for last in lasts}
    for i, last in enumerate(lasts):
        assert by_call[last] == [f"{i}-{j}".encode() for j in range(3)]


async def test_close_ledger_waits_for_adds_in_flight(storage: Storage) -> None:
    bookie = storage.bookie
    ledger = await bookie.create_ledger()
    # gather starts the adds first: they are all submitted when the close begins.
    *adds, last = await asyncio.gather(
        *(bookie.add_entries(ledger, [f"e{i}".encode()]) for i in range(10)),
        bookie.close_ledger(ledger),
    )
    assert sorted(adds) == list(range(10))
    assert last == 9
    assert await bookie.read_entries(ledger, 0, 9) == [f"e{i}".encode() for i in range(10)]
    with pytest.raises(LedgerClosedError):
        await bookie.add_entries(ledger, [b"late"])


async def test_operations_on_a_closed_bookie_fail(storage: Storage) -> None:
    ledger = await storage.bookie.create_ledger()
    await storage.close()
    with pytest.raises(StorageFaultError):
        await storage.bookie.add_entries(ledger, [b"a"])
    with pytest.raises(StorageFaultError):
        await storage.metadata.put("k", b"v")
    await storage.close()  # idempotent


async def test_metadata_records_round_trip_and_list_sorted_by_prefix(storage: Storage) -> None:
    store = storage.metadata
    assert await store.get("managed-ledgers/t/ns/a") is None
    for key in ["cursors/t/b", "managed-ledgers/t/ns/b", "managed-ledgers/t/ns/a", "zz", "ü"]:
        await store.put(key, key.encode())
    await store.put("managed-ledgers/t/ns/a", b"v2")

    assert await store.get("managed-ledgers/t/ns/a") == b"v2"
    assert await store.keys_with_prefix("managed-ledgers/") == [
        "managed-ledgers/t/ns/a",
        "managed-ledgers/t/ns/b",
    ]
    assert await store.keys_with_prefix("") == sorted(
        ["cursors/t/b", "managed-ledgers/t/ns/b", "managed-ledgers/t/ns/a", "zz", "ü"]
    )
    await store.delete("managed-ledgers/t/ns/a")
    await store.delete("never-existed")
    assert await store.get("managed-ledgers/t/ns/a") is None
    assert await store.keys_with_prefix("managed") == ["managed-ledgers/t/ns/b"]
    assert storage.counters.metadataPut.calls == 6


async def test_an_injected_metadata_fault_changes_nothing(storage: Storage) -> None:
    store = storage.metadata
    await store.put("cursor", b"old")
    storage.faults.set("metadataPut", error_rate=1.0)
    storage.faults.set("metadataDelete", error_rate=1.0)
    with pytest.raises(StorageFaultError):
        await store.put("cursor", b"new")
    with pytest.raises(StorageFaultError):
        await store.delete("cursor")
    assert await store.get("cursor") == b"old"
    assert storage.counters.metadataPut.errors == 1
    assert storage.counters.metadataDelete.errors == 1
    assert storage.faults.snapshot()["metadataPut"]["injectedErrors"] == 1


async def test_a_failed_create_ledger_creates_nothing(storage: Storage) -> None:
    bookie = storage.bookie
    storage.faults.set("createLedger", error_rate=1.0)
    with pytest.raises(StorageFaultError):
        await bookie.create_ledger()
    storage.faults.clear()
    ledger = await bookie.create_ledger()
    assert await bookie.get_last_entry_in_ledger(ledger) == -1
    assert storage.counters.createLedger.errors == 1


async def test_stats_report_the_named_bookie_counters(storage: Storage) -> None:
    ledger = await storage.bookie.create_ledger()
    await storage.bookie.add_entries(ledger, [b"abc", b"de"])
    await storage.bookie.read_entries(ledger, 0, 1)
    await storage.bookie.get_last_entry_in_ledger(ledger)
    stats = storage.stats()
    assert {
        "readRequests": 1,
        "entriesRead": 2,
        "bytesRead": 5,
        "getFloorCalls": 0,  # the add filled the last-entry cache
        "lastEntryCacheHits": 1,
        "lastEntryCacheMisses": 0,
        "addEntriesCalls": 1,
    }.items() <= stats.items()
