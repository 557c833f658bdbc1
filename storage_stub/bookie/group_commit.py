"""Group commit: gather concurrent writes so one fsync makes a whole group durable.

Callers ``submit`` an item and await the returned future; one owned task takes the
pending items as a group once the oldest has waited ``max_wait_s`` or the group holds
``max_bytes``, runs the commit function once for the group, then resolves every future
with the value its caller gave (the bookie's: the add's last entry id, so the future is
the add's own and its callbacks run one loop round sooner than behind a second future).
Groups commit one at a time, in submission order.

If a commit fails, every item of its group *and every item still pending* fails with the
same exception: later items may build on the failed ones (entry ids follow each other),
so none of them may be acknowledged.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

from storage_stub.bookie.api import StorageFaultError

T = TypeVar("T")
R = TypeVar("R")


class GroupCommitter(Generic[T, R]):
    """``submit`` is O(1); each group costs one call of ``commit``.

    ``max_items=1`` commits every item alone (no gathering), ``max_wait_s=0`` takes
    whatever is pending as soon as the previous group is done.
    """

    __slots__ = (
        "_closing",
        "_commit",
        "_full",
        "_max_bytes",
        "_max_items",
        "_max_wait_s",
        "_pending",
        "_pending_bytes",
        "_task",
        "_wake",
        "groups_committed",
        "items_committed",
    )

    def __init__(
        self,
        commit: Callable[[list[T]], Awaitable[None]],
        *,
        max_wait_s: float,
        max_bytes: int,
        max_items: int | None = None,
    ) -> None:
        self._commit = commit
        self._max_wait_s = max_wait_s
        self._max_bytes = max_bytes
        self._max_items = max_items
        #: (item, size, future, submitted at loop time, value), oldest first.
        self._pending: list[tuple[T, int, asyncio.Future[R], float, R]] = []
        self._pending_bytes = 0
        self._wake = asyncio.Event()
        self._full = asyncio.Event()
        self._closing = False
        self._task: asyncio.Task[None] | None = None
        self.groups_committed = 0
        self.items_committed = 0

    def start(self) -> None:
        """Start the commit task (on the running loop)."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(
                self._run(), name="bookie-group-commit"
            )

    @property
    def pending(self) -> int:
        return len(self._pending)

    def submit(self, item: T, size: int, value: R) -> asyncio.Future[R]:
        """Queue ``item`` (``size`` bytes) for the next group; the future resolves to
        ``value`` when its group is committed. Callers that may be cancelled should await
        it through ``asyncio.shield`` so the commit of their item is not disturbed."""
        if self._closing or self._task is None or self._task.done():
            raise StorageFaultError("addEntries", "group commit is closed")
        loop = asyncio.get_running_loop()
        future: asyncio.Future[R] = loop.create_future()
        if not self._pending:
            self._wake.set()
        self._pending.append((item, size, future, loop.time(), value))
        self._pending_bytes += size
        if self._pending_bytes >= self._max_bytes or (
            self._max_items is not None and len(self._pending) >= self._max_items
        ):
            self._full.set()
        return future

    async def _run(self) -> None:
        try:
            while True:
                if not self._pending:
                    if self._closing:
                        return
                    self._wake.clear()
                    await self._wake.wait()
                    continue
                await self._gather()
                await self._commit_next_group()
        finally:
            # Only reached with items pending when cancelled: nobody will commit them.
            self._fail_pending(StorageFaultError("addEntries", "group commit stopped"))

    async def _gather(self) -> None:
        if self._closing or self._full.is_set() or self._max_wait_s <= 0:
            return
        deadline = self._pending[0][3] + self._max_wait_s
        try:
            async with asyncio.timeout_at(deadline):
                await self._full.wait()
        except TimeoutError:
            pass

    async def _commit_next_group(self) -> None:
        limit = len(self._pending) if self._max_items is None else self._max_items
        taken = self._pending[:limit]
        del self._pending[:limit]
        self._pending_bytes -= sum(entry[1] for entry in taken)
        if not (
            self._pending_bytes >= self._max_bytes
            or (self._max_items is not None and len(self._pending) >= self._max_items)
        ):
            self._full.clear()
        try:
            await self._commit([entry[0] for entry in taken])
        except BaseException as error:
            failure = (
                error
                if isinstance(error, Exception)
                else StorageFaultError("addEntries", "group commit stopped")
            )
            for entry in taken:
                if not entry[2].done():
                    entry[2].set_exception(failure)
            self._fail_pending(failure)
            if isinstance(error, Exception):
                return
            raise
        self.groups_committed += 1
        self.items_committed += len(taken)
        for entry in taken:
            if not entry[2].done():
                entry[2].set_result(entry[4])

    def _fail_pending(self, error: BaseException) -> None:
        pending = self._pending
        self._pending = []
        self._pending_bytes = 0
        self._full.clear()
        for entry in pending:
            if not entry[2].done():
                entry[2].set_exception(error)

    async def close(self) -> None:
        """Commit what is pending, then stop the task and wait for it. If this wait is
        cancelled, the task is cancelled too (pending items fail) and awaited."""
        self._closing = True
        self._wake.set()
        self._full.set()
        task = self._task
        if task is None:
            return
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            raise
