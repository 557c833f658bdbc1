"""Owned background tasks: every task has an owner that cancels and awaits it; and
waits that any number of tasks share (:func:`join`, :class:`FifoSemaphore`), each O(1) to
join and to leave."""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import AsyncIterator, Coroutine, Iterable
from typing import Any, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")

#: tasks a close cancels in one turn of the event loop
CANCEL_BATCH = 256
#: items a :func:`cooperative` loop handles between two yields to the event loop
COOPERATIVE_BATCH = 512


class TaskOwner:
    """Holds running tasks; ``close`` cancels and awaits all of them. A task that fails
    is logged with its traceback at once, not when someone happens to await it."""

    __slots__ = ("_closed", "_name", "_tasks")

    def __init__(self, name: str) -> None:
        self._name = name
        #: a dict as an insertion-ordered set: close cancels in spawn order, the same on
        #: every run (a set would go by the tasks' addresses)
        self._tasks: dict[asyncio.Task[Any], None] = {}
        self._closed = False

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str | None = None) -> asyncio.Task[Any]:
        if self._closed:
            coro.close()
            raise RuntimeError(f"{self._name} is closed")
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks[task] = None
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.pop(task, None)
        if not task.cancelled() and (error := task.exception()) is not None:
            log.error("%s: task %s failed", self._name, task.get_name(), exc_info=error)

    async def settled(self) -> None:
        """Wait until no task is running, those they spawn meanwhile included (a task
        that fails is logged as ever, not raised here)."""
        while self._tasks:
            await asyncio.wait(list(self._tasks))

    def __len__(self) -> int:
        """Tasks running. O(1)."""
        return len(self._tasks)

    async def close(self) -> None:
        """Cancel every task, CANCEL_BATCH at a time (each batch's cancellations run in
        the loop turn after it, so thousands of tasks never unwind in one turn), and
        wait for them all. O(tasks)."""
        self._closed = True
        tasks = list(self._tasks)
        for start in range(0, len(tasks), CANCEL_BATCH):
            if start:
                await asyncio.sleep(0)
            for task in tasks[start : start + CANCEL_BATCH]:
                task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


# ---------------------------------------------------------------------- shared waits
#
# ``asyncio.shield(future)`` adds one done callback per waiter to ``future`` and, when a
# waiter is cancelled, removes it again by scanning the future's whole callback list:
# n waiters cancelled at once (a client that sent 32k PRODUCER commands for a topic
# still loading, then hung up) cost O(n^2) with the loop held. ``asyncio.Lock`` is the
# same: a cancelled waiter is removed from the middle of its deque. The two below keep
# joining and leaving O(1).


class _Fanout:
    """The one done callback a shared future gets, whatever the number of its waiters:
    it settles every waiter still waiting. Waiters are a dict (an insertion-ordered
    set), so a waiter that leaves is removed in O(1)."""

    __slots__ = ("waiters",)

    def __init__(self) -> None:
        self.waiters: dict[asyncio.Future[Any], None] = {}

    def __call__(self, inner: asyncio.Future[Any]) -> None:
        """O(waiters), once."""
        _fanouts.pop(inner, None)
        waiters, self.waiters = self.waiters, {}
        if inner.cancelled():
            for waiter in waiters:
                waiter.cancel()
            return
        error = inner.exception()
        for waiter in waiters:
            if waiter.done():
                continue
            if error is not None:
                waiter.set_exception(error)
            else:
                waiter.set_result(inner.result())


#: the fan-out of each shared future that has waiters (an entry lives while one waits)
_fanouts: dict[asyncio.Future[Any], _Fanout] = {}


async def join(inner: asyncio.Future[T]) -> T:
    """Wait for ``inner`` without cancelling it when the waiter is cancelled (as
    ``asyncio.shield``), in O(1) to join and O(1) to leave, however many wait: ``inner``
    carries one callback for all its waiters. Raises what ``inner`` raises."""
    if inner.done():
        return inner.result()
    fanout = _fanouts.get(inner)
    if fanout is None:
        fanout = _fanouts[inner] = _Fanout()
        inner.add_done_callback(fanout)
    waiter: asyncio.Future[T] = inner.get_loop().create_future()
    waiters = fanout.waiters
    waiters[waiter] = None
    try:
        return await waiter
    finally:
        if waiters.pop(waiter, 0) is None and not waiters and not inner.done():
            # the last waiter left: ``inner`` carries nothing of ours (its callbacks are
            # ours and its owner's, so this removal is O(1))
            inner.remove_done_callback(fanout)
            _fanouts.pop(inner, None)


class FifoSemaphore:
    """A first-come first-served semaphore of ``value`` slots whose waiters join and leave
    in O(1) (amortized): a waiter cancelled stays in the queue, done, and is skipped
    when its turn comes, where ``asyncio.Semaphore`` would search its queue for it. A
    slot passes from its holder to the next waiter directly, so no newcomer overtakes
    the queue."""

    __slots__ = ("_free", "_waiters")

    def __init__(self, value: int) -> None:
        self._free = value
        self._waiters: collections.deque[asyncio.Future[None]] = collections.deque()

    def locked(self) -> bool:
        """No slot is free."""
        return self._free == 0

    async def acquire(self) -> None:
        """O(1)."""
        if self._free:
            self._free -= 1
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.release()  # handed a slot, then cancelled before it ran: pass it on
            raise

    def release(self) -> None:
        """Hand the slot to the next waiter still waiting, or free it. O(1) amortized
        (each cancelled waiter is skipped once)."""
        waiters = self._waiters
        while waiters:
            waiter = waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)  # the slot is its now
                return
        self._free += 1

    async def __aenter__(self) -> None:
        await self.acquire()

    async def __aexit__(self, *exc_info: object) -> None:
        self.release()


class FifoLock(FifoSemaphore):
    """A :class:`FifoSemaphore` of one slot."""

    __slots__ = ()

    def __init__(self) -> None:
        super().__init__(1)

    def release(self) -> None:
        if self._free:
            raise RuntimeError("FifoLock is not acquired")
        super().release()


async def cooperative(items: Iterable[T], batch: int = COOPERATIVE_BATCH) -> AsyncIterator[T]:
    """``items``, yielding to the event loop every ``batch`` of them: a loop over a
    count a client chose (a topic's partitions) whose awaits may all complete at once
    (nothing to unload, nothing to read) never holds the loop for the whole count."""
    for index, item in enumerate(items, 1):
        yield item
        if not index % batch:
            await asyncio.sleep(0)
