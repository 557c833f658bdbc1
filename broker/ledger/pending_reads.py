"""Concurrent storage reads of one ledger share work: a read whose range overlaps reads
already in flight waits for those and reads only the gaps, so one bookie read serves
every waiter (Pulsar's PendingReadsManager does this for the same reason: many cursors
catching up over the same entries at once)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from broker.tasks import TaskOwner


class PendingRead:
    __slots__ = ("first", "future", "last")

    def __init__(self, first: int, last: int, future: asyncio.Future[list[bytes]]) -> None:
        self.first = first
        self.last = last
        self.future = future


ReadFunction = Callable[[int, int, int], Awaitable[list[bytes]]]


class PendingReads:
    """Per ledger, the storage reads in flight. ``read`` costs O(p) in the p reads in
    flight on that ledger, plus the storage reads of the gaps."""

    __slots__ = ("_inflight", "_owner", "_read", "shared_entries")

    def __init__(self, read: ReadFunction, owner: TaskOwner) -> None:
        self._read = read
        self._owner = owner
        self._inflight: dict[int, list[PendingRead]] = {}
        #: entries served by a read another caller started
        self.shared_entries = 0

    async def read(self, ledger_id: int, first: int, last: int) -> list[bytes]:
        """Entries ``first..last`` of ``ledger_id``, joining overlapping reads in flight."""
        plan: list[tuple[int, int, PendingRead]] = []
        own: list[PendingRead] = []
        position = first
        for pending in sorted(self._inflight.get(ledger_id, ()), key=lambda p: p.first):
            if pending.last < position or pending.first > last:
                continue
            if pending.first > position:
                own.append(self._start(ledger_id, position, pending.first - 1))
                plan.append((position, pending.first - 1, own[-1]))
            end = min(last, pending.last)
            plan.append((max(position, pending.first), end, pending))
            self.shared_entries += end - max(position, pending.first) + 1
            position = end + 1
            if position > last:
                break
        if position <= last:
            own.append(self._start(ledger_id, position, last))
            plan.append((position, last, own[-1]))
        result: list[bytes] = []
        for start, end, pending in plan:
            datas = await asyncio.shield(pending.future)
            offset = start - pending.first
            result += datas[offset : offset + end - start + 1]
        return result

    def _start(self, ledger_id: int, first: int, last: int) -> PendingRead:
        pending = PendingRead(first, last, asyncio.get_running_loop().create_future())
        self._inflight.setdefault(ledger_id, []).append(pending)
        self._owner.spawn(self._run(ledger_id, pending), name=f"read {ledger_id}:{first}-{last}")
        return pending

    async def _run(self, ledger_id: int, pending: PendingRead) -> None:
        try:
            datas = await self._read(ledger_id, pending.first, pending.last)
        except asyncio.CancelledError:
            pending.future.cancel()
            raise
        except Exception as error:
            pending.future.set_exception(error)
            pending.future.exception()  # retrieved here; waiters re-raise it
        else:
            pending.future.set_result(datas)
        finally:
            waiting = self._inflight[ledger_id]
            waiting.remove(pending)
            if not waiting:
                del self._inflight[ledger_id]
