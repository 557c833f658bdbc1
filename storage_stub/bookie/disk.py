"""The on-disk bookie: entry logs + location index + ledger metadata index.

Data directory layout::

    <data>/entrylogs/<n>.log   entry payloads, one frame per add (EntryLogger)
    <data>/index/              RocksDB: (ledger, first entry) -> frame (EntryLocationIndex)
    <data>/metadata/           RocksDB: ledger metadata, next ledger id (LedgerMetadataIndex)
                               and the metadata store's records (RocksMetadataStore)

An add becomes one frame (header and CRC built on the event loop, no payload copied)
in a preallocated log, and one index key. By ``syncMode``:

- ``always``: the add's own commit: write, fsync the entry log, WAL-synced index write;
- ``batch``: group commit: adds gathered for up to ``journalMaxGroupWaitMSec`` (or
  ``journalBufferedWritesThreshold`` bytes) share one fsync, pipelined as BookKeeper's
  journal and force-write threads are, in two stages: group N+1 is gathered and written
  to the entry log (write) while group N's entry logs are fsynced (sync: on a compiled
  thread of its own, so no Python thread runs and the GIL is held through no fsync);
  then group N is indexed with a plain write on the loop (a memtable insert and a WAL
  append, tens of us; the WAL is not synced) and its adds are acknowledged. What arrives
  while a sync is out is written too and joins the group being written. At most one
  group in each stage; a group's sync starts once the previous sync has ended. The entry
  logs are the journal: one device flush a group, as BookKeeper's journal fsync is, and
  recovery indexes again what the index lost (below). A failure in either stage fails
  its group, the group written behind it and every add queued, and gives the ids back
  (their frames stay in the log, never indexed); the first group indexed after a
  failure is indexed with a synced write (on the writer thread), so that no frame of a
  failed group lies between the replay point and an acknowledged frame. The bookie
  goes on (read-only only where the failure says the disk is full or a database
  failed); BookKeeper stops its journal, and the bookie with it, on a force-write
  failure instead;
- ``none``: nothing fsynced (survives a process kill, not a power loss).

With ``dbStorage_directIOEntryLogger`` (the default) every mode goes through the group
committer: the entry log's compiled writer thread (``direct_writer``: C, so it never
takes the loop's GIL) copies a group's frames into the log's aligned buffer, computes
their CRCs and runs the O_DIRECT pwrite, and the loop indexes the group (none) or hands
fsync and a synced index write to the writer thread (always) or to the sync threads
(batch, above).
In none, groups are not held back: what arrives while one write is out goes with the
next. Measured here (16 concurrent adds of 100 x 1 KiB entries, syncMode=none), an add
cost the loop 20-21 us with direct I/O and the writer thread (25-30 with the writer
process before it) and 260-280 us through the page cache, and the thread does no Python
work the loop would wait for.

Without direct I/O: in none, frames are written (one pwritev each) and indexed at once
on the loop; in always/batch each group goes to the writer thread, where its frames are
written, fsynced and indexed in one hop.

An entry is indexed only after its frame is written (and durable, in always/batch), and
an add returns only after its index write, so reads (which go through the index) see
every acknowledged entry. Groups are acknowledged one at a time in submission order, so
acknowledgements follow entry ids.

Recovery is a journal replay. Each index write records the replay point, where its last
frame ends (see location_index); RocksDB recovers a prefix of its writes, so after a
crash that lost unsynced index writes (a power loss; a process kill loses none) every
frame before the point is indexed. On open the bookie reads the frames after it from the
entry logs (each log up to its first torn frame, the newest one cut back there) and
indexes them again, skipping deleted ledgers and, for closed ones, frames past their
last entry; a frame replaces its ledger's locations from its first entry on. Like
BookKeeper's journal replay this may bring back entries whose add failed or was never
answered (written, never acknowledged, after the last acknowledged one): never an
acknowledged entry lost, possibly an unacknowledged one kept, which a BookKeeper client
allows for too (ledger recovery keeps what reached the bookies). The replay costs a read
of what was written since the point: nothing after a clean close or a process kill.

While a sync is out the next group's write may roll the entry log: the files to fsync
are taken on the loop when a sync starts (the new log and its directory entry go with
the group that first wrote there), and rolled logs stay open, so a sync never meets a
closed descriptor.

A full disk makes the bookie read-only, not broken (see disk_monitor): its
DiskUsageMonitor checks the file system every ``diskCheckInterval`` and right after a
write that found no space; while read-only, ``create_ledger`` and ``add_entries`` raise
BookieReadOnlyError saying why, and reads, floor seeks, closes and deletes go on as far
as the disk allows. Once space is back the monitor reopens the RocksDB databases that
failed a write (RocksDB refuses every write after one, and rocksdict has no
``DB::Resume``) or that could only be opened read-only at start-up, and the same bookie
takes adds again. Every failure surfaces as a BookieError: StorageFaultError naming the
operation with the OS or RocksDB message, never a raw exception; ``close`` on a full disk
logs what fails and releases every file.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import logging
import pathlib
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any, TypeVar

from rocksdict import WriteBatch

from storage_stub.bookie.api import (
    BookieError,
    LedgerClosedError,
    LedgerMetadata,
    NoSpaceError,
    NoSuchEntryError,
    NoSuchLedgerError,
    StorageFaultError,
    os_fault,
)
from storage_stub.bookie.counters import OpCounters
from storage_stub.bookie.direct_io import DirectWrite
from storage_stub.bookie.direct_writer import ThreadWriter, thread_writer_built
from storage_stub.bookie.disk_monitor import DiskUsageMonitor, UsageProbe, statvfs_probe
from storage_stub.bookie.entry_log import EntryLogger
from storage_stub.bookie.frame import Frame, FrameLocation, ScannedFrame
from storage_stub.bookie.group_commit import GroupCommitter
from storage_stub.bookie.grouped_writes import GroupedSyncWriter
from storage_stub.bookie.ledger_metadata import LedgerMetadataIndex
from storage_stub.bookie.location_index import EntryLocationIndex
from storage_stub.bookie.read_cache import ReadCache
from storage_stub.bookie.rocks import RocksDatabase
from storage_stub.config import StorageConfig

log = logging.getLogger(__name__)
T = TypeVar("T")


class _DiskLedger:
    """Live state of one ledger. ``metadata`` holds what is confirmed (durable);
    ``next_entry_id`` runs ahead of it while adds are being committed."""

    __slots__ = ("in_flight", "metadata", "next_entry_id", "sealers")

    def __init__(self, metadata: LedgerMetadata) -> None:
        self.metadata = metadata
        self.next_entry_id = metadata.last_entry_id + 1
        #: The newest add of this ledger not yet committed (adds commit in order).
        self.in_flight: asyncio.Future[int] | None = None
        #: Close/recover/delete calls in progress; adds are refused meanwhile.
        self.sealers = 0


class _PendingAdd:
    __slots__ = ("frame", "ledger", "location")

    def __init__(self, ledger: _DiskLedger, frame: Frame) -> None:
        self.ledger = ledger
        self.frame = frame
        #: where the frame was written (set by the pipelined write stage)
        self.location: FrameLocation | None = None


class DiskBookie:
    """Bookie on a data directory. Open with ``await DiskBookie.open(...)``.

    Costs on the loop: ``add_entries`` one frame header; without direct I/O, the CRC over
    the payloads (ISA-L, about 0.05 us per KiB); with direct I/O, a share of one group
    commit (the payloads handed to the compiled writer thread, which copies, seals and
    writes them, one wakeup when it is done, one index batch or, in always/batch, a
    second hop for fsync and index); without, in syncMode=none one pwritev and one
    index put on the loop, in always/batch a share of one writer-thread hop per group.
    ``read_entries`` one floor seek plus one iterator step per further frame, and about
    one pread per 256 KiB of nearby entries (page-cache reads).
    ``get_last_entry_in_ledger`` one floor seek. ``last_add_confirmed`` and
    ``ledger_metadata`` O(1) from memory. Read-only mode costs an add one attribute check.
    """

    __slots__ = (
        "_closed",
        "_committer",
        "_counters",
        "_cut_failed",
        "_executor",
        "_index",
        "_index_sync_next",
        "_ledger_index",
        "_ledgers",
        "_log",
        "_log_executor",
        "_metadata_db",
        "_metadata_writer",
        "_monitor",
        "_owns_metadata_writer",
        "_read_ahead",
        "_sync",
        "_sync_mode",
        "_syncer",
        "_writer",
        "read_cache",
    )

    def __init__(
        self,
        *,
        log: EntryLogger,
        index: EntryLocationIndex,
        ledger_index: LedgerMetadataIndex,
        ledgers: dict[int, _DiskLedger],
        config: StorageConfig,
        counters: OpCounters,
        probe: UsageProbe,
        metadata_writer: GroupedSyncWriter | None = None,
    ) -> None:
        self._log = log
        self._index = index
        self._ledger_index = ledger_index
        self._metadata_db = ledger_index.database
        self._ledgers = ledgers
        self._counters = counters
        self._monitor = DiskUsageMonitor(
            probe, config, recover=self._recover, set_budget=self._set_preallocation_budget
        )
        self._sync_mode = config.syncMode
        #: the bookie's read cache, None when dbStorage_readAheadCacheMaxSizeMb is 0
        self.read_cache = (
            ReadCache(config.dbStorage_readAheadCacheMaxSizeMb * 1024 * 1024)
            if config.dbStorage_readAheadCacheMaxSizeMb > 0
            else None
        )
        self._read_ahead = config.dbStorage_readAheadCacheBatchSize
        self._sync = config.syncMode != "none"
        #: synced ledger metadata writes share fsyncs with the metadata database's others
        self._owns_metadata_writer = self._sync and metadata_writer is None
        self._metadata_writer = (
            (metadata_writer or GroupedSyncWriter(self._metadata_db, name="metadata"))
            if self._sync
            else None
        )
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="bookie-writer")
        #: where entry log writes run when not on the compiled writer thread: in batch,
        #: a thread of their own, so a group is written while the one before it syncs
        #: on the writer thread; else the writer thread
        self._log_executor = (
            ThreadPoolExecutor(max_workers=1, thread_name_prefix="bookie-log-writer")
            if config.syncMode == "batch"
            else self._executor
        )
        # The writer thread writes the location index (the metadata database has its
        # GroupedSyncWriter's thread): a reopen holds it off.
        index.database.writers.append(self._executor)
        self._metadata_db.on_write_failure = self._database_failed
        self._closed = False
        #: the thread that copies, seals and writes direct I/O groups (made by ``open``
        #: where built; else the loop copies and the writer thread writes)
        self._writer: ThreadWriter | None = None
        #: batch: one more compiled thread (made by ``open`` where built) for the groups'
        #: entry log fsyncs, so that group N's logs are synced while group N+1 is written
        self._syncer: ThreadWriter | None = None
        #: batch: a group failed since the last index write, so the next one is synced
        #: (no failed frame may sit between the replay point and an acknowledged frame)
        self._index_sync_next = False
        #: adds failed since the last write: their frames are cut off the log before
        #: the next write (or at close), when no write is out
        self._cut_failed = False
        self._committer: GroupCommitter[_PendingAdd, int] | None = None
        if config.syncMode == "always":
            self._committer = GroupCommitter(
                self._commit,
                max_wait_s=0.0,
                max_bytes=config.journalBufferedWritesThreshold,
                max_items=1,
                on_failure=self._group_failed,
            )
        elif config.syncMode == "batch":
            # pipelined: group N+1 is written while group N is fsynced
            self._committer = GroupCommitter(
                self._write_stage,
                max_wait_s=config.journalMaxGroupWaitMSec / 1000.0,
                max_bytes=config.journalBufferedWritesThreshold,
                sync=self._start_sync,
                on_failure=self._group_failed,
            )
        elif log.direct_io:
            # none with direct I/O: no fsync to share, so no wait to gather a group; what
            # arrives while a write is out goes out with the next one.
            self._committer = GroupCommitter(
                self._commit,
                max_wait_s=0.0,
                max_bytes=config.journalBufferedWritesThreshold,
                on_failure=self._group_failed,
            )

    @classmethod
    async def open(
        cls,
        config: StorageConfig,
        data_dir: pathlib.Path,
        metadata_db: RocksDatabase,
        counters: OpCounters | None = None,
        *,
        probe: UsageProbe | None = None,
        metadata_writer: GroupedSyncWriter | None = None,
    ) -> DiskBookie:
        """Open the bookie on ``data_dir`` (created if missing), using the shared metadata
        database ``metadata_db`` (not owned). Recovery: cut a torn tail off the newest
        entry log; index again the frames written after the index's replay point (see
        the module); for every open ledger read its last entry and size from the index.

        ``metadata_writer``: the metadata database's GroupedSyncWriter (not owned), shared
        with the metadata store; the bookie opens its own when none is given.
        ``probe`` reports the disk usage (default: statvfs of ``data_dir``). On a full disk
        the bookie opens read-only (with ``readOnlyModeEnabled``; without it, start-up
        fails with StorageFaultError, as a BookKeeper bookie does not start)."""
        parts = await asyncio.to_thread(cls._open_parts, config, data_dir, metadata_db)
        bookie = cls(
            log=parts[0],
            index=parts[1],
            ledger_index=parts[2],
            ledgers=parts[3],
            config=config,
            counters=counters if counters is not None else OpCounters(),
            probe=probe if probe is not None else statvfs_probe(data_dir),
            metadata_writer=metadata_writer,
        )
        monitor = bookie._monitor
        for database in (bookie._index.database, metadata_db):
            if database.read_only is not None:
                monitor.turn_read_only(database.read_only)
        await monitor.check(periodic=False)
        if monitor.read_only and not config.readOnlyModeEnabled:
            reason = monitor.read_only_reason
            await bookie.close()
            raise StorageFaultError(
                "open", f"the disk is full ({reason}) and readOnlyModeEnabled=false"
            )
        try:
            if bookie._log.direct_io and thread_writer_built():
                bookie._writer = ThreadWriter()
            if config.syncMode == "batch" and thread_writer_built():
                bookie._syncer = ThreadWriter()
        except BaseException:
            await bookie.close()
            raise
        monitor.start()
        if bookie._committer is not None:
            bookie._committer.start()
        return bookie

    @staticmethod
    def _open_parts(
        config: StorageConfig, data_dir: pathlib.Path, metadata_db: RocksDatabase
    ) -> tuple[EntryLogger, EntryLocationIndex, LedgerMetadataIndex, dict[int, _DiskLedger]]:
        try:
            log = EntryLogger(
                data_dir / "entrylogs", config.logSizeLimit, config.dbStorage_directIOEntryLogger
            )
        except OSError as error:
            raise os_fault("open", "opening the entry logs", error) from None
        try:
            index = EntryLocationIndex(
                data_dir / "index", allow_read_only=config.readOnlyModeEnabled
            )
        except BaseException:
            log.close()
            raise
        try:
            ledger_index = LedgerMetadataIndex(metadata_db)
            ledgers: dict[int, _DiskLedger] = {}
            known = ledger_index.load_all()
            DiskBookie._replay(log, index, known)
            for ledger_id, metadata in known.items():
                if not metadata.closed:
                    # What was acknowledged is what the index holds.
                    metadata.last_entry_id = index.get_last_entry_in_ledger(ledger_id)
                    metadata.length = index.ledger_stats(ledger_id)[1]
                ledgers[ledger_id] = _DiskLedger(metadata)
        except BaseException:
            index.close()
            log.close()
            raise
        return log, index, ledger_index, ledgers

    @staticmethod
    def _replay(
        entry_log: EntryLogger, index: EntryLocationIndex, known: dict[int, LedgerMetadata]
    ) -> None:
        """Index the frames the entry logs hold after the index's replay point (see the
        module): of ledgers in ``known`` only, of closed ones up to their last entry,
        and none that would leave a hole in its ledger's ids (a frame whose first id
        lies past the end of what the index and the replay hold of its ledger: what
        came after frames that failed or were torn, never acknowledged).
        Blocking; O(bytes written after the point). With no replay point, an empty index
        replays every log (a new bookie whose first index write was lost) and any other
        is one written before the point existed, with every write synced: nothing to do.
        StorageFaultError when there is something to index and the index cannot take it
        (opened read-only on a full disk): like a bookie whose journal replay fails, the
        bookie does not start."""
        end = FrameLocation(entry_log.current_log_id, entry_log.write_offset)
        index.indexed_end = end  # indexed, or replayed below
        start = index.replay_point()
        if start is None:
            if not index.is_empty():
                return
            start = FrameLocation(0, 0)
        if start == end:
            return  # a clean close, or a process kill: the index has every frame

        #: per ledger met: the entry id its next frame must start at or before
        following: dict[int, int] = {}

        def wanted() -> Iterator[tuple[int, ScannedFrame]]:
            for log_id, frame in entry_log.frames_from(start.log_id, start.offset):
                ledger_id = frame.ledger_id
                metadata = known.get(ledger_id)
                if metadata is None:
                    continue  # deleted (its metadata goes first)
                first = frame.first_entry_id
                if metadata.closed and first > metadata.last_entry_id:
                    continue  # past what the close confirmed: adds that failed
                next_id = following.get(ledger_id)
                if next_id is None:
                    next_id = index.get_last_entry_in_ledger(ledger_id) + 1
                if first > next_id:
                    continue  # past a hole (frames lost or voided): never acknowledged
                following[ledger_id] = first + frame.entry_count
                yield log_id, frame

        frames = wanted()
        head = next(frames, None)  # a read-only index can only do without any
        if head is None and index.database.read_only is not None:
            return
        replayed = index.replay(itertools.chain(() if head is None else (head,), frames), end)
        if replayed:
            log.info(
                "replayed %d entry log frame(s) written after log %d offset %d into the "
                "location index",
                replayed,
                start.log_id,
                start.offset,
            )

    # -- helpers -------------------------------------------------------------------------

    def _ledger(self, ledger_id: int, op: str) -> _DiskLedger:
        if self._closed:
            raise StorageFaultError(op, "bookie is closed")
        ledger = self._ledgers.get(ledger_id)
        if ledger is None:
            raise NoSuchLedgerError(ledger_id)
        return ledger

    async def _in_writer(self, call: Callable[[], Any]) -> Any:
        """Run a blocking call on the writer thread (FIFO with every other write)."""
        return await asyncio.get_running_loop().run_in_executor(self._executor, call)

    async def _write(
        self, operation: str, stage: Callable[[WriteBatch, T], None], argument: T
    ) -> None:
        """A ledger metadata write of the records ``stage(batch, argument)`` adds: synced
        with the metadata database's other writes in flight (one fsync for the group), or
        plain on the loop (none)."""
        try:
            if self._metadata_writer is not None:
                await self._metadata_writer.write(operation, stage, argument)
            else:
                self._ledger_index.write(operation, stage, argument, sync=False)
        except StorageFaultError as error:
            raise self._failed(operation, error) from None

    def _failed(self, operation: str, error: StorageFaultError) -> BookieError:
        """What a failed write raises. A full disk, or a database left failed, turns the
        bookie read-only first; a refused add or creation then raises the read-only
        error, which says why."""
        if not isinstance(error, NoSpaceError) and (
            self._index.database.writable and self._metadata_db.writable
        ):
            return error
        self._monitor.turn_read_only(f"{error.operation} failed: {error.detail}")
        if operation in ("addEntries", "createLedger"):
            return self._monitor.refusal(operation)
        return error

    def _database_failed(self, error: StorageFaultError) -> None:
        """The metadata store's write failed (event loop)."""
        if not self._closed:
            self._monitor.turn_read_only(f"{error.operation} failed: {error.detail}")

    def _set_preallocation_budget(self, budget: int) -> None:
        self._log.preallocation_budget = budget

    async def _recover(self) -> None:
        """Make the databases writable again (the monitor calls this once space is back):
        resume each one that failed a write or was opened read-only."""
        for database in (self._index.database, self._metadata_db):
            if not database.writable:
                await database.resume()

    @staticmethod
    async def _drain(ledger: _DiskLedger) -> None:
        """Wait until the ledger's adds in flight are committed or failed."""
        in_flight = ledger.in_flight
        if in_flight is not None and not in_flight.done():
            await asyncio.wait((in_flight,))

    # -- Bookie --------------------------------------------------------------------------

    async def create_ledger(self) -> int:
        if self._closed:
            raise StorageFaultError("createLedger", "bookie is closed")
        if self._monitor.read_only_reason is not None:
            raise self._monitor.refusal("createLedger")
        ledger_id = self._ledger_index.allocate_ledger_id()
        metadata = LedgerMetadata(
            ledger_id=ledger_id,
            closed=False,
            last_entry_id=-1,
            length=0,
            created_ms=int(time.time() * 1000),
        )
        await self._write("createLedger", LedgerMetadataIndex.stage_create, metadata)
        self._ledgers[ledger_id] = _DiskLedger(metadata)
        return ledger_id

    async def add_entries(self, ledger_id: int, entries: Sequence[bytes]) -> int:
        return await asyncio.shield(self.start_add(ledger_id, entries))

    def start_add(self, ledger_id: int, entries: Sequence[bytes]) -> asyncio.Future[int]:
        """Take the ids and queue the frame for the next group (or, with no committer,
        write it at once); the future resolves when its group is committed. O(entries)
        on the loop for the frame's header."""
        ledger = self._ledger(ledger_id, "addEntries")
        if ledger.metadata.closed or ledger.sealers:
            raise LedgerClosedError(ledger_id)
        if self._monitor.read_only_reason is not None:
            raise self._monitor.refusal("addEntries")
        if not entries:
            raise ValueError("add_entries needs at least one entry")
        first = ledger.next_entry_id
        frame = Frame(ledger_id, first, entries)
        last = first + frame.count - 1
        committer = self._committer
        if committer is None:
            try:
                location = self._log.write(frame)  # cut off again if it fails
            except StorageFaultError as error:
                raise self._failed("addEntries", error) from None
            try:
                self._index.add_frames(((frame, location),), sync=False)
            except StorageFaultError as error:
                self._cut_failed = True
                self._cut_back_quietly()
                raise self._failed("addEntries", error) from None
            ledger.next_entry_id = last + 1
            metadata = ledger.metadata
            metadata.last_entry_id = last
            metadata.length += frame.payload_bytes
            result: asyncio.Future[int] = asyncio.get_running_loop().create_future()
            result.set_result(last)
            return result
        # the committer's future is the add's: it resolves to the last entry id
        future = committer.submit(_PendingAdd(ledger, frame), frame.payload_bytes, last)
        ledger.next_entry_id = last + 1
        ledger.in_flight = future
        return future

    def _write_group(self, group: list[_PendingAdd]) -> None:
        """Writer thread (always/batch, page cache): write the group's frames, then
        ``_sync_and_index``. Cost: one pwritev per frame, one fsync per log written, one
        index batch."""
        log = self._log
        self._sync_and_index([(add.frame, log.write(add.frame)) for add in group])

    def _sync_and_index(self, written: list[tuple[Frame, FrameLocation]]) -> None:
        """Writer thread (always/batch): fsync the entry logs written, then index the
        frames with a WAL-synced write."""
        self._log.sync()
        self._index.add_frames(written, sync=True)

    async def _commit_direct(self, group: list[_PendingAdd]) -> None:
        """Direct I/O: the entry log's compiled writer thread copies the group into the
        aligned buffer, fills in the frames' CRCs and does the pwrite (one per log
        touched), so the loop neither blocks on the device nor copies (without it, the
        loop copies and the writer thread does the rest). Then, in none, the index write
        on the loop; in always/batch, fsync and a synced index write on the writer
        thread."""
        frames = [add.frame for add in group]
        writer = self._writer
        if writer is not None:
            locations = await self._log.write_direct_group(frames, writer.write, copy=False)
        else:
            locations = await self._log.write_direct_group(frames, self._execute)
        written = list(zip(frames, locations, strict=True))
        if self._sync:
            await self._in_writer(functools.partial(self._sync_and_index, written))
            return
        self._index.add_frames(written, sync=False)

    async def _execute(self, write: DirectWrite) -> None:
        await asyncio.get_running_loop().run_in_executor(self._log_executor, write.execute)

    async def _commit(self, group: list[_PendingAdd]) -> None:
        """always, none: commit a group (one writer-thread hop, or the direct I/O path);
        then confirm its adds. On failure the committer calls ``_group_failed``."""
        self._cut_back_failed()
        if self._log.direct_io:
            await self._commit_direct(group)
        else:
            await self._in_writer(functools.partial(self._write_group, group))
        self._confirm(group)

    @staticmethod
    def _confirm(group: list[_PendingAdd]) -> None:
        """The group is durable (as its sync mode asks): its adds become readable."""
        for add in group:
            metadata = add.ledger.metadata
            frame = add.frame
            metadata.last_entry_id = frame.first_entry_id + frame.count - 1
            metadata.length += frame.payload_bytes

    def _group_failed(self, error: Exception) -> Exception:
        """A group failed, and with it every add written or queued behind it (the
        committer calls this with no earlier group unresolved): ids go back to the last
        confirmed entry of each ledger, and the next index write is synced. O(open
        ledgers). Returns what the adds raise."""
        self._index_sync_next = True
        self._cut_failed = True
        for ledger in self._ledgers.values():
            ledger.next_entry_id = ledger.metadata.last_entry_id + 1
        if isinstance(error, StorageFaultError):
            return self._failed("addEntries", error)
        if not isinstance(error, BookieError):
            failure = StorageFaultError("addEntries", f"commit failed: {error}")
            failure.__cause__ = error
            return failure
        return error

    def _cut_back_failed(self) -> None:
        """Before a write, with none out: if adds failed since the last one, cut their
        frames off the entry log (everything after the last frame indexed: a failure
        fails every add written after it), so that a replay cannot bring back an add
        that was answered with an error. Only within the current log (see
        ``EntryLogger.cut_back``). StorageFaultError if the cut fails."""
        if self._cut_failed:
            self._cut_failed = False
            end = self._index.indexed_end
            if end is not None:
                self._log.cut_back(end)

    def _cut_back_quietly(self) -> None:
        """``_cut_back_failed`` where a failure is already being reported: log a failed
        cut instead of raising it."""
        try:
            self._cut_back_failed()
        except StorageFaultError as error:
            log.error("%s", error)

    # -- batch: the pipelined group commit -------------------------------------------------

    async def _write_stage(self, group: list[_PendingAdd]) -> None:
        """batch, stage 1: write the group's frames to the entry log (direct I/O: on the
        compiled writer thread; else on the log writer thread), not yet durable. It may
        run while the previous group syncs on the writer thread: the two touch no common
        state but the log file, which each thread reaches by its own calls. Cost on the
        loop: planning the direct write, one wakeup."""
        self._cut_back_failed()
        frames = [add.frame for add in group]
        entry_log = self._log
        if entry_log.direct_io:
            writer = self._writer
            if writer is not None:
                locations = await entry_log.write_direct_group(frames, writer.write, copy=False)
            else:
                locations = await entry_log.write_direct_group(frames, self._execute)
        else:
            locations = await asyncio.get_running_loop().run_in_executor(
                self._log_executor, entry_log.write_group, frames
            )
        for add, location in zip(group, locations, strict=True):
            add.location = location

    def _start_sync(self, group: list[_PendingAdd]) -> Awaitable[None]:
        """batch, stage 2, called on the loop once the group is written and the sync
        before it has ended: take the entry log files written since the last sync now
        (before the next group's write, which may roll the log), and return the sync
        (``_sync_stage``). O(1) on the loop."""
        return self._sync_stage(group, self._log.take_unsynced())

    async def _sync_stage(self, group: list[_PendingAdd], fds: list[int]) -> None:
        """fsync the entry log files ``fds`` (on the sync thread, else the writer
        thread), then index the group and confirm its adds. The index write is a plain
        one on the loop (a memtable insert and a WAL append, tens of us): the frames are
        durable in the logs, and recovery indexes again what the index lost. The first
        one after a failed group is synced instead, on the writer thread (rocksdict
        holds the GIL through a synced write, so the loop stands still for that fsync:
        once a failure). O(group) on the loop."""
        try:
            await self._fsync_logs(fds)
        except BaseException as error:
            self._log.restore_unsynced(fds)  # due again with the next sync
            if isinstance(error, OSError):
                raise os_fault("addEntries", "entry log fsync", error) from None
            raise
        written = self._written(group)
        if self._index_sync_next:
            await self._in_writer(functools.partial(self._index.add_frames, written, sync=True))
            self._index_sync_next = False
        else:
            self._index.add_frames(written, sync=False)
        self._confirm(group)

    async def _fsync_logs(self, fds: list[int]) -> None:
        """fsync the entry log descriptors ``fds``: on the sync thread, else on the
        writer thread. OSError of the first fsync that failed."""
        if self._syncer is not None:
            await self._syncer.fsync(fds)
        else:
            await self._in_writer(functools.partial(EntryLogger.fsync_all, fds))

    @staticmethod
    def _written(group: list[_PendingAdd]) -> list[tuple[Frame, FrameLocation]]:
        written: list[tuple[Frame, FrameLocation]] = []
        for add in group:
            assert add.location is not None
            written.append((add.frame, add.location))
        return written

    async def read_entries(self, ledger_id: int, first: int, last: int) -> list[bytes]:
        ledger = self._ledger(ledger_id, "readEntries")
        if last < first:
            return []
        if first < 0:
            raise NoSuchEntryError(ledger_id, first)
        confirmed = ledger.metadata.last_entry_id
        if last > confirmed:
            raise NoSuchEntryError(ledger_id, max(first, confirmed + 1))
        if self.read_cache is not None:
            return self._read_through_cache(ledger_id, first, last, confirmed)
        return self._read_log(ledger_id, first, last)

    def _read_log(self, ledger_id: int, first: int, last: int) -> list[bytes]:
        runs, missing = self._index.find_runs(ledger_id, first, last)
        if missing <= last:
            raise NoSuchEntryError(ledger_id, missing)
        return self._log.read_runs(runs)

    def _read_through_cache(
        self, ledger_id: int, first: int, last: int, confirmed: int
    ) -> list[bytes]:
        """Serve what the read cache holds; on a miss read from the first missing entry
        to ``last`` plus up to ``dbStorage_readAheadCacheBatchSize`` following entries
        of the ledger, and keep them all in the read cache."""
        cache = self.read_cache
        assert cache is not None
        found: list[bytes | None] = [cache.get(ledger_id, eid) for eid in range(first, last + 1)]
        try:
            first_miss = first + found.index(None)
        except ValueError:
            return found  # type: ignore[return-value]
        ahead_last = min(confirmed, last + self._read_ahead)
        datas = self._read_log(ledger_id, first_miss, ahead_last)
        for entry_id, data in zip(range(first_miss, ahead_last + 1), datas, strict=True):
            cache.put(ledger_id, entry_id, data)
            if entry_id <= last:
                found[entry_id - first] = data
        cache.read_ahead += max(ahead_last - last, 0)
        return found  # type: ignore[return-value]

    async def last_add_confirmed(self, ledger_id: int) -> int:
        return self._ledger(ledger_id, "getLastEntry").metadata.last_entry_id

    async def get_last_entry_in_ledger(self, ledger_id: int) -> int:
        self._ledger(ledger_id, "getLastEntry")
        self._counters.getFloor.calls += 1
        return self._index.get_last_entry_in_ledger(ledger_id)

    async def close_ledger(self, ledger_id: int) -> int:
        ledger = self._ledger(ledger_id, "closeLedger")
        if ledger.metadata.closed:
            return ledger.metadata.last_entry_id
        ledger.sealers += 1
        try:
            await self._drain(ledger)
            if not ledger.metadata.closed:
                closed = replace(ledger.metadata, closed=True)
                await self._write("closeLedger", LedgerMetadataIndex.stage_put, closed)
                ledger.metadata = closed
        finally:
            ledger.sealers -= 1
        return ledger.metadata.last_entry_id

    async def recover_and_close(self, ledger_id: int) -> int:
        ledger = self._ledger(ledger_id, "closeLedger")
        if ledger.metadata.closed:
            return ledger.metadata.last_entry_id
        ledger.sealers += 1
        try:
            await self._drain(ledger)
            if not ledger.metadata.closed:
                last = await self.get_last_entry_in_ledger(ledger_id)
                length = ledger.metadata.length
                if last != ledger.metadata.last_entry_id:
                    length = self._index.ledger_stats(ledger_id)[1]
                closed = replace(ledger.metadata, closed=True, last_entry_id=last, length=length)
                await self._write("closeLedger", LedgerMetadataIndex.stage_put, closed)
                ledger.metadata = closed
                ledger.next_entry_id = last + 1
        finally:
            ledger.sealers -= 1
        return ledger.metadata.last_entry_id

    async def delete_ledger(self, ledger_id: int) -> None:
        if self._closed:
            raise StorageFaultError("deleteLedger", "bookie is closed")
        ledger = self._ledgers.get(ledger_id)
        if ledger is None:
            return
        ledger.sealers += 1
        try:
            await self._drain(ledger)
            if self._ledgers.get(ledger_id) is not ledger:
                return
            # Metadata first: once it is gone the ledger is unknown, so locations left
            # behind by a crash (or a failed range delete) are unreachable (and ids are
            # never reused).
            await self._write("deleteLedger", LedgerMetadataIndex.stage_delete, ledger_id)
            del self._ledgers[ledger_id]
            try:
                self._index.delete_ledger(ledger_id, sync=False)
            except BookieError as error:
                if isinstance(error, StorageFaultError):
                    self._failed("deleteLedger", error)
                log.warning(
                    "ledger %d deleted; its locations stay in the index: %s", ledger_id, error
                )
        finally:
            ledger.sealers -= 1

    async def ledger_metadata(self, ledger_id: int) -> LedgerMetadata:
        """A copy: callers cannot change the bookie's state through it."""
        return replace(self._ledger(ledger_id, "getLastEntry").metadata)

    async def close(self) -> None:
        """Stop the disk monitor, commit pending adds, fsync the logs, close the files and
        the index. On a full disk what fails is logged, and every file is released."""
        if self._closed:
            return
        self._closed = True
        try:
            await self._monitor.stop()
            if self._committer is not None:
                await self._committer.close()
            self._cut_back_quietly()
            try:
                await self._in_writer(self._log.sync)
            except StorageFaultError as error:
                log.error("closing the bookie: %s", error)
            if self._metadata_writer is not None:
                if self._owns_metadata_writer:
                    await self._metadata_writer.close()
                else:
                    await self._metadata_writer.drain()
        finally:
            try:
                if self._writer is not None:
                    await self._writer.close()  # after the committer: nothing is left to write
                if self._syncer is not None:
                    await self._syncer.close()
            finally:
                self._executor.shutdown(wait=True)
                if self._log_executor is not self._executor:
                    self._log_executor.shutdown(wait=True)
                if self._executor in self._index.database.writers:
                    self._index.database.writers.remove(self._executor)
                if self._metadata_db.on_write_failure == self._database_failed:
                    self._metadata_db.on_write_failure = None
                self._index.close(flush=not self.disk_full())
                self._log.close()

    def disk_full(self) -> bool:
        """Measure the disk now: is usage at or above diskUsageThreshold? (Closing on a
        full disk, the databases skip their final flush: it would fail, and RocksDB waits
        a second after a failed flush.)"""
        monitor = self._monitor
        return monitor.measure() >= monitor.threshold

    # -- introspection for tests and stats -----------------------------------------------

    @property
    def read_only(self) -> bool:
        """True while adds and new ledgers are refused (a full disk)."""
        return self._monitor.read_only_reason is not None

    @property
    def read_only_reason(self) -> str | None:
        """Why the bookie is read-only (usage and threshold, or the failed write)."""
        return self._monitor.read_only_reason

    @property
    def disk_usage(self) -> float:
        """Usage of the data directory's file system at the last check, 0..1."""
        return self._monitor.usage

    @property
    def disk_monitor(self) -> DiskUsageMonitor:
        return self._monitor

    @property
    def sync_mode(self) -> str:
        return self._sync_mode

    @property
    def committer(self) -> GroupCommitter[_PendingAdd, int] | None:
        return self._committer

    @property
    def index(self) -> EntryLocationIndex:
        return self._index

    @property
    def entry_log(self) -> EntryLogger:
        return self._log
