"""Typed configuration of the storage stub (``conf/storage.conf``): each key defined once
(:func:`storage_stub.confkeys.key`), and the file written from the definitions."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, field_validator, model_validator

from storage_stub.confkeys import Section, key
from storage_stub.latency_spec import parse_latency_spec

#: The top of conf/storage.conf.
CONF_HEADER = """
brokerlab storage stub configuration (the stub bookie under the broker).

Format: as conf/broker.conf. One key=value per line; lines starting with # are comments;
there are no trailing comments. An empty value (key=) means "use the default". An
unknown key, a repeated key or a bad value stops start-up with a message naming the key,
this file and the line.

Keys are BookKeeper's bookie (bk_server.conf) names where BookKeeper has the setting;
"brokerlab only" marks the others.
"""

STORAGE = Section("Storage")
BOOKIE_CACHES = Section("Bookie caches")
DISK_USAGE = Section(
    "Disk usage (disk mode)",
    intro="""
    The bookie checks the file system of its data directory every diskCheckInterval (as
    BookKeeper's LedgerDirsMonitor), and at once after a write that found no space
    (ENOSPC). Usage is 1 - available / total, as df's Use% and BookKeeper's DiskChecker
    count it (blocks reserved for root are used). A full disk makes the bookie read-only
    (BookieReadOnlyError, HTTP 503): new ledgers and adds are refused; reads, ledger
    closes and deletes go on; the metadata store keeps writing while its database can.
    Once usage falls below diskUsageLwmThreshold the same bookie turns writable again by
    itself (a RocksDB database that failed a write for want of space is reopened first,
    as RocksDB refuses every write after one).

    Entry-log preallocation stops above diskUsageWarnThreshold and below it takes at most
    half of the space left below diskUsageThreshold, so reserving space never fills a
    disk.
    """,
)
LATENCY = Section(
    "Latency models",
    intro="""
    Each storage operation is delayed by a time drawn from its model, on top of what the
    stub's own I/O costs. Models, all in milliseconds:

      0                             no added delay
      fixed:<ms>                    always <ms>
      uniform:<min_ms>:<max_ms>     uniform between the two
      lognormal:<median_ms>:<sigma> log-normal with that median

    A log-normal model's p99 is median x e^(2.33 sigma). The defaults add nothing, so tests
    and benchmarks measure brokerlab itself. The commented-out profile at the end of
    this section approximates a real cluster.
    """,
    example="""
    Realistic profile: one datacenter, bookies with SSD journals, ZooKeeper metadata.
    Ballpark figures, not measurements; to use them, uncomment these lines and delete the
    four latency keys above (a key may appear only once). They include the bookie's own
    fsync, so pair them with storageMode=memory or syncMode=none to avoid counting fsync
    twice.

    Add: network round trip (~0.2-0.5 ms) + journal group commit (up to
    journalMaxGroupWaitMSec) + SSD fsync (~0.1-1 ms), and a write waits for the slower of
    its two ack-quorum bookies: median 2 ms, p99 ~6 ms, in line with the few-ms median and
    sub-10 ms p99 publish latencies OpenMessaging Benchmark runs report for Pulsar.
    addEntryLatency=lognormal:2:0.5

    Read: RocksDB index lookup + entry log read (page cache or an SSD random read,
    ~0.1 ms) + round trip: median 1 ms; the wider tail (p99 ~4 ms) is page-cache misses.
    readEntryLatency=lognormal:1:0.6

    Last entry: answered from the bookie's memory, so about one round trip.
    getLastEntryLatency=fixed:0.2

    Metadata: a ZooKeeper write is forwarded to the leader and fsynced by a quorum
    (median ~1 ms, p99 ~3 ms); reads are cheaper, but one model covers both.
    metadataLatency=lognormal:1:0.5
    """,
)
TIERED = Section(
    "Tiered store (stub S3)",
    intro="""
    Closed ledgers offloaded into stream set objects (SSOs: ranges of many topics in one
    object, an index block at the end) and compacted into stream objects (SOs: one
    topic's range), as AutoMQ stores streams on S3.
    """,
    example="""
    Realistic S3 profile (ballpark, not measurements): a GET's first byte arrives after
    ~10-30 ms within a region with a long tail; a PUT of a few MiB takes ~50-100 ms. To
    use them, uncomment and delete objectGetLatency=0 and objectPutLatency=0 above.
    objectGetLatency=lognormal:20:0.6
    objectPutLatency=lognormal:60:0.5
    """,
)

#: The unit of every latency key.
LATENCY_MODEL = "latency model (ms)"


class StorageConfig(BaseModel):
    """Every key of conf/storage.conf. Field names are the file's keys (BookKeeper's
    names where BookKeeper has the setting)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    storageMode: Literal["disk", "memory"] = key(
        "disk",
        STORAGE,
        "Where ledgers live. disk: entry log files plus a RocksDB location index under the "
        'data directory, surviving restarts (the default for "brokerlab serve"); memory: '
        "nothing on disk, everything lost at exit (unit tests, quick experiments).",
        origin="brokerlab only.",
    )
    syncMode: Literal["always", "batch", "none"] = key(
        "batch",
        STORAGE,
        "When an add is acknowledged. always: fsync after every add, then acknowledge; "
        "batch: group commit, each add acknowledged after the fsync of its group; none: "
        "never fsync (fast, and a crash loses recent entries).",
        origin="brokerlab only. BookKeeper's default behaviour is batch: journalSyncData=true "
        "with group commit; none corresponds to journalSyncData=false.",
    )
    journalMaxGroupWaitMSec: float = key(
        2.0,
        STORAGE,
        "batch mode: longest an add waits for more adds to join its group before the fsync.",
        unit="milliseconds (fractions allowed)",
        origin="BookKeeper: same key and default (Pulsar's shipped bookkeeper.conf sets 1).",
        ge=0,
    )
    journalBufferedWritesThreshold: int = key(
        524288,
        STORAGE,
        "batch mode: fsync the group early once this many bytes are waiting.",
        unit="bytes (512 KiB)",
        origin="BookKeeper: same key and default.",
        gt=0,
    )
    logSizeLimit: int = key(
        1073741824,
        STORAGE,
        "disk mode: start a new entry log file once the current one reaches this size.",
        unit="bytes (1 GiB)",
        origin="BookKeeper: same key and default (1 GiB is also BookKeeper's maximum).",
        gt=0,
    )
    dbStorage_directIOEntryLogger: bool = key(
        True,
        STORAGE,
        "disk mode: write the entry logs with O_DIRECT, bypassing the OS page cache. Adds "
        "of every sync mode then go to the entry log writer, a compiled thread that takes "
        "no GIL, which copies each group of adds into one buffer and writes it with one "
        "block-aligned write (the partly filled last block is written again with the next "
        "group) while the event loop goes on. On the machine brokerlab was tuned on, "
        "writing 100 KiB through the page cache cost 25 us of CPU with little dirty memory "
        "and 200-250 us once writeback ran; an O_DIRECT write of it cost about 30 us, in "
        "the writer. false: writes go through the page cache, on the loop itself when "
        "syncMode=none. File systems without O_DIRECT fall back to false. Reads still go "
        "through the page cache.",
        origin="BookKeeper: same key (DbLedgerStorage's direct I/O entry logger); its "
        "default is false.",
    )

    dbStorage_lastEntryCacheMaxSize: int = key(
        100000,
        BOOKIE_CACHES,
        "The bookie's last-entry cache: ledger id -> last entry id, in front of the "
        "location index floor seek of getLastEntryInLedger (what a broker asks when it "
        "loads a topic). Filled by writes, closes and seeks; updates never make a ledger's "
        "answer go back; a deleted ledger is never answered from it; when full, the least "
        "recently used ledger goes (never the whole cache). About 16 bytes per ledger plus "
        "overhead.",
        unit="ledgers; <= 0 disables the cache",
        origin="BookKeeper: same key and default (PR 4732, not merged upstream as of 2026-08).",
    )
    dbStorage_readAheadCacheMaxSizeMb: int = key(
        0,
        BOOKIE_CACHES,
        "The bookie's read cache: a ring of segments (max(2, size / 1 GiB)) holding entries "
        "read from the entry log, filled on a read miss together with the next entries of "
        "the same ledger (read-ahead). Off by default, so the broker cache's effect is seen "
        "alone; turn it on to see how the two caches interact.",
        unit="MiB; 0 turns the read cache off",
        origin="BookKeeper: same key; its default is 25% of direct memory.",
        ge=0,
    )
    dbStorage_readAheadCacheBatchSize: int = key(
        100,
        BOOKIE_CACHES,
        "Entries of the same ledger read ahead into the read cache after a read miss.",
        unit="entries",
        origin="BookKeeper: same key and default.",
        ge=0,
    )

    diskUsageThreshold: float = key(
        0.95,
        DISK_USAGE,
        "Usage at which the bookie turns read-only. 1 means only a completely full disk.",
        unit="fraction of the file system",
        origin="BookKeeper: same key and default (BookKeeper requires < 1).",
        gt=0,
        le=1,
    )
    diskUsageWarnThreshold: float = key(
        0.90,
        DISK_USAGE,
        "Usage past which each disk check logs a warning (once per crossing). Must not "
        "exceed diskUsageThreshold.",
        unit="fraction of the file system",
        origin="BookKeeper: same key and default.",
        gt=0,
        le=1,
    )
    diskUsageLwmThreshold: float = key(
        0.95,
        DISK_USAGE,
        "Low-water mark: a read-only bookie turns writable again once usage falls below "
        "it. Set it under diskUsageThreshold for hysteresis, so a disk hovering at the "
        "threshold does not flip the bookie between read-only and writable. Must not "
        "exceed diskUsageThreshold.",
        unit="fraction of the file system",
        origin="BookKeeper: same key; its default is the value of diskUsageThreshold (so "
        "no hysteresis).",
        gt=0,
        le=1,
    )
    diskCheckInterval: int = key(
        10000,
        DISK_USAGE,
        "Time between two disk usage checks. A read-only bookie turns writable at the first "
        "check after space returns.",
        unit="milliseconds",
        origin="BookKeeper: same key and default.",
        gt=0,
    )
    readOnlyModeEnabled: bool = key(
        True,
        DISK_USAGE,
        "What a full disk does. true: the bookie turns read-only and writable again by "
        "itself. false: BookKeeper shuts the bookie down; here adds and new ledgers fail "
        "with a storage fault (StorageFaultError) until the broker is restarted (reads go "
        "on), and a disk full at start-up stops start-up.",
        origin="BookKeeper: same key and default.",
    )

    addEntryLatency: str = key(
        "0",
        LATENCY,
        "Delay of each add (append of entries to a ledger).",
        unit=LATENCY_MODEL,
        origin="brokerlab only.",
    )
    readEntryLatency: str = key(
        "0",
        LATENCY,
        "Delay of each read of a range of entries from a ledger (cache misses in the broker).",
        unit=LATENCY_MODEL,
        origin="brokerlab only.",
    )
    getLastEntryLatency: str = key(
        "0",
        LATENCY,
        "Delay of each lookup of a ledger's last entry (BookKeeper's getLastEntryInLedger).",
        unit=LATENCY_MODEL,
        origin="brokerlab only.",
    )
    metadataLatency: str = key(
        "0",
        LATENCY,
        "Delay of each metadata-store operation (ledger lists and cursor positions; Pulsar "
        "keeps them in ZooKeeper or another metadata store).",
        unit=LATENCY_MODEL,
        origin="brokerlab only.",
    )

    objectGetLatency: str = key(
        "0",
        TIERED,
        "Delay of each object get (whole object or a byte range: index blocks, data blocks).",
        unit=LATENCY_MODEL,
        origin="brokerlab only.",
    )
    objectPutLatency: str = key(
        "0",
        TIERED,
        "Delay of each object put and each object delete (uploads and compaction).",
        unit=LATENCY_MODEL,
        origin="brokerlab only.",
    )
    s3StreamSetObjectRangeIndexEnabled: bool = key(
        True,
        TIERED,
        "How a read finds the SSOs holding its stream. true: a lazily filled range index "
        "(stream -> start offset -> object, learned from every index block loaded), a bloom "
        "filter of stream ids per loaded object, SSOs loaded in small batches and preloaded "
        "from the end for tail reads. false: every read loads the index block of every SSO "
        "(the old behaviour), to compare the two.",
        origin="AutoMQ: PR 2710 (issue 2731), switched on by the environment variable "
        "AUTOMQ_STREAM_SET_RANGE_INDEX_ENABLED; not merged upstream as of 2026-08.",
    )
    s3StreamSetObjectRangeIndexMaxStreams: int = key(
        200000,
        TIERED,
        "Streams the range index holds at most; beyond, the least recently used stream goes.",
        unit="streams (topics)",
        origin="AutoMQ: StreamSetObjectRangeIndex maximum size 20 * 10000 (PR 2710).",
        ge=1,
    )
    s3StreamSetObjectRangeIndexTtlMs: int = key(
        600000,
        TIERED,
        "A stream neither searched nor updated for this long leaves the range index.",
        unit="milliseconds (10 minutes)",
        origin="AutoMQ: StreamSetObjectRangeIndex expiry of 10 minutes (PR 2710).",
        ge=1,
    )
    s3StreamIdBloomFilterMaxBytes: int = key(
        20971520,
        TIERED,
        "Cap on the bytes of all per-SSO stream id bloom filters together; beyond it the "
        "least recently used filter goes. About 1.2 bytes per stream of an SSO at a 1% "
        "rate.",
        unit="bytes (20 MiB); 0 keeps no filters",
        origin="AutoMQ: StreamIdBloomFilter maximum of 20 MiB (PR 2710).",
        ge=0,
    )
    s3StreamIdBloomFilterFalsePositiveRate: float = key(
        0.01,
        TIERED,
        "False-positive rate each bloom filter is sized for (lower: larger filters).",
        unit="probability",
        origin="AutoMQ: StreamIdBloomFilter fpp 0.01 (PR 2710).",
        gt=0,
        lt=1,
    )
    s3StreamSetObjectMaxNum: int = key(
        500,
        TIERED,
        "Compaction merges the oldest SSOs into one so that at most this many SSOs remain "
        "(seed 004: compaction by object count bounds the number of SSOs).",
        unit="objects",
        origin="brokerlab only. AutoMQ's s3.stream.set.object.compaction.max.num (also 500) "
        "is a different bound: the most SSOs one compaction merges.",
        ge=1,
    )
    s3StreamSetObjectCompactionStreamSplitSize: int = key(
        8388608,
        TIERED,
        "Compaction moves a stream holding at least this many bytes of the SSOs it merges "
        "into a stream object of its own.",
        unit="bytes (8 MiB)",
        origin="AutoMQ: s3.stream.set.object.compaction.stream.split.size, same default.",
        ge=1,
    )

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
