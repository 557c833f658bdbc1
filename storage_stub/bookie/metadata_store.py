"""MetadataStore on RocksDB: managed-ledger and cursor records, keyed by string.

Shares the metadata database with LedgerMetadataIndex; its records are
``b"M" + utf-8 key``. UTF-8 byte order is code-point order, so listings come out sorted
as Python sorts strings.

A RocksDB failure raises StorageFaultError naming the operation with RocksDB's message
(NoSpaceError for a full disk, BookieReadOnlyError while the database is open
read-only), and a failed write is reported to the database's ``on_write_failure`` (the
bookie, which turns read-only and checks the disk). The store keeps writing while the
bookie is read-only: its records are small, and the broker needs them to acknowledge
messages and to delete ledgers.

Synced writes (syncMode always/batch) go through a GroupedSyncWriter, shared with the
bookie's ledger metadata (one database, one writer): concurrent writes share one fsync.
"""

from __future__ import annotations

from rocksdict import Rdict

from storage_stub.bookie.api import StorageFaultError
from storage_stub.bookie.grouped_writes import GroupedSyncWriter
from storage_stub.bookie.rocks import RocksDatabase, write_options

RECORD_PREFIX = b"M"
_NO_SYNC = write_options(sync=False)


class RocksMetadataStore:
    """``get``: one point lookup on the loop. ``put``/``delete``: one write; synced writes
    (syncMode always/batch) are grouped with the other synced writes of the database in
    flight (one fsync per group, see GroupedSyncWriter) and land in call order.
    ``keys_with_prefix``: one seek + O(k) iteration."""

    __slots__ = ("_closed", "_owns_writer", "_rocks", "_writer")

    def __init__(
        self, db: RocksDatabase | Rdict, *, sync: bool, writer: GroupedSyncWriter | None = None
    ) -> None:
        """Use the shared metadata database ``db`` (not owned: the caller closes it).
        ``sync``: synced writes, through ``writer`` (the database's, not owned), or a
        writer of the store's own when none is given."""
        if writer is not None:
            self._rocks = writer.rocks
        else:
            self._rocks = (
                db if isinstance(db, RocksDatabase) else RocksDatabase.wrapping(db, name="metadata")
            )
        self._owns_writer = sync and writer is None
        self._writer = (writer or GroupedSyncWriter(self._rocks, name="metadata")) if sync else None
        self._closed = False

    def _check_open(self, op: str) -> None:
        if self._closed:
            raise StorageFaultError(op, "metadata store is closed")

    def _write_failed(self, op: str, what: str, error: Exception) -> Exception:
        fault = self._rocks.write_fault(op, what, error)
        if isinstance(fault, StorageFaultError):
            self._rocks.report(fault)
        return fault

    async def get(self, key: str) -> bytes | None:
        self._check_open("metadataGet")
        try:
            value: bytes | None = self._rocks.db.get(RECORD_PREFIX + key.encode())
        except Exception as error:
            raise self._rocks.fault("metadataGet", "metadata read", error) from None
        return value

    async def put(self, key: str, value: bytes) -> None:
        self._check_open("metadataPut")
        record_key = RECORD_PREFIX + key.encode()
        try:
            if self._writer is not None:
                await self._writer.put("metadataPut", record_key, bytes(value))
            else:
                self._rocks.db.put(record_key, bytes(value), _NO_SYNC)
        except Exception as error:
            raise self._write_failed("metadataPut", "metadata write", error) from None

    async def delete(self, key: str) -> None:
        self._check_open("metadataDelete")
        record_key = RECORD_PREFIX + key.encode()
        try:
            if self._writer is not None:
                await self._writer.delete("metadataDelete", record_key)
            else:
                self._rocks.db.delete(record_key, _NO_SYNC)
        except Exception as error:
            raise self._write_failed("metadataDelete", "metadata delete", error) from None

    async def keys_with_prefix(self, prefix: str) -> list[str]:
        self._check_open("metadataGet")
        try:
            return self._keys_with_prefix(RECORD_PREFIX + prefix.encode())
        except Exception as error:
            raise self._rocks.fault("metadataGet", "metadata listing", error) from None

    def _keys_with_prefix(self, start: bytes) -> list[str]:
        keys: list[str] = []
        iterator = self._rocks.db.iter()
        iterator.seek(start)
        while iterator.valid():
            key = iterator.key()
            if not key.startswith(start):
                break
            keys.append(key[1:].decode())
            iterator.next()
        return keys

    async def close(self) -> None:
        """Wait for this store's writes in flight (with the writer's others), then stop
        the writer if it is the store's own. Never raises for a failed write: the
        writes' callers were told."""
        if self._closed:
            return
        self._closed = True
        writer = self._writer
        if writer is not None:
            if self._owns_writer:
                await writer.close()
            else:
                await writer.drain()
