"""The broker-wide limit on the size of reads in flight (Pulsar's
``managedLedgerMaxReadsInFlightSizeInMB``, ``InflightReadsLimiter``).

A read takes permits (bytes, estimated before it starts) and gives them back when its
entries have been handed over. Reads that find too few permits wait in one queue, first
come first served: only the head is let through, so a large read is not overtaken by
small ones. A read that would wait behind a full queue, or longer than the timeout,
fails with :class:`TooManyReads` (Pulsar's ``TooManyRequestsException``). A read larger
than the whole limit takes the whole limit (Pulsar PR #23524). 0 turns the limit off:
Pulsar 4.1's default.

Pulsar holds the permits until every entry of the read is released, after the
dispatcher wrote it to the consumers' connections; brokerlab hands a read's entries
over as soon as it returns, and gives the permits back then.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque

#: bytes a read is estimated at per entry beyond its payload (Pulsar's
#: BOOKKEEPER_READ_OVERHEAD_PER_ENTRY)
READ_OVERHEAD_PER_ENTRY = 64
#: the payload estimate of an entry of a ledger with nothing in it yet (Pulsar's
#: DEFAULT_ESTIMATED_ENTRY_SIZE)
DEFAULT_ESTIMATED_ENTRY_SIZE = 10 * 1024


class TooManyReads(Exception):
    """No permits for this read: the queue is full or the wait timed out (the managed
    ledger raises it on as a ManagedLedgerError)."""


def estimated_read_size(entries: int, ledger_bytes: int, ledger_entries: int) -> int:
    """What a read of ``entries`` is estimated at before it starts: the ledger's mean
    entry size (or 10 KiB with nothing written), plus 64 bytes, per entry. O(1)."""
    mean = ledger_bytes // ledger_entries if ledger_entries else DEFAULT_ESTIMATED_ENTRY_SIZE
    return entries * (mean + READ_OVERHEAD_PER_ENTRY)


class ReadLimiter:
    """Permits for reads in flight, in bytes. ``acquire`` O(1) when permits are free, else
    a place in the queue; ``release`` O(reads let through)."""

    __slots__ = ("_waiting", "available", "max_bytes", "queue_size", "timeout_s")

    def __init__(self, max_bytes: int, timeout_ms: int = 60_000, queue_size: int = 50_000) -> None:
        self.max_bytes = max_bytes
        self.available = max_bytes
        self.timeout_s = timeout_ms / 1000
        self.queue_size = queue_size
        #: (bytes wanted, its future), first come first
        self._waiting: deque[tuple[int, asyncio.Future[None]]] = deque()

    @property
    def enabled(self) -> bool:
        return self.max_bytes > 0

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    async def acquire(self, size: int) -> int:
        """Take ``size`` bytes of permits (at most the whole limit), waiting behind the
        reads queued before; the bytes taken, to give back. 0 when the limit is off.
        TooManyReads when the queue is full or the wait outlasts the timeout."""
        if not self.enabled:
            return 0
        size = min(size, self.max_bytes)
        if not self._waiting and self.available >= size:
            self.available -= size
            return size
        if len(self._waiting) >= self.queue_size:
            raise TooManyReads(
                f"{len(self._waiting)} reads already wait for permits "
                "(managedLedgerMaxReadsInFlightPermitsAcquireQueueSize)"
            )
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        item = (size, future)
        self._waiting.append(item)
        try:
            await asyncio.wait_for(asyncio.shield(future), self.timeout_s)
        except TimeoutError:
            if future.done() and not future.cancelled():
                return size  # granted just as the wait ended: it holds the permits
            self._forget(item)
            raise TooManyReads(
                f"no permits for a read of {size} bytes within {self.timeout_s:g} s "
                "(managedLedgerMaxReadsInFlightSizeInMB)"
            ) from None
        except BaseException:
            if future.done() and not future.cancelled():
                self.release(size)
            else:
                self._forget(item)
            raise
        return size

    def release(self, size: int) -> None:
        """Give ``size`` bytes back, and let the queue's head through while they last."""
        if size <= 0:
            return
        self.available += size
        self._grant()

    def _grant(self) -> None:
        waiting = self._waiting
        while waiting:
            size, future = waiting[0]
            if future.done():  # its reader gave up
                waiting.popleft()
                continue
            if self.available < size:
                return
            waiting.popleft()
            self.available -= size
            future.set_result(None)

    def _forget(self, item: tuple[int, asyncio.Future[None]]) -> None:
        with contextlib.suppress(ValueError):
            self._waiting.remove(item)
        item[1].cancel()
        self._grant()  # the head may have been the one blocking the others
