"""The on-disk bookie across restarts, torn tails, log rolls, group commit and I/O errors."""

from __future__ import annotations

import asyncio
import pathlib
from collections.abc import Awaitable, Callable

import pytest

from storage_stub.bookie import (
    DiskBookie,
    InstrumentedBookie,
    LastEntryCachingBookie,
    Storage,
    StorageFaultError,
    open_storage,
)
from storage_stub.bookie.entry_log import EntryLogger
from storage_stub.config import StorageConfig

OpenStorage = Callable[..., Awaitable[Storage]]


def payload(ledger_id: int, entry_id: int, size: int = 40) -> bytes:
    head = f"L{ledger_id}:E{entry_id}|".encode()
    return (head * (size // len(head) + 1))[:size]


def disk_bookie(bookie: object) -> DiskBookie:
    assert isinstance(bookie, LastEntryCachingBookie)
    instrumented = bookie.inner
    assert isinstance(instrumented, InstrumentedBookie)
    inner = instrumented.inner
    assert isinstance(inner, DiskBookie)
    return inner


def last_log_file(data: pathlib.Path) -> pathlib.Path:
    return max((data / "entrylogs").glob("*.log"), key=lambda p: int(p.stem))


async def test_ledgers_entries_metadata_and_next_id_survive_close_and_reopen(
    open_store: OpenStorage, sync_mode: str
) -> None:
    storage = await open_store(syncMode=sync_mode)
    closed = await storage.bookie.create_ledger()
    await storage.bookie.add_entries(closed, [payload(closed, e) for e in range(30)])
    await storage.bookie.close_ledger(closed)
    deleted = await storage.bookie.create_ledger()
    await storage.bookie.add_entries(deleted, [b"gone"])
    await storage.bookie.delete_ledger(deleted)
    open_ = await storage.bookie.create_ledger()
    await storage.bookie.add_entries(open_, [payload(open_, e, size=100) for e in range(7)])
    await storage.metadata.put("managed-ledgers/t/ns/topic", b'{"ledgers": [0, 2]}')
    await storage.metadata.put("cursors/t/ns/topic/sub", b"3:4")
    await storage.close()

    reopened = await open_store(syncMode=sync_mode)
    bookie = reopened.bookie
    assert await bookie.read_entries(closed, 0, 29) == [payload(closed, e) for e in range(30)]
    closed_meta = await bookie.ledger_metadata(closed)
    assert (closed_meta.closed, closed_meta.last_entry_id, closed_meta.length) == (True, 29, 1200)
    open_meta = await bookie.ledger_metadata(open_)
    assert (open_meta.closed, open_meta.last_entry_id, open_meta.length) == (False, 6, 700)
    assert await bookie.last_add_confirmed(open_) == 6
    assert await bookie.add_entries(open_, [b"after restart"]) == 7
    assert await bookie.read_entries(open_, 6, 7) == [payload(open_, 6, size=100), b"after restart"]
    with pytest.raises(Exception, match="does not exist"):
        await bookie.get_last_entry_in_ledger(deleted)
    assert await bookie.create_ledger() == open_ + 1
    assert await reopened.metadata.get("cursors/t/ns/topic/sub") == b"3:4"
    assert await reopened.metadata.keys_with_prefix("") == [
        "cursors/t/ns/topic/sub",
        "managed-ledgers/t/ns/topic",
    ]


async def test_a_torn_tail_is_cut_on_reopen_and_earlier_entries_read_fine(
    open_store: OpenStorage, tmp_path: pathlib.Path
) -> None:
    storage = await open_store(syncMode="always")
    ledger = await storage.bookie.create_ledger()
    for e in range(5):
        await storage.bookie.add_entries(ledger, [payload(ledger, e)])
    await storage.close()
    log_file = last_log_file(tmp_path / "data")
    good_size = log_file.stat().st_size
    with log_file.open("ab") as torn:
        torn.write(b"\x00\x00\x00\x00\x00\x00\x00\x00garbage from a write cut short")

    reopened = await open_store(syncMode="always")
    assert log_file.stat().st_size == good_size
    assert await reopened.bookie.read_entries(ledger, 0, 4) == [
        payload(ledger, e) for e in range(5)
    ]
    assert await reopened.bookie.add_entries(ledger, [b"five"]) == 5
    assert await reopened.bookie.read_entries(ledger, 4, 5) == [payload(ledger, 4), b"five"]


async def test_a_half_written_last_record_is_cut_on_reopen(
    open_store: OpenStorage, tmp_path: pathlib.Path
) -> None:
    storage = await open_store(syncMode="none")
    ledger = await storage.bookie.create_ledger()
    await storage.bookie.add_entries(ledger, [b"a" * 50, b"b" * 50])
    await storage.close()
    log_file = last_log_file(tmp_path / "data")
    intact = log_file.stat().st_size
    # An unacknowledged record whose payload never fully reached the file.
    logger = EntryLogger(tmp_path / "scratch", 1 << 20)
    logger.append(ledger, 2, [b"c" * 50])
    logger.close()
    record = (tmp_path / "scratch" / "0.log").read_bytes()
    with log_file.open("ab") as torn:
        torn.write(record[:-10])

    reopened = await open_store(syncMode="none")
    assert log_file.stat().st_size == intact
    assert await reopened.bookie.read_entries(ledger, 0, 1) == [b"a" * 50, b"b" * 50]
    assert await reopened.bookie.last_add_confirmed(ledger) == 1


async def test_entries_spread_over_many_rolled_logs_read_back_in_one_call(
    open_store: OpenStorage, tmp_path: pathlib.Path
) -> None:
    storage = await open_store(syncMode="batch", logSizeLimit=4096, journalMaxGroupWaitMSec=0)
    bookie = storage.bookie
    ledgers = [await bookie.create_ledger() for _ in range(2)]
    for e in range(0, 120, 4):
        for ledger in ledgers:
            await bookie.add_entries(ledger, [payload(ledger, e + i, size=300) for i in range(4)])
    assert len(list((tmp_path / "data" / "entrylogs").glob("*.log"))) > 10
    for ledger in ledgers:
        expected = [payload(ledger, e, size=300) for e in range(120)]
        assert await bookie.read_entries(ledger, 0, 119) == expected
    await storage.close()

    reopened = await open_store(syncMode="batch", logSizeLimit=4096)
    for ledger in ledgers:
        expected = [payload(ledger, e, size=300) for e in range(120)]
        assert await reopened.bookie.read_entries(ledger, 0, 119) == expected
        assert await reopened.bookie.get_last_entry_in_ledger(ledger) == 119


async def test_group_commit_acknowledges_many_concurrent_adds_with_few_fsyncs(
    open_store: OpenStorage,
) -> None:
    adds, entry_size = 64, 100
    # The group closes when all adds are in (threshold), long before the wait runs out.
    storage = await open_store(
        syncMode="batch",
        journalMaxGroupWaitMSec=60_000,
        journalBufferedWritesThreshold=adds * 2 * entry_size,
    )
    bookie = storage.bookie
    ledgers = [await bookie.create_ledger() for _ in range(4)]

    async def add(i: int) -> tuple[int, int]:
        ledger = ledgers[i % 4]
        entries = [payload(ledger, i, size=entry_size), payload(ledger, -i, size=entry_size)]
        return ledger, await bookie.add_entries(ledger, entries)

    results = await asyncio.gather(*(add(i) for i in range(adds)))
    committer = disk_bookie(bookie).committer
    assert committer is not None
    assert committer.items_committed == adds
    assert committer.groups_committed == 1
    await storage.close()

    reopened = await open_store(syncMode="batch")
    for i, (ledger, last) in enumerate(results):
        assert await reopened.bookie.read_entries(ledger, last - 1, last) == [
            payload(ledger, i, size=entry_size),
            payload(ledger, -i, size=entry_size),
        ]
    for ledger in ledgers:
        assert await reopened.bookie.last_add_confirmed(ledger) == 2 * adds // 4 - 1


async def test_always_mode_commits_every_add_on_its_own(open_store: OpenStorage) -> None:
    storage = await open_store(syncMode="always")
    ledger = await storage.bookie.create_ledger()
    await asyncio.gather(*(storage.bookie.add_entries(ledger, [b"x"]) for _ in range(12)))
    committer = disk_bookie(storage.bookie).committer
    assert committer is not None
    assert committer.groups_committed == committer.items_committed == 12


async def test_a_failed_fsync_fails_the_add_and_the_ledger_continues_from_its_last_entry(
    open_store: OpenStorage, monkeypatch: pytest.MonkeyPatch
) -> None:
    storage = await open_store(syncMode="batch", journalMaxGroupWaitMSec=0)
    bookie = storage.bookie
    ledger = await bookie.create_ledger()
    await bookie.add_entries(ledger, [b"durable-0"])

    real_fsync_logs = DiskBookie._fsync_logs

    async def failing_fsync_logs(bookie: DiskBookie, fds: list[int]) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(DiskBookie, "_fsync_logs", failing_fsync_logs)
    outcomes = await asyncio.gather(
        bookie.add_entries(ledger, [b"lost-1"]),
        bookie.add_entries(ledger, [b"lost-2", b"lost-3"]),
        return_exceptions=True,
    )
    assert all(isinstance(outcome, StorageFaultError) for outcome in outcomes)
    assert await bookie.last_add_confirmed(ledger) == 0
    assert await bookie.get_last_entry_in_ledger(ledger) == 0
    assert storage.counters.addEntries.errors == 2

    monkeypatch.setattr(DiskBookie, "_fsync_logs", real_fsync_logs)
    assert await bookie.add_entries(ledger, [b"durable-1"]) == 1
    await storage.close()
    reopened = await open_store(syncMode="batch")
    assert await reopened.bookie.read_entries(ledger, 0, 1) == [b"durable-0", b"durable-1"]


async def test_disk_mode_without_a_data_directory_is_refused() -> None:
    with pytest.raises(ValueError, match="data directory"):
        await open_storage(StorageConfig(storageMode="disk"), None)


async def test_memory_mode_ignores_the_data_directory(tmp_path: pathlib.Path) -> None:
    storage = await open_storage(StorageConfig(storageMode="memory"), tmp_path / "unused")
    await storage.bookie.create_ledger()
    await storage.close()
    assert not (tmp_path / "unused").exists()
