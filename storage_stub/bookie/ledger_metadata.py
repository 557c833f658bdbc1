"""Ledger metadata index: ledger id -> LedgerMetadata, and the next ledger id.

Lives in the metadata RocksDB (``<data>/metadata``), which it shares with the
RocksMetadataStore; each owner keeps to its own first key byte:

- ``b"L" + ledger id (u64 big-endian)`` -> closed u8, last entry id i64, length u64,
  created ms i64. For an open ledger the stored last entry id and length are those at
  creation: the location index is the truth of what was added since.
- ``b"N"`` -> next ledger id u64, written in the same batch as every created ledger, so
  ids never repeat across restarts (ids of failed creations are skipped, not reused).

Writes block (and fsync the WAL when ``sync``); the ``stage_*`` methods add a write's
records to a WriteBatch instead, for the bookie's synced writes, which go through the
database's GroupedSyncWriter (one fsync for every write in flight together).
A RocksDB failure raises StorageFaultError naming the bookie operation (NoSpaceError for
a full disk, BookieReadOnlyError while the database is open read-only); a failed write
leaves the database failed until it is reopened (see rocks.RocksDatabase).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import TypeVar

from rocksdict import Rdict, WriteBatch

from storage_stub.bookie.api import LedgerMetadata
from storage_stub.bookie.rocks import RocksDatabase, write_options

LEDGER_PREFIX = b"L"
NEXT_LEDGER_ID_KEY = b"N"
_ID = struct.Struct(">Q")
_RECORD = struct.Struct(">?qQq")
_SYNC = write_options(sync=True)
_NO_SYNC = write_options(sync=False)
T = TypeVar("T")


def _key(ledger_id: int) -> bytes:
    return LEDGER_PREFIX + _ID.pack(ledger_id)


class LedgerMetadataIndex:
    """Persistence of ledger metadata; the bookie keeps the live copies in memory.

    ``allocate_ledger_id``: O(1), in memory. ``create``/``put``/``delete``: one RocksDB
    write each; ``stage_*``: O(1), staging into a WriteBatch. ``load_all``: one scan, O(ledgers).
    """

    __slots__ = ("_next_ledger_id", "_rocks")

    def __init__(self, db: RocksDatabase | Rdict) -> None:
        """Use the shared metadata database ``db`` (not owned: the caller closes it)."""
        self._rocks = (
            db if isinstance(db, RocksDatabase) else RocksDatabase.wrapping(db, name="metadata")
        )
        try:
            stored = self._rocks.db.get(NEXT_LEDGER_ID_KEY)
        except Exception as error:
            raise self._rocks.fault("open", "reading the next ledger id", error) from None
        self._next_ledger_id = 0 if stored is None else _ID.unpack(stored)[0]

    @property
    def database(self) -> RocksDatabase:
        return self._rocks

    @property
    def next_ledger_id(self) -> int:
        return self._next_ledger_id

    def allocate_ledger_id(self) -> int:
        """Reserve the next id in memory; ``create`` makes the reservation durable."""
        ledger_id = self._next_ledger_id
        self._next_ledger_id += 1
        return ledger_id

    @staticmethod
    def encode(metadata: LedgerMetadata) -> bytes:
        return _RECORD.pack(
            metadata.closed, metadata.last_entry_id, metadata.length, metadata.created_ms
        )

    @staticmethod
    def decode(ledger_id: int, value: bytes) -> LedgerMetadata:
        closed, last_entry_id, length, created_ms = _RECORD.unpack(value)
        return LedgerMetadata(
            ledger_id=ledger_id,
            closed=closed,
            last_entry_id=last_entry_id,
            length=length,
            created_ms=created_ms,
        )

    @staticmethod
    def stage_create(batch: WriteBatch, metadata: LedgerMetadata) -> None:
        """Add a new ledger and the next id past it (they land together) to ``batch``."""
        batch.put(_key(metadata.ledger_id), LedgerMetadataIndex.encode(metadata))
        batch.put(NEXT_LEDGER_ID_KEY, _ID.pack(metadata.ledger_id + 1))

    @staticmethod
    def stage_put(batch: WriteBatch, metadata: LedgerMetadata) -> None:
        batch.put(_key(metadata.ledger_id), LedgerMetadataIndex.encode(metadata))

    @staticmethod
    def stage_delete(batch: WriteBatch, ledger_id: int) -> None:
        batch.delete(_key(ledger_id))

    def write(
        self,
        operation: str,
        stage: Callable[[WriteBatch, T], None],
        argument: T,
        *,
        sync: bool,
    ) -> None:
        """Write the records ``stage(batch, argument)`` adds, atomically, now."""
        batch = WriteBatch(raw_mode=True)
        stage(batch, argument)
        rocks = self._rocks
        try:
            rocks.db.write(batch, _SYNC if sync else _NO_SYNC)
        except Exception as error:
            raise rocks.write_fault(operation, "ledger metadata write", error) from None

    def create(self, metadata: LedgerMetadata, *, sync: bool) -> None:
        """Store a new ledger and advance the stored next id past it, atomically."""
        self.write("createLedger", self.stage_create, metadata, sync=sync)

    def put(self, metadata: LedgerMetadata, *, sync: bool) -> None:
        self.write("closeLedger", self.stage_put, metadata, sync=sync)

    def get(self, ledger_id: int) -> LedgerMetadata | None:
        try:
            value = self._rocks.db.get(_key(ledger_id))
        except Exception as error:
            raise self._rocks.fault("getLastEntry", "ledger metadata read", error) from None
        return None if value is None else self.decode(ledger_id, value)

    def delete(self, ledger_id: int, *, sync: bool) -> None:
        self.write("deleteLedger", self.stage_delete, ledger_id, sync=sync)

    def load_all(self) -> dict[int, LedgerMetadata]:
        """Every stored ledger, by id."""
        try:
            return self._load_all()
        except Exception as error:
            raise self._rocks.fault("open", "loading ledger metadata", error) from None

    def _load_all(self) -> dict[int, LedgerMetadata]:
        ledgers: dict[int, LedgerMetadata] = {}
        iterator = self._rocks.db.iter()
        iterator.seek(LEDGER_PREFIX)
        while iterator.valid():
            key = iterator.key()
            if not key.startswith(LEDGER_PREFIX):
                break
            (ledger_id,) = _ID.unpack_from(key, 1)
            ledgers[ledger_id] = self.decode(ledger_id, iterator.value())
            iterator.next()
        return ledgers
