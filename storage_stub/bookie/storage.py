"""``open_storage``: the bookie and metadata store of one StorageConfig, instrumented."""

from __future__ import annotations

import asyncio
import pathlib
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from storage_stub.bookie.api import OPERATIONS, Bookie, MetadataStore
from storage_stub.bookie.counters import OpCounters
from storage_stub.bookie.data_dir_lock import DataDirLock
from storage_stub.bookie.disk import DiskBookie
from storage_stub.bookie.disk_monitor import UsageProbe
from storage_stub.bookie.faults import FaultInjector
from storage_stub.bookie.grouped_writes import GroupedSyncWriter
from storage_stub.bookie.instrumented import InstrumentedBookie, InstrumentedMetadataStore
from storage_stub.bookie.last_entry_cache import LastEntryCache, LastEntryCachingBookie
from storage_stub.bookie.latency import LatencyModel
from storage_stub.bookie.memory import InMemoryBookie, InMemoryMetadataStore
from storage_stub.bookie.metadata_store import RocksMetadataStore
from storage_stub.bookie.read_cache import ReadCache
from storage_stub.bookie.rocks import RocksDatabase
from storage_stub.config import StorageConfig

# The tier is imported when storage opens, not with this package: the tier's modules import
# ``storage_stub.bookie.api``, and Python runs this package's ``__init__`` (which imports
# this module) first, so an import of ``storage_stub.tiered`` before the bookie package
# found its own ``api`` module half-initialized.
if TYPE_CHECKING:
    from storage_stub.tiered.persisted import PersistedTieredStore
    from storage_stub.tiered.range_index import MonotonicClock


class Storage:
    """What the broker holds: ``bookie`` and ``metadata`` (every call faulted, delayed and
    counted), the ``counters``, ``faults`` and ``latency`` behind them, and ``close``;
    ``read_only``, ``read_only_reason`` and ``disk_usage`` for the disk bookie's state;
    ``metadata_writer``, the metadata database's synced writer (None in memory mode and
    in syncMode=none), whose counters say how many fsyncs its writes took."""

    __slots__ = (
        "_closers",
        "_disk",
        "bookie",
        "config",
        "counters",
        "faults",
        "last_entry_cache",
        "latency",
        "metadata",
        "metadata_writer",
        "read_cache",
        "tiered",
    )

    def __init__(
        self,
        *,
        config: StorageConfig,
        bookie: Bookie,
        metadata: MetadataStore,
        counters: OpCounters,
        faults: FaultInjector,
        latency: LatencyModel,
        last_entry_cache: LastEntryCache,
        read_cache: ReadCache | None,
        tiered: PersistedTieredStore,
        closers: list[Callable[[], Awaitable[None]]],
        disk: DiskBookie | None = None,
        metadata_writer: GroupedSyncWriter | None = None,
    ) -> None:
        self._disk = disk
        self.metadata_writer = metadata_writer
        self.tiered = tiered
        self.last_entry_cache = last_entry_cache
        self.read_cache = read_cache
        self.config = config
        self.bookie = bookie
        self.metadata = metadata
        self.counters = counters
        self.faults = faults
        self.latency = latency
        self._closers = closers

    @property
    def read_only(self) -> bool:
        """True while the bookie refuses adds and new ledgers (its disk is full)."""
        return self._disk is not None and self._disk.read_only

    @property
    def read_only_reason(self) -> str | None:
        """Why the bookie is read-only; None while it is writable."""
        return None if self._disk is None else self._disk.read_only_reason

    @property
    def disk_usage(self) -> float:
        """Usage of the data directory's file system at the last check, 0..1 (0 in
        memory mode)."""
        return 0.0 if self._disk is None else self._disk.disk_usage

    def stats(self) -> dict[str, float]:
        """Flat bookie counters for ``GET /admin/v2/broker-stats/storage``: the named ones
        of the API, then ``<operation>Calls`` / ``<operation>Errors`` for every operation.
        ``getFloorCalls`` counts real floor seeks; last-entry cache hits make none.
        ``readOnly`` is 1 while the bookie is read-only; ``diskUsage`` is the usage of the
        data directory's file system at the last check (0..1; 0 in memory mode)."""
        counters = self.counters
        stats = {
            "readRequests": counters.readEntries.calls,
            "entriesRead": counters.readEntries.entries,
            "bytesRead": counters.readEntries.bytes,
            "getFloorCalls": counters.getFloor.calls,
            "lastEntryCacheHits": self.last_entry_cache.hits,
            "lastEntryCacheMisses": self.last_entry_cache.misses,
            "lastEntryCacheSize": len(self.last_entry_cache),
            "readCacheHits": self.read_cache.hits if self.read_cache else 0,
            "readCacheMisses": self.read_cache.misses if self.read_cache else 0,
            "readAheadEntries": self.read_cache.read_ahead if self.read_cache else 0,
            "entriesAdded": counters.addEntries.entries,
            "bytesAdded": counters.addEntries.bytes,
        }
        for op in OPERATIONS:
            counter = counters.of(op)
            stats[f"{op}Calls"] = counter.calls
            stats[f"{op}Errors"] = counter.errors
        result: dict[str, float] = dict(stats)
        result["readOnly"] = int(self.read_only)
        result["diskUsage"] = round(self.disk_usage, 4)
        return result

    async def close(self) -> None:
        """Close the bookie, then the metadata store, then their files (idempotent).
        Every part is closed even if one fails; the first failure is raised. A full disk
        is no failure here: the disk parts log what they cannot flush and let go."""
        closers, self._closers = self._closers, []
        first_error: BaseException | None = None
        for close in closers:
            try:
                await close()
            except BaseException as error:
                if first_error is None:
                    first_error = error
        if first_error is not None:
            raise first_error


async def open_storage(
    config: StorageConfig,
    data_dir: pathlib.Path | None,
    *,
    seed: int | None = None,
    disk_usage_probe: UsageProbe | None = None,
    clock: MonotonicClock | None = None,
) -> Storage:
    """Open the storage ``config`` describes. ``disk`` mode keeps everything under
    ``data_dir`` (created if missing) and recovers it; ``memory`` mode ignores it.
    ``seed`` makes the latency model and fault injector draws reproducible.

    On a full disk, ``disk`` mode opens read-only (``read_only``) and turns writable by
    itself once space is back; anything it cannot open raises StorageFaultError.
    ``disk_usage_probe`` replaces the statvfs of ``data_dir`` (tests). ``clock``: the
    monotonic clock the tiered store's range index ages by (None: the system's; the
    broker passes its own, so a virtual-time run ages it in virtual time)."""
    counters = OpCounters()
    faults = FaultInjector(seed=seed)
    latency = LatencyModel.from_config(config, seed=seed)
    bookie: Bookie
    metadata: MetadataStore
    read_cache: ReadCache | None = None
    disk_bookie: DiskBookie | None = None
    metadata_writer: GroupedSyncWriter | None = None
    closers: list[Callable[[], Awaitable[None]]]
    if config.storageMode == "memory":
        memory_bookie = InMemoryBookie(counters)
        memory_metadata = InMemoryMetadataStore()
        bookie, metadata = memory_bookie, memory_metadata
        closers = [memory_bookie.close, memory_metadata.close]
    else:
        if data_dir is None:
            raise ValueError("storageMode=disk needs a data directory")
        # taken first, so a second broker on the directory is told who holds it
        lock = await asyncio.to_thread(DataDirLock.acquire, data_dir)
        try:
            metadata_db = await asyncio.to_thread(
                RocksDatabase,
                data_dir / "metadata",
                name="metadata",
                allow_read_only=config.readOnlyModeEnabled,
            )
        except BaseException:
            lock.release()
            raise
        # one writer for the metadata database: the bookie's ledger records and the
        # store's records written together share one fsync
        metadata_writer = (
            GroupedSyncWriter(metadata_db, name="metadata") if config.syncMode != "none" else None
        )
        try:
            disk_bookie = await DiskBookie.open(
                config,
                data_dir,
                metadata_db,
                counters,
                probe=disk_usage_probe,
                metadata_writer=metadata_writer,
            )
        except BaseException:
            if metadata_writer is not None:
                await metadata_writer.close()
            metadata_db.close()
            lock.release()
            raise
        rocks_metadata = RocksMetadataStore(
            metadata_db, sync=metadata_writer is not None, writer=metadata_writer
        )

        async def close_metadata_db() -> None:
            if metadata_writer is not None:
                await metadata_writer.close()
            metadata_db.close(flush=not disk_bookie.disk_full())
            lock.release()

        bookie, metadata = disk_bookie, rocks_metadata
        read_cache = disk_bookie.read_cache
        closers = [disk_bookie.close, rocks_metadata.close, close_metadata_db]
    instrumented_metadata = InstrumentedMetadataStore(
        metadata, faults=faults, latency=latency, counters=counters
    )
    from storage_stub.tiered.object_store import open_object_store
    from storage_stub.tiered.persisted import PersistedTieredStore

    object_store = open_object_store(
        config, None if data_dir is None else data_dir / "objects", seed=seed
    )
    tiered = await PersistedTieredStore.open(object_store, config, instrumented_metadata, clock)
    last_entry_cache = LastEntryCache(config.dbStorage_lastEntryCacheMaxSize)
    instrumented = InstrumentedBookie(bookie, faults=faults, latency=latency, counters=counters)
    return Storage(
        config=config,
        # the cache is outermost: a hit pays neither the seek's latency nor its faults
        bookie=LastEntryCachingBookie(instrumented, last_entry_cache),
        metadata=instrumented_metadata,
        counters=counters,
        faults=faults,
        latency=latency,
        last_entry_cache=last_entry_cache,
        read_cache=read_cache,
        tiered=tiered,
        closers=closers,
        disk=disk_bookie,
        metadata_writer=metadata_writer,
    )
