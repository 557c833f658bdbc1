"""In-memory bookie and metadata store for unit tests: the disk semantics, no files.

Nothing here suspends, so every call is atomic with respect to the event loop.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import replace

from sortedcontainers import SortedDict

from storage_stub.bookie.api import (
    LedgerClosedError,
    LedgerMetadata,
    NoSuchEntryError,
    NoSuchLedgerError,
    StorageFaultError,
    total_size,
)
from storage_stub.bookie.counters import OpCounters


class _MemoryLedger:
    __slots__ = ("entries", "metadata")

    def __init__(self, metadata: LedgerMetadata) -> None:
        self.metadata = metadata
        self.entries: list[bytes] = []


class InMemoryBookie:
    """Ledgers as Python lists. Ids increase from 0 and are never reused (until the
    process exits: nothing survives it)."""

    __slots__ = ("_closed", "_counters", "_ledgers", "_next_ledger_id")

    def __init__(self, counters: OpCounters | None = None) -> None:
        self._counters = counters if counters is not None else OpCounters()
        self._ledgers: dict[int, _MemoryLedger] = {}
        self._next_ledger_id = 0
        self._closed = False

    def _ledger(self, ledger_id: int, op: str) -> _MemoryLedger:
        if self._closed:
            raise StorageFaultError(op, "bookie is closed")
        ledger = self._ledgers.get(ledger_id)
        if ledger is None:
            raise NoSuchLedgerError(ledger_id)
        return ledger

    async def create_ledger(self) -> int:
        """O(1)."""
        if self._closed:
            raise StorageFaultError("createLedger", "bookie is closed")
        ledger_id = self._next_ledger_id
        self._next_ledger_id += 1
        metadata = LedgerMetadata(
            ledger_id=ledger_id,
            closed=False,
            last_entry_id=-1,
            length=0,
            created_ms=int(time.time() * 1000),
        )
        self._ledgers[ledger_id] = _MemoryLedger(metadata)
        return ledger_id

    async def add_entries(self, ledger_id: int, entries: Sequence[bytes]) -> int:
        return await asyncio.shield(self.start_add(ledger_id, entries))

    def start_add(self, ledger_id: int, entries: Sequence[bytes]) -> asyncio.Future[int]:
        """Stored at once (the future is done): O(len(entries)); the payloads are stored
        by reference."""
        ledger = self._ledger(ledger_id, "addEntries")
        if ledger.metadata.closed:
            raise LedgerClosedError(ledger_id)
        if not entries:
            raise ValueError("add_entries needs at least one entry")
        ledger.entries.extend(entries)
        metadata = ledger.metadata
        metadata.last_entry_id = len(ledger.entries) - 1
        metadata.length += total_size(entries)
        done: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        done.set_result(metadata.last_entry_id)
        return done

    async def read_entries(self, ledger_id: int, first: int, last: int) -> list[bytes]:
        """O(last - first + 1), one list slice."""
        ledger = self._ledger(ledger_id, "readEntries")
        if last < first:
            return []
        if first < 0:
            raise NoSuchEntryError(ledger_id, first)
        if last >= len(ledger.entries):
            raise NoSuchEntryError(ledger_id, max(first, len(ledger.entries)))
        return ledger.entries[first : last + 1]

    async def last_add_confirmed(self, ledger_id: int) -> int:
        """O(1)."""
        return self._ledger(ledger_id, "getLastEntry").metadata.last_entry_id

    async def get_last_entry_in_ledger(self, ledger_id: int) -> int:
        """O(1): the list's last index stands in for the index floor seek."""
        ledger = self._ledger(ledger_id, "getLastEntry")
        self._counters.getFloor.calls += 1
        return len(ledger.entries) - 1

    async def close_ledger(self, ledger_id: int) -> int:
        """O(1)."""
        metadata = self._ledger(ledger_id, "closeLedger").metadata
        metadata.closed = True
        return metadata.last_entry_id

    async def recover_and_close(self, ledger_id: int) -> int:
        """O(1)."""
        ledger = self._ledger(ledger_id, "closeLedger")
        if not ledger.metadata.closed:
            last = await self.get_last_entry_in_ledger(ledger_id)
            ledger.metadata.last_entry_id = last
            ledger.metadata.closed = True
        return ledger.metadata.last_entry_id

    async def delete_ledger(self, ledger_id: int) -> None:
        """O(1)."""
        if self._closed:
            raise StorageFaultError("deleteLedger", "bookie is closed")
        self._ledgers.pop(ledger_id, None)

    async def ledger_metadata(self, ledger_id: int) -> LedgerMetadata:
        """A copy: callers cannot change the bookie's state through it."""
        return replace(self._ledger(ledger_id, "getLastEntry").metadata)

    async def close(self) -> None:
        self._closed = True


class InMemoryMetadataStore:
    """Records in a SortedDict: get/put/delete O(log n), prefix listing O(log n + k)."""

    __slots__ = ("_closed", "_records")

    def __init__(self) -> None:
        self._records: SortedDict = SortedDict()
        self._closed = False

    def _check_open(self, op: str) -> None:
        if self._closed:
            raise StorageFaultError(op, "metadata store is closed")

    async def get(self, key: str) -> bytes | None:
        self._check_open("metadataGet")
        value: bytes | None = self._records.get(key)
        return value

    async def put(self, key: str, value: bytes) -> None:
        self._check_open("metadataPut")
        self._records[key] = bytes(value)

    async def delete(self, key: str) -> None:
        self._check_open("metadataDelete")
        self._records.pop(key, None)

    async def keys_with_prefix(self, prefix: str) -> list[str]:
        self._check_open("metadataGet")
        keys: list[str] = []
        for key in self._records.irange(minimum=prefix):
            if not key.startswith(prefix):
                break
            keys.append(key)
        return keys

    async def close(self) -> None:
        self._closed = True
