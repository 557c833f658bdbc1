"""A full disk makes the bookie read-only, not broken (issue #14), on a real small file
system each test mounts: a 64 MiB loop-mounted ext4 image (``-m 0``: no blocks kept for
root, so 100% used is when writes fail), or a 64 MiB tmpfs where loop mounts are refused
(``BROKERLAB_SMALL_FS=tmpfs`` forces it). Needs root; skipped when neither mounts.

The bookie checks its disk every 100 ms here; tests poll with a deadline for what it
should do by itself, and never assert on timing.
"""

from __future__ import annotations

import os
import pathlib
from collections.abc import Iterator
from typing import Any

import pytest

from storage_stub.bookie import (
    BookieReadOnlyError,
    NoSuchLedgerError,
    Storage,
    StorageFaultError,
    open_storage,
)
from storage_stub.bookie.disk_monitor import UsageProbe, statvfs_probe
from storage_stub.bookie.entry_log import EntryLogger
from storage_stub.bookie.frame import FRAME_HEADER_SIZE, LENGTH_SIZE, Frame
from storage_stub.config import StorageConfig
from tests.harness import eventually_async
from tests.smallfs import MiB, SmallFileSystem, small_file_system
from tests.storage.test_bookie_disk_recovery import disk_bookie

#: How long the bookie gets to do what it should by itself (it checks every 100 ms).
DEADLINE_S = 15.0

KINDS: dict[str, dict[str, Any]] = {
    "always": {"syncMode": "always"},
    "batch": {"syncMode": "batch", "journalMaxGroupWaitMSec": 1.0},
    "none-buffered": {"syncMode": "none", "dbStorage_directIOEntryLogger": False},
}


# -- the small file system ---------------------------------------------------------------


@pytest.fixture
def small_fs(tmp_path: pathlib.Path) -> Iterator[SmallFileSystem]:
    with small_file_system(tmp_path, "64M") as fs:
        yield fs


def config(**settings: Any) -> StorageConfig:
    return StorageConfig(diskCheckInterval=100, **settings)


async def open_on(
    fs: SmallFileSystem, cfg: StorageConfig, probe: UsageProbe | None = None
) -> Storage:
    return await open_storage(cfg, fs.path / "data", seed=7, disk_usage_probe=probe)


class HeldProbe:
    """The real statvfs, except that while held it repeats the last answer: the bookie
    does not see the disk fill, so a write meets the full disk first."""

    def __init__(self, path: pathlib.Path) -> None:
        self._real = statvfs_probe(path)
        self._held: tuple[int, int] | None = None

    def __call__(self) -> tuple[int, int]:
        return self._held if self._held is not None else self._real()

    def hold(self) -> None:
        self._held = self._real()

    def release(self) -> None:
        self._held = None


async def add_when_writable(storage: Storage, ledger: int, entry: bytes) -> None:
    """Add ``entry`` once the bookie takes adds again (polled, with the deadline)."""

    async def added() -> bool:
        try:
            await storage.bookie.add_entries(ledger, [entry])
        except BookieReadOnlyError:
            return False
        return True

    await eventually_async(added, "the bookie to take an add again", DEADLINE_S)


async def add_until_refused(storage: Storage, ledger: int, acked: list[bytes]) -> Exception:
    """Add entries (appending the acknowledged ones to ``acked``) until one fails."""

    async def refused() -> Exception | None:
        entry = os.urandom(4096)
        try:
            await storage.bookie.add_entries(ledger, [entry])
        except StorageFaultError as error:
            if "readOnlyModeEnabled=false" not in str(error):
                raise
            return error  # the bookie refuses writes without read-only mode
        except BookieReadOnlyError as error:
            return error
        acked.append(entry)
        return None

    return await eventually_async(refused, "an add to be refused", DEADLINE_S)


async def add_entries(storage: Storage, ledger: int, count: int, acked: list[bytes]) -> None:
    for _ in range(count):
        entry = os.urandom(2000)
        await storage.bookie.add_entries(ledger, [entry])
        acked.append(entry)


async def read_all(storage: Storage, ledger: int) -> list[bytes]:
    last = await storage.bookie.last_add_confirmed(ledger)
    return await storage.bookie.read_entries(ledger, 0, last)


# -- the scenarios -----------------------------------------------------------------------


@pytest.mark.parametrize("kind", list(KINDS))
async def test_a_full_disk_refuses_adds_serves_everything_else_and_recovers_by_itself(
    small_fs: SmallFileSystem, kind: str
) -> None:
    storage = await open_on(small_fs, config(**KINDS[kind]))
    try:
        ledger = await storage.bookie.create_ledger()
        other = await storage.bookie.create_ledger()
        acked: list[bytes] = []
        await add_entries(storage, ledger, 10, acked)
        await add_entries(storage, other, 1, [])
        await storage.metadata.put("cursor", b"0")

        filler = small_fs.fill_to(0.97)
        refused = await add_until_refused(storage, ledger, acked)

        assert isinstance(refused, BookieReadOnlyError)
        assert "read-only" in str(refused) and "diskUsageThreshold 0.95" in str(refused)
        assert storage.read_only
        assert storage.stats()["readOnly"] == 1
        assert storage.stats()["diskUsage"] >= 0.95
        with pytest.raises(BookieReadOnlyError):
            await storage.bookie.create_ledger()
        assert await read_all(storage, ledger) == acked
        assert await storage.bookie.get_last_entry_in_ledger(ledger) == len(acked) - 1
        await storage.metadata.put("cursor", b"1")
        assert await storage.bookie.close_ledger(other) == 0
        await storage.bookie.delete_ledger(other)
        with pytest.raises(NoSuchLedgerError):
            await storage.bookie.read_entries(other, 0, 0)

        filler.unlink()
        entry = os.urandom(4096)
        await add_when_writable(storage, ledger, entry)
        acked.append(entry)

        assert not storage.read_only
        assert storage.stats()["readOnly"] == 0
        await storage.bookie.create_ledger()
    finally:
        await storage.close()

    reopened = await open_on(small_fs, config(**KINDS[kind]))
    try:
        assert await read_all(reopened, ledger) == acked
        assert await reopened.metadata.get("cursor") == b"1"
    finally:
        await reopened.close()


@pytest.mark.parametrize("kind", list(KINDS))
async def test_rocksdb_out_of_space_is_recovered_once_space_is_back(
    small_fs: SmallFileSystem, kind: str
) -> None:
    probe = HeldProbe(small_fs.path)
    storage = await open_on(small_fs, config(**KINDS[kind]), probe)
    try:
        ledger = await storage.bookie.create_ledger()
        acked: list[bytes] = []
        await add_entries(storage, ledger, 10, acked)
        await storage.metadata.put("cursor", b"0")

        probe.hold()
        filler = small_fs.fill_up()
        refused = await add_until_refused(storage, ledger, acked)
        probe.release()

        # The entry log had preallocated room: the location index's WAL write failed.
        assert isinstance(refused, BookieReadOnlyError)
        assert "location index write failed" in str(refused)
        assert "No space left on device" in str(refused)
        assert not disk_bookie(storage.bookie).index.database.writable
        with pytest.raises(StorageFaultError, match="metadataPut"):
            await storage.metadata.put("cursor", b"x" * 100_000)
        assert await read_all(storage, ledger) == acked
        assert await storage.metadata.get("cursor") == b"0"

        filler.unlink()
        entry = os.urandom(4096)
        await add_when_writable(storage, ledger, entry)
        acked.append(entry)

        assert disk_bookie(storage.bookie).index.database.writable
        await storage.metadata.put("cursor", b"1")
        await add_entries(storage, ledger, 5, acked)
        assert await read_all(storage, ledger) == acked
    finally:
        await storage.close()

    reopened = await open_on(small_fs, config(**KINDS[kind]))
    try:
        assert await read_all(reopened, ledger) == acked
        assert await reopened.metadata.get("cursor") == b"1"
    finally:
        await reopened.close()


@pytest.mark.parametrize("direct_io", [True, False], ids=["direct", "buffered"])
def test_a_failed_preallocation_gives_back_what_it_took(
    small_fs: SmallFileSystem, direct_io: bool
) -> None:
    logger = EntryLogger(small_fs.path / "entrylogs", 1 << 30, direct_io=direct_io)
    try:
        small_fs.fill_to(1.0 - 2 * MiB / statvfs_probe(small_fs.path)()[1])
        used_before, _ = statvfs_probe(small_fs.path)()
        frame = Frame(1, 0, [os.urandom(100 * 1024)])

        logger.write(frame)  # its 64 MiB preallocation fails: not even 2 MiB are free

        used_after, _ = statvfs_probe(small_fs.path)()
        assert used_after - used_before <= frame.size + 4 * 4096
        log = small_fs.path / "entrylogs" / f"{logger.current_log_id}.log"
        assert log.stat().st_size <= frame.size + 4096
    finally:
        logger.close()


@pytest.mark.parametrize("kind", ["batch", "none-buffered"])
async def test_after_space_is_freed_the_first_produce_grows_the_log_by_what_it_wrote(
    small_fs: SmallFileSystem, kind: str
) -> None:
    cfg = config(**KINDS[kind])
    storage = await open_on(small_fs, cfg)
    try:
        ledger = await storage.bookie.create_ledger()
        await add_entries(storage, ledger, 3, [])
        filler = small_fs.fill_up()
        await add_until_refused(storage, ledger, [])
    finally:
        await storage.close()
    # Space is freed down to just under the threshold (above the warn threshold); the
    # close gave back the log's preallocated tail, so the filler is cut to the target.
    filler.unlink()
    small_fs.fill_to(0.92)

    storage = await open_on(small_fs, cfg)
    try:
        assert not storage.read_only
        logs = list((small_fs.path / "data" / "entrylogs").glob("*.log"))
        before = sum(path.stat().st_blocks * 512 for path in logs)
        entry = os.urandom(256 * 1024)
        await storage.bookie.add_entries(ledger, [entry])
        after = sum(path.stat().st_blocks * 512 for path in logs)

        frame_bytes = FRAME_HEADER_SIZE + LENGTH_SIZE + len(entry)
        assert after - before <= frame_bytes + 2 * 4096
        assert small_fs.usage() < cfg.diskUsageThreshold
    finally:
        await storage.close()


async def test_preallocation_never_takes_the_disk_to_the_threshold(
    small_fs: SmallFileSystem,
) -> None:
    # 16 MiB logs: a whole preallocation step (16 MiB) fits in the free space but would
    # take the disk past 95%.
    cfg = config(syncMode="batch", logSizeLimit=16 * MiB)
    small_fs.fill_to(0.70)
    storage = await open_on(small_fs, cfg)
    try:
        ledger = await storage.bookie.create_ledger()
        await add_entries(storage, ledger, 3, [])
        usage = small_fs.usage()

        assert usage < (0.70 + cfg.diskUsageThreshold) / 2 + 0.02
        assert not storage.read_only
    finally:
        await storage.close()


@pytest.mark.parametrize("kind", list(KINDS))
async def test_start_up_on_a_full_disk_comes_up_read_only_and_serves_reads(
    small_fs: SmallFileSystem, kind: str
) -> None:
    cfg = config(**KINDS[kind])
    storage = await open_on(small_fs, cfg)
    try:
        closed = await storage.bookie.create_ledger()
        still_open = await storage.bookie.create_ledger()
        closed_entries: list[bytes] = []
        open_entries: list[bytes] = []
        await add_entries(storage, closed, 20, closed_entries)
        await add_entries(storage, still_open, 7, open_entries)
        await storage.bookie.close_ledger(closed)
        await storage.metadata.put("cursor", b"0")
    finally:
        await storage.close()
    filler = small_fs.fill_up()

    storage = await open_on(small_fs, cfg)
    try:
        assert storage.read_only
        assert storage.read_only_reason is not None
        assert "full" in storage.read_only_reason
        assert await read_all(storage, closed) == closed_entries
        assert await read_all(storage, still_open) == open_entries
        assert await storage.bookie.get_last_entry_in_ledger(still_open) == 6
        assert await storage.metadata.get("cursor") == b"0"
        with pytest.raises(BookieReadOnlyError):
            await storage.bookie.add_entries(still_open, [b"refused"])
        with pytest.raises(BookieReadOnlyError):
            await storage.bookie.create_ledger()

        filler.unlink()
        entry = os.urandom(4096)
        await add_when_writable(storage, still_open, entry)
        open_entries.append(entry)

        await storage.metadata.put("cursor", b"1")
        await storage.bookie.create_ledger()
    finally:
        await storage.close()

    reopened = await open_on(small_fs, cfg)
    try:
        assert not reopened.read_only
        assert await read_all(reopened, closed) == closed_entries
        assert await read_all(reopened, still_open) == open_entries
        assert await reopened.metadata.get("cursor") == b"1"
    finally:
        await reopened.close()


@pytest.mark.parametrize("kind", list(KINDS))
async def test_close_on_a_full_disk_raises_nothing_and_lets_every_file_go(
    small_fs: SmallFileSystem, kind: str
) -> None:
    cfg = config(**KINDS[kind])
    probe = HeldProbe(small_fs.path)
    storage = await open_on(small_fs, cfg, probe)
    acked: list[bytes] = []
    try:
        ledger = await storage.bookie.create_ledger()
        await add_entries(storage, ledger, 10, acked)
        probe.hold()
        filler = small_fs.fill_up()
        await add_until_refused(storage, ledger, acked)  # RocksDB is out of space now
        probe.release()
        with pytest.raises(StorageFaultError):
            await storage.metadata.put("cursor", b"x" * 100_000)
    finally:
        await storage.close()
    await storage.close()  # and again: idempotent

    assert small_fs.open_files() == []
    filler.unlink()
    reopened = await open_on(small_fs, cfg)
    try:
        assert await read_all(reopened, ledger) == acked
    finally:
        await reopened.close()


async def test_without_read_only_mode_a_full_disk_stops_adds_until_a_restart(
    small_fs: SmallFileSystem,
) -> None:
    cfg = config(syncMode="batch", readOnlyModeEnabled=False)
    storage = await open_on(small_fs, cfg)
    try:
        ledger = await storage.bookie.create_ledger()
        acked: list[bytes] = []
        await add_entries(storage, ledger, 5, acked)
        filler = small_fs.fill_to(0.97)
        refused = await add_until_refused(storage, ledger, acked)

        assert type(refused) is StorageFaultError
        assert "readOnlyModeEnabled=false" in str(refused)
        assert await read_all(storage, ledger) == acked

        filler.unlink()
        await eventually_async(
            lambda: storage.disk_usage < 0.5, "the bookie to see the space come back", DEADLINE_S
        )
        with pytest.raises(StorageFaultError, match="readOnlyModeEnabled=false"):
            await storage.bookie.add_entries(ledger, [b"still refused"])
    finally:
        await storage.close()

    # A BookKeeper bookie without read-only mode does not start on a full disk.
    filler = small_fs.fill_up()
    with pytest.raises(StorageFaultError, match="open"):
        await open_on(small_fs, cfg)
    assert small_fs.open_files() == []

    filler.unlink()
    restarted = await open_on(small_fs, cfg)
    try:
        await restarted.bookie.add_entries(ledger, [b"after the restart"])
        assert await read_all(restarted, ledger) == [*acked, b"after the restart"]
    finally:
        await restarted.close()


@pytest.mark.slow
async def test_a_database_rocksdb_recovered_by_itself_is_not_reopened(
    tmp_path: pathlib.Path,
) -> None:
    # RocksDB clears a no-space error by itself once 64 MiB (its write buffer) are free,
    # retrying every 5 s: on a 256 MiB disk it does, and the bookie only checks that.
    with small_file_system(tmp_path, "256M") as fs:
        probe = HeldProbe(fs.path)
        storage = await open_on(fs, config(syncMode="batch"), probe)
        try:
            ledger = await storage.bookie.create_ledger()
            acked: list[bytes] = []
            await add_entries(storage, ledger, 10, acked)
            probe.hold()
            filler = fs.fill_up()
            await add_until_refused(storage, ledger, acked)
            index = disk_bookie(storage.bookie).index.database
            assert not index.writable
            rocksdb = index.db
            probe.release()
            probe.hold()  # the bookie sees the disk full until RocksDB has recovered
            filler.unlink()

            def rocksdb_writes() -> bool:
                try:
                    rocksdb.delete(b"probe")
                except Exception:  # rocksdict raises a plain Exception
                    return False
                return True

            await eventually_async(
                rocksdb_writes, "RocksDB to clear its no-space error", DEADLINE_S
            )
            probe.release()
            entry = os.urandom(4096)
            await add_when_writable(storage, ledger, entry)
            acked.append(entry)

            assert index.db is rocksdb  # not reopened
            assert index.writable
            assert await read_all(storage, ledger) == acked
        finally:
            await storage.close()
