"""Synced writes of one RocksDB database, grouped: one WAL fsync makes a whole group durable.

Writes are staged on the event loop into the pending WriteBatch; one WriteBatch is out
on the writer thread at a time. What is staged while it is out, and what the callers it
wakes stage at once (a topic close's next write), goes out next as one WriteBatch: the
send is a callback queued behind those callers, one turn of the loop, never a timed
wait. A lone write goes out on the next turn, and a burst of concurrent writes (64
topics closing at a time, each closing its ledger and writing its managed-ledger
record; acks of many topics persisting their cursors) shares one fsync per round
instead of paying one each.

A write's future resolves only once the synced WriteBatch holding it has returned, so
what a caller was told is durable is in the synced WAL. A WriteBatch is atomic and holds
writes in the order they were staged, and batches go out one at a time in staging order,
so writes land in call order, and the records of one ``write`` land together or not at
all. If a WriteBatch fails, each of its writes fails with a StorageFaultError naming its
own operation (RocksDB's message; NoSpaceError for a full disk; the database is marked
failed, see rocks.RocksDatabase); writes staged meanwhile go out in the next WriteBatch
on their own.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from rocksdict import WriteBatch

from storage_stub.bookie.api import StorageFaultError
from storage_stub.bookie.rocks import RocksDatabase, write_options

T = TypeVar("T")
_SYNC = write_options(sync=True)


class GroupedSyncWriter:
    """``put``/``delete``/``write``: O(records) staging on the loop plus one future; each
    group costs one writer-thread hop and one synced RocksDB write (one WAL fsync),
    whatever its size. ``syncs`` counts the synced writes made, ``records`` the writes
    (calls) they carried.
    """

    __slots__ = (
        "_batch",
        "_closed",
        "_executor",
        "_futures",
        "_in_flight",
        "_operations",
        "_rocks",
        "_send_queued",
        "records",
        "syncs",
    )

    def __init__(self, rocks: RocksDatabase, *, name: str) -> None:
        """Write ``rocks`` (not owned) from a writer thread of this writer's own, listed in
        ``rocks.writers`` so a reopen holds it off; ``name`` names the thread."""
        self._rocks = rocks
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"{name}-sync")
        rocks.writers.append(self._executor)
        self._batch = WriteBatch(raw_mode=True)
        #: the staged writes' futures and operation names, in staging order
        self._futures: list[asyncio.Future[None]] = []
        self._operations: list[str] = []
        #: the WriteBatch out on the writer thread, if any
        self._in_flight: asyncio.Future[None] | None = None
        #: a ``_send`` is queued on the loop
        self._send_queued = False
        self._closed = False
        self.syncs = 0
        self.records = 0

    @property
    def rocks(self) -> RocksDatabase:
        return self._rocks

    def put(self, operation: str, key: bytes, value: bytes) -> asyncio.Future[None]:
        """Stage one put; the future resolves once it is durable. O(1)."""
        self._check_open(operation)
        self._batch.put(key, value)
        return self._staged(operation)

    def delete(self, operation: str, key: bytes) -> asyncio.Future[None]:
        """Stage one delete; the future resolves once it is durable. O(1)."""
        self._check_open(operation)
        self._batch.delete(key)
        return self._staged(operation)

    def write(
        self, operation: str, stage: Callable[[WriteBatch, T], None], argument: T
    ) -> asyncio.Future[None]:
        """Stage the records ``stage(batch, argument)`` adds (they land together); the
        future resolves once they are durable. O(records)."""
        self._check_open(operation)
        stage(self._batch, argument)
        return self._staged(operation)

    def _check_open(self, operation: str) -> None:
        if self._closed:
            raise StorageFaultError(operation, f"the {self._rocks.name} writer is closed")

    def _staged(self, operation: str) -> asyncio.Future[None]:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._futures.append(future)
        self._operations.append(operation)
        if self._in_flight is None:
            self._queue_send()
        return future

    def _queue_send(self) -> None:
        """Send after the callbacks ready now: callers woken by a commit, and writers
        running in this turn of the loop, stage into the same WriteBatch first."""
        if not self._send_queued:
            self._send_queued = True
            asyncio.get_running_loop().call_soon(self._send)

    def _send(self) -> None:
        """Hand the staged WriteBatch to the writer thread (unless one is out, or nothing
        is staged); stage into a new one."""
        self._send_queued = False
        if self._in_flight is not None or not self._futures:
            return
        batch, futures, operations = self._batch, self._futures, self._operations
        self._batch = WriteBatch(raw_mode=True)
        self._futures = []
        self._operations = []
        in_flight = asyncio.get_running_loop().run_in_executor(self._executor, self._commit, batch)
        self._in_flight = in_flight
        in_flight.add_done_callback(lambda done: self._committed(done, futures, operations))

    def _commit(self, batch: WriteBatch) -> None:
        # Writer thread. ``db`` is read here: a reopen may have replaced it.
        self._rocks.db.write(batch, _SYNC)

    def _committed(
        self, done: asyncio.Future[None], futures: list[asyncio.Future[None]], operations: list[str]
    ) -> None:
        self._in_flight = None
        try:
            done.result()
        except BaseException as error:  # the writes were not made durable: each caller hears
            rocks = self._rocks
            for future, operation in zip(futures, operations, strict=True):
                if not future.done():
                    future.set_exception(
                        rocks.write_fault(operation, f"{rocks.name} write", error)
                        if isinstance(error, Exception)
                        else StorageFaultError(operation, f"{rocks.name} write stopped")
                    )
        else:
            self.syncs += 1
            self.records += len(futures)
            for future in futures:
                if not future.done():
                    future.set_result(None)
        self._queue_send()

    async def drain(self) -> None:
        """Wait until every write staged so far is committed (or failed)."""
        while True:
            if self._in_flight is not None:
                await asyncio.wait((self._in_flight,))
            elif self._futures:
                self._send()
            else:
                return

    async def close(self) -> None:
        """Refuse new writes, wait for the staged ones, stop the writer thread."""
        if self._closed:
            return
        self._closed = True
        await self.drain()
        self._executor.shutdown(wait=True)
        if self._executor in self._rocks.writers:
            self._rocks.writers.remove(self._executor)
