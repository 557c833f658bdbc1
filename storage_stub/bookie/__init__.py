"""The stub bookie: ledgers of entries on disk (entry logs + RocksDB) or in memory.

One class per storage concern, as in BookKeeper's ``ldb`` package: EntryLogger,
EntryLocationIndex, LedgerMetadataIndex, RocksMetadataStore, GroupCommitter (adds),
GroupedSyncWriter (the metadata database's synced writes) and the DiskUsageMonitor (a
full disk makes the bookie read-only), composed by DiskBookie;
InMemoryBookie for tests; the LatencyModel, FaultInjector and OpCounters every call goes
through (InstrumentedBookie). ``open_storage`` builds all of it.
"""

from storage_stub.bookie.api import (
    OPERATIONS,
    Bookie,
    BookieError,
    BookieReadOnlyError,
    LedgerClosedError,
    LedgerMetadata,
    MetadataStore,
    NoSpaceError,
    NoSuchEntryError,
    NoSuchLedgerError,
    StorageFaultError,
)
from storage_stub.bookie.counters import OpCounter, OpCounters
from storage_stub.bookie.disk import DiskBookie
from storage_stub.bookie.disk_monitor import DiskUsageMonitor
from storage_stub.bookie.faults import FaultInjector
from storage_stub.bookie.grouped_writes import GroupedSyncWriter
from storage_stub.bookie.instrumented import InstrumentedBookie, InstrumentedMetadataStore
from storage_stub.bookie.last_entry_cache import LastEntryCache, LastEntryCachingBookie
from storage_stub.bookie.latency import LatencyModel
from storage_stub.bookie.memory import InMemoryBookie, InMemoryMetadataStore
from storage_stub.bookie.metadata_store import RocksMetadataStore
from storage_stub.bookie.storage import Storage, open_storage
from storage_stub.latency_spec import parse_latency_spec

__all__ = [
    "OPERATIONS",
    "Bookie",
    "BookieError",
    "BookieReadOnlyError",
    "DiskBookie",
    "DiskUsageMonitor",
    "FaultInjector",
    "GroupedSyncWriter",
    "InMemoryBookie",
    "InMemoryMetadataStore",
    "InstrumentedBookie",
    "InstrumentedMetadataStore",
    "LastEntryCache",
    "LastEntryCachingBookie",
    "LatencyModel",
    "LedgerClosedError",
    "LedgerMetadata",
    "MetadataStore",
    "NoSpaceError",
    "NoSuchEntryError",
    "NoSuchLedgerError",
    "OpCounter",
    "OpCounters",
    "RocksMetadataStore",
    "Storage",
    "StorageFaultError",
    "open_storage",
    "parse_latency_spec",
]
