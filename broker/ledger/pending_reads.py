"""The storage reads of a managed ledger in flight, as futures of their entries.

Which ranges a reader fetches itself and which it waits for is the live cache design's
decision (``TopicUnit.read``: Pulsar's PendingReadsManager lives in its entry cache, and
not every design shares reads); this class starts the reads the design asked for, tells
the topic's cache events when each completes (``filled``) or fails (``fill_failed``)
before anyone waiting sees the result, and finds the reads in flight a joining reader
waits for.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Sequence

from broker.tasks import TaskOwner


class PendingRead:
    __slots__ = ("first", "future", "last")

    def __init__(self, first: int, last: int, future: asyncio.Future[list[bytes]]) -> None:
        self.first = first
        self.last = last
        self.future = future


ReadFunction = Callable[[int, int, int], Awaitable[list[bytes]]]
Filled = Callable[[int, int, Sequence[bytes]], None]
Failed = Callable[[int, int, int], None]


class PendingReads:
    """Per ledger id, the storage reads in flight. ``start`` O(1); ``covering`` O(p) in
    the p reads in flight on that ledger."""

    __slots__ = ("_failed", "_filled", "_inflight", "_owner", "_read")

    def __init__(
        self, read: ReadFunction, owner: TaskOwner, filled: Filled, failed: Failed
    ) -> None:
        self._read = read
        self._owner = owner
        self._filled = filled
        self._failed = failed
        self._inflight: dict[int, list[PendingRead]] = {}

    def __len__(self) -> int:
        """Storage reads in flight. O(ledgers)."""
        return sum(len(reads) for reads in self._inflight.values())

    def start(self, ledger_id: int, first: int, last: int) -> PendingRead:
        """Read ``first..last`` from storage in a task owned by the ledger; when it ends
        (read, failed, or cancelled before or while reading) the events hear of it
        first, then the waiters. Entries read are ``filled`` in the very loop step in
        which storage returned (and counted) them, so the cache's misses and storage's
        entries read never differ when looked at together."""
        pending = PendingRead(first, last, asyncio.get_running_loop().create_future())
        task = self._owner.spawn(
            self._run(ledger_id, first, last), name=f"read {ledger_id}:{first}-{last}"
        )
        self._inflight.setdefault(ledger_id, []).append(pending)
        task.add_done_callback(functools.partial(self._finished, ledger_id, pending))
        return pending

    def covering(self, ledger_id: int, first: int, last: int) -> list[tuple[int, int, PendingRead]]:
        """The reads in flight that hold ``first..last``, as (first, last, read) parts in
        order. RuntimeError if an entry is not being read: the design said it was."""
        parts: list[tuple[int, int, PendingRead]] = []
        position = first
        for pending in sorted(self._inflight.get(ledger_id, ()), key=lambda p: p.first):
            if pending.last < position or pending.first > position:
                continue
            end = min(last, pending.last)
            parts.append((position, end, pending))
            position = end + 1
            if position > last:
                return parts
        raise RuntimeError(
            f"entries {ledger_id}:{position}..{last} are not being read, yet the cache "
            "design waits for them"
        )

    async def _run(self, ledger_id: int, first: int, last: int) -> list[bytes] | Exception:
        """The storage read; a failure is the result (a storage fault is not a bug).
        What was read is filled here, before the step ends: the task's done callbacks
        run a step later, and whatever the loop ran in between (a stats request) saw
        the entries counted by storage and not yet by the cache."""
        try:
            entries = await self._read(ledger_id, first, last)
        except Exception as error:
            return error
        self._filled(ledger_id, first, entries)
        return entries

    def _finished(
        self, ledger_id: int, pending: PendingRead, task: asyncio.Task[list[bytes] | Exception]
    ) -> None:
        waiting = self._inflight[ledger_id]
        waiting.remove(pending)
        if not waiting:
            del self._inflight[ledger_id]
        if task.cancelled():
            self._failed(ledger_id, pending.first, pending.last)
            pending.future.cancel()
            return
        raised = task.exception()  # from ``filled`` (a bug): the waiters get it
        outcome = raised if raised is not None else task.result()
        if isinstance(outcome, list):
            pending.future.set_result(outcome)  # filled already, in ``_run``
            return
        if raised is None:  # the storage read failed: nothing arrives, nothing counts
            self._failed(ledger_id, pending.first, pending.last)
        pending.future.set_exception(outcome)
        pending.future.exception()  # retrieved here; waiters re-raise it
