"""Typed configuration of the storage stub (``conf/storage.conf``)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from storage_stub.latency_spec import parse_latency_spec


class StorageConfig(BaseModel):
    """Every key of conf/storage.conf. Field names are the file's keys (BookKeeper's
    names where BookKeeper has the setting)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    #: disk: entry logs + RocksDB under the data dir (default for ``serve``); memory: tests.
    storageMode: Literal["disk", "memory"] = "disk"
    #: always: fsync before ack; batch: group commit, ack after the group's fsync; none.
    syncMode: Literal["always", "batch", "none"] = "batch"
    #: batch mode: longest wait to gather a group before its fsync (BookKeeper's name).
    journalMaxGroupWaitMSec: float = Field(default=2.0, ge=0)
    #: batch mode: flush the group early once this many bytes are pending.
    journalBufferedWritesThreshold: int = Field(default=524288, gt=0)
    #: roll to a new entry log file past this size (bytes).
    logSizeLimit: int = Field(default=1073741824, gt=0)
    #: write entry logs with O_DIRECT from the writer thread, in groups (BookKeeper's
    #: key; its default is false); falls back to the page cache where refused.
    dbStorage_directIOEntryLogger: bool = True
    #: latency model per operation: "0", "fixed:<ms>", "uniform:<min_ms>:<max_ms>",
    #: "lognormal:<median_ms>:<sigma>".
    addEntryLatency: str = "0"
    readEntryLatency: str = "0"
    getLastEntryLatency: str = "0"
    metadataLatency: str = "0"
    #: ledgers whose last entry id the bookie caches in front of the index floor seek;
    #: <= 0 disables the cache (BookKeeper PR 4732's key and default).
    dbStorage_lastEntryCacheMaxSize: int = 100000
    #: the bookie's read cache (a segmented ring filled by reads and read-ahead), MiB;
    #: 0 turns it off (brokerlab's default; BookKeeper sizes it from direct memory).
    dbStorage_readAheadCacheMaxSizeMb: int = Field(default=0, ge=0)
    #: entries of the same ledger read ahead after a read miss (BookKeeper's default).
    dbStorage_readAheadCacheBatchSize: int = Field(default=100, ge=0)

    # --- disk usage (BookKeeper's LedgerDirsMonitor; disk mode only) ---
    #: usage of the data directory's file system (1 - available / total, as BookKeeper's
    #: DiskChecker) at which the bookie turns read-only: new ledgers and adds are refused,
    #: reads, closes and deletes go on (BookKeeper's key and default).
    diskUsageThreshold: float = Field(default=0.95, gt=0, le=1)
    #: usage past which each check logs a warning (BookKeeper's key and default).
    diskUsageWarnThreshold: float = Field(default=0.90, gt=0, le=1)
    #: a read-only bookie turns writable again once usage falls below this low-water mark
    #: (BookKeeper's key; its default is diskUsageThreshold, so no hysteresis).
    diskUsageLwmThreshold: float = Field(default=0.95, gt=0, le=1)
    #: milliseconds between disk usage checks; a write that finds no space triggers one at
    #: once (BookKeeper's key and default).
    diskCheckInterval: int = Field(default=10000, gt=0)
    #: true: a full disk makes the bookie read-only, and writable again by itself once
    #: space returns. false: BookKeeper shuts the bookie down instead; here adds and new
    #: ledgers fail (StorageFaultError) until a restart. BookKeeper's key and default.
    readOnlyModeEnabled: bool = True

    # --- tiered store (AutoMQ-style stream set objects on a stub S3) ---
    #: latency model of object gets (whole and ranged) and of object puts and deletes.
    objectGetLatency: str = "0"
    objectPutLatency: str = "0"
    #: locate SSOs through the lazy range index and per-object bloom filters (AutoMQ PR
    #: 2710); false: every read loads the index block of every SSO (the old behaviour).
    s3StreamSetObjectRangeIndexEnabled: bool = True
    #: streams the range index holds at most (least recently touched dropped first).
    s3StreamSetObjectRangeIndexMaxStreams: int = Field(default=200000, ge=1)
    #: a stream untouched this long leaves the range index (ms).
    s3StreamSetObjectRangeIndexTtlMs: int = Field(default=600000, ge=1)
    #: all per-object stream id bloom filters together, bytes (LRU beyond); 0: none.
    s3StreamIdBloomFilterMaxBytes: int = Field(default=20971520, ge=0)
    #: false-positive rate each bloom filter is sized for.
    s3StreamIdBloomFilterFalsePositiveRate: float = Field(default=0.01, gt=0, lt=1)
    #: compaction merges the oldest SSOs so that at most this many remain (brokerlab's
    #: bound; AutoMQ's compaction.max.num bounds the SSOs merged at once instead).
    s3StreamSetObjectMaxNum: int = Field(default=500, ge=1)
    #: compaction moves a stream holding at least this many bytes of the merged SSOs
    #: into its own stream object (bytes).
    s3StreamSetObjectCompactionStreamSplitSize: int = Field(default=8388608, ge=1)

    @field_validator(
        "addEntryLatency",
        "readEntryLatency",
        "getLastEntryLatency",
        "metadataLatency",
        "objectGetLatency",
        "objectPutLatency",
    )
    @classmethod
    def _check_latency_spec(cls, spec: str) -> str:
        parse_latency_spec(spec)
        return spec

    @model_validator(mode="after")
    def _check_disk_thresholds(self) -> StorageConfig:
        # As BookKeeper's DiskChecker and LedgerDirsMonitor validate them.
        if self.diskUsageWarnThreshold > self.diskUsageThreshold:
            raise ValueError(
                f"diskUsageWarnThreshold ({self.diskUsageWarnThreshold}) must not exceed "
                f"diskUsageThreshold ({self.diskUsageThreshold})"
            )
        if self.diskUsageLwmThreshold > self.diskUsageThreshold:
            raise ValueError(
                f"diskUsageLwmThreshold ({self.diskUsageLwmThreshold}) must not exceed "
                f"diskUsageThreshold ({self.diskUsageThreshold})"
            )
        return self
