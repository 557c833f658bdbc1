"""The seam every storage call passes through: fault injector, latency model, counters.

Wraps a plain Bookie / MetadataStore. The fault check and the delay come before the call
reaches the implementation, so an injected failure changes nothing. Cost per call: two
dict lookups (no rule, no delay), a few int bumps, one extra coroutine frame (an add:
one done callback, and no task unless a rule or a delay applies to adds).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Sequence

from storage_stub.bookie.api import Bookie, LedgerMetadata, MetadataStore, total_size, when_done
from storage_stub.bookie.counters import OpCounter, OpCounters
from storage_stub.bookie.faults import FaultInjector
from storage_stub.bookie.latency import LatencyModel


def _count_add(counter: OpCounter, entries: Sequence[bytes], write: asyncio.Future[int]) -> None:
    """An add ended: counted as an error, or its entries and bytes."""
    if write.cancelled():
        return
    if write.exception() is not None:
        counter.errors += 1
        return
    counter.entries += len(entries)
    counter.bytes += total_size(entries)


class InstrumentedBookie:
    """A Bookie whose calls are checked for faults, delayed and counted."""

    __slots__ = ("_counters", "_faults", "_inner", "_latency")

    def __init__(
        self,
        inner: Bookie,
        *,
        faults: FaultInjector,
        latency: LatencyModel,
        counters: OpCounters,
    ) -> None:
        self._inner = inner
        self._faults = faults
        self._latency = latency
        self._counters = counters

    @property
    def inner(self) -> Bookie:
        return self._inner

    async def create_ledger(self) -> int:
        counter = self._counters.createLedger
        counter.calls += 1
        try:
            await self._faults.check("createLedger")
            await self._latency.delay("createLedger")
            return await self._inner.create_ledger()
        except Exception:
            counter.errors += 1
            raise

    async def add_entries(self, ledger_id: int, entries: Sequence[bytes]) -> int:
        return await asyncio.shield(self.start_add(ledger_id, entries))

    def start_add(self, ledger_id: int, entries: Sequence[bytes]) -> asyncio.Future[int]:
        """Counted, and passed on at once when no fault rule or delay applies to adds;
        else a task that checks for the fault and waits the delay first."""
        counter = self._counters.addEntries
        counter.calls += 1
        if self._faults.has_rule("addEntries") or self._latency.has_model("addEntries"):
            return asyncio.ensure_future(self._add_after_checks(ledger_id, entries))
        try:
            write = self._inner.start_add(ledger_id, entries)
        except Exception:
            counter.errors += 1
            raise
        when_done(write, functools.partial(_count_add, counter, entries))
        return write

    async def _add_after_checks(self, ledger_id: int, entries: Sequence[bytes]) -> int:
        try:
            await self._faults.check("addEntries")
            await self._latency.delay("addEntries")
            write = self._inner.start_add(ledger_id, entries)
        except Exception:
            self._counters.addEntries.errors += 1
            raise
        when_done(write, functools.partial(_count_add, self._counters.addEntries, entries))
        return await asyncio.shield(write)

    async def read_entries(self, ledger_id: int, first: int, last: int) -> list[bytes]:
        counter = self._counters.readEntries
        counter.calls += 1
        try:
            await self._faults.check("readEntries")
            await self._latency.delay("readEntries")
            entries = await self._inner.read_entries(ledger_id, first, last)
        except Exception:
            counter.errors += 1
            raise
        counter.entries += len(entries)
        counter.bytes += total_size(entries)
        return entries

    async def last_add_confirmed(self, ledger_id: int) -> int:
        # Served from the bookie's memory: not a storage operation of its own.
        return await self._inner.last_add_confirmed(ledger_id)

    async def get_last_entry_in_ledger(self, ledger_id: int) -> int:
        counter = self._counters.getLastEntry
        counter.calls += 1
        try:
            await self._faults.check("getLastEntry")
            await self._latency.delay("getLastEntry")
            return await self._inner.get_last_entry_in_ledger(ledger_id)
        except Exception:
            counter.errors += 1
            raise

    async def close_ledger(self, ledger_id: int) -> int:
        counter = self._counters.closeLedger
        counter.calls += 1
        try:
            await self._faults.check("closeLedger")
            await self._latency.delay("closeLedger")
            return await self._inner.close_ledger(ledger_id)
        except Exception:
            counter.errors += 1
            raise

    async def recover_and_close(self, ledger_id: int) -> int:
        # A recovery is a floor seek plus a close: it goes through both operations' rules.
        counter = self._counters.closeLedger
        counter.calls += 1
        try:
            await self._faults.check("getLastEntry")
            await self._faults.check("closeLedger")
            await self._latency.delay("getLastEntry")
            await self._latency.delay("closeLedger")
            return await self._inner.recover_and_close(ledger_id)
        except Exception:
            counter.errors += 1
            raise

    async def delete_ledger(self, ledger_id: int) -> None:
        counter = self._counters.deleteLedger
        counter.calls += 1
        try:
            await self._faults.check("deleteLedger")
            await self._latency.delay("deleteLedger")
            await self._inner.delete_ledger(ledger_id)
        except Exception:
            counter.errors += 1
            raise

    async def ledger_metadata(self, ledger_id: int) -> LedgerMetadata:
        # In-memory lookup, like last_add_confirmed.
        return await self._inner.ledger_metadata(ledger_id)

    async def close(self) -> None:
        await self._inner.close()


class InstrumentedMetadataStore:
    """A MetadataStore whose calls are checked for faults, delayed and counted."""

    __slots__ = ("_counters", "_faults", "_inner", "_latency")

    def __init__(
        self,
        inner: MetadataStore,
        *,
        faults: FaultInjector,
        latency: LatencyModel,
        counters: OpCounters,
    ) -> None:
        self._inner = inner
        self._faults = faults
        self._latency = latency
        self._counters = counters

    @property
    def inner(self) -> MetadataStore:
        return self._inner

    async def get(self, key: str) -> bytes | None:
        counter = self._counters.metadataGet
        counter.calls += 1
        try:
            await self._faults.check("metadataGet")
            await self._latency.delay("metadataGet")
            value = await self._inner.get(key)
        except Exception:
            counter.errors += 1
            raise
        if value is not None:
            counter.entries += 1
            counter.bytes += len(value)
        return value

    async def put(self, key: str, value: bytes) -> None:
        counter = self._counters.metadataPut
        counter.calls += 1
        try:
            await self._faults.check("metadataPut")
            await self._latency.delay("metadataPut")
            await self._inner.put(key, value)
        except Exception:
            counter.errors += 1
            raise
        counter.entries += 1
        counter.bytes += len(value)

    async def delete(self, key: str) -> None:
        counter = self._counters.metadataDelete
        counter.calls += 1
        try:
            await self._faults.check("metadataDelete")
            await self._latency.delay("metadataDelete")
            await self._inner.delete(key)
        except Exception:
            counter.errors += 1
            raise

    async def keys_with_prefix(self, prefix: str) -> list[str]:
        # A listing is a metadata read.
        counter = self._counters.metadataGet
        counter.calls += 1
        try:
            await self._faults.check("metadataGet")
            await self._latency.delay("metadataGet")
            keys = await self._inner.keys_with_prefix(prefix)
        except Exception:
            counter.errors += 1
            raise
        counter.entries += len(keys)
        return keys
