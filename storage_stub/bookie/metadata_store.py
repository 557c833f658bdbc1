"""MetadataStore on RocksDB: managed-ledger and cursor records, keyed by string.

Shares the metadata database with LedgerMetadataIndex; its records are
``b"M" + utf-8 key``. UTF-8 byte order is code-point order, so listings come out sorted
as Python sorts strings.
"""

from __future__ import annotations

import asyncio
import functools
from concurrent.futures import ThreadPoolExecutor

from rocksdict import Rdict

from storage_stub.bookie.api import StorageFaultError
from storage_stub.bookie.rocks import write_options

RECORD_PREFIX = b"M"
_SYNC = write_options(sync=True)
_NO_SYNC = write_options(sync=False)


class RocksMetadataStore:
    """``get``: one point lookup on the loop. ``put``/``delete``: one write; synced writes
    (syncMode always/batch) run on the store's own writer thread, one at a time, so
    writes land in call order. ``keys_with_prefix``: one seek + O(k) iteration."""

    __slots__ = ("_closed", "_db", "_executor", "_sync")

    def __init__(self, db: Rdict, *, sync: bool) -> None:
        """Use the shared metadata database ``db`` (not owned: the caller closes it)."""
        self._db = db
        self._sync = sync
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="metadata-sync")
        self._closed = False

    def _check_open(self, op: str) -> None:
        if self._closed:
            raise StorageFaultError(op, "metadata store is closed")

    async def get(self, key: str) -> bytes | None:
        self._check_open("metadataGet")
        value: bytes | None = self._db.get(RECORD_PREFIX + key.encode())
        return value

    async def put(self, key: str, value: bytes) -> None:
        self._check_open("metadataPut")
        record_key = RECORD_PREFIX + key.encode()
        if self._sync:
            write = functools.partial(self._db.put, record_key, bytes(value), _SYNC)
            await asyncio.get_running_loop().run_in_executor(self._executor, write)
        else:
            self._db.put(record_key, bytes(value), _NO_SYNC)

    async def delete(self, key: str) -> None:
        self._check_open("metadataDelete")
        record_key = RECORD_PREFIX + key.encode()
        if self._sync:
            delete = functools.partial(self._db.delete, record_key, _SYNC)
            await asyncio.get_running_loop().run_in_executor(self._executor, delete)
        else:
            self._db.delete(record_key, _NO_SYNC)

    async def keys_with_prefix(self, prefix: str) -> list[str]:
        self._check_open("metadataGet")
        start = RECORD_PREFIX + prefix.encode()
        keys: list[str] = []
        iterator = self._db.iter()
        iterator.seek(start)
        while iterator.valid():
            key = iterator.key()
            if not key.startswith(start):
                break
            keys.append(key[1:].decode())
            iterator.next()
        return keys

    async def close(self) -> None:
        """Wait for writes in flight, then stop the writer thread."""
        if self._closed:
            return
        self._closed = True
        if self._sync:
            await asyncio.get_running_loop().run_in_executor(self._executor, _barrier)
        self._executor.shutdown(wait=True)


def _barrier() -> None:
    """Runs after every write queued before it (the writer thread is FIFO)."""
