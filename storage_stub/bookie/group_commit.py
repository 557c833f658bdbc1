"""Group commit: gather concurrent writes so one fsync makes a whole group durable.

Callers ``submit`` an item and await the returned future; one owned task takes the
pending items as a group once the oldest has waited ``max_wait_s`` or the group holds
``max_bytes``, commits the group, then resolves every future with the value its caller
gave (the bookie's: the add's last entry id, so the future is the add's own and its
callbacks run one loop round sooner than behind a second future). Groups are acknowledged
one at a time, in submission order.

A commit has one stage (``commit``: write and sync the group, then it is done) or two
(``commit`` writes it, ``sync`` makes it durable). With two the committer pipelines, as
BookKeeper's journal does with its journal thread and its force-write thread: while
group N syncs, group N+1 is gathered and written, so a group costs the loop the longer
of the two stages, not their sum. Bounds: at most one sync in flight and one group being
written (or written and waiting for the sync ahead of it); a group's sync starts only
once the previous group's sync has ended, so syncs run in group order, and a group is
acknowledged only after its own sync, hence after every earlier group's. While the sync
ahead of it is out, the written group takes in what arrives, written as it arrives (one
write at a time, each of what is pending), until that sync ends, so a slow fsync makes
the next one cover more (what it holds is bounded by what callers have submitted and not
yet been answered for); and with a sync out nothing waits ``max_wait_s`` to be written:
it could not be synced sooner anyway. ``max_wait_s`` gathers a group only while no sync
is out (BookKeeper's journal waits ``journalMaxGroupWaitMSec`` before a write; its
force-write thread, like this committer, then covers whatever was written while the last
fsync ran). Per group: one ``commit`` call per write (one, unless a sync was out), one
``sync`` call, one task, O(items).

If a stage fails, every item of its group, every item of a group written behind it and
every item still pending fails with the same exception: later items may build on the
failed ones (entry ids follow each other), so none of them may be acknowledged.
``on_failure`` (the bookie: give entry ids back) is called once, in the same step as
those futures fail, with nothing of an earlier group still unresolved, and returns the
exception the callers get. A write that fails while the previous group syncs waits for
that sync to end first (its group is acknowledged or failed on its own account).
Unlike BookKeeper, whose force-write thread stops the journal on an fsync failure (the
bookie goes down), the committer keeps going: what comes after the failure is committed
normally (the bookie turns read-only where the failure calls for it).
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

from storage_stub.bookie.api import StorageFaultError

T = TypeVar("T")
R = TypeVar("R")

#: (item, size, future, submitted at loop time, value)
_Pending = tuple[T, int, asyncio.Future[R], float, R]


def _as_exception(error: BaseException) -> Exception:
    return (
        error
        if isinstance(error, Exception)
        else StorageFaultError("addEntries", "group commit stopped")
    )


class GroupCommitter(Generic[T, R]):
    """``submit`` is O(1); each group costs one call of ``commit`` (and of ``sync``).

    ``max_items=1`` commits every item alone (no gathering), ``max_wait_s=0`` takes
    whatever is pending as soon as the previous group is written.
    """

    __slots__ = (
        "_closing",
        "_commit",
        "_doom",
        "_epoch",
        "_full",
        "_in_flight",
        "_max_bytes",
        "_max_items",
        "_max_wait_s",
        "_nudge",
        "_on_failure",
        "_pending",
        "_pending_bytes",
        "_sync",
        "_syncing",
        "_task",
        "_wake",
        "_writing",
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
        sync: Callable[[list[T]], Awaitable[None]] | None = None,
        on_failure: Callable[[Exception], Exception] | None = None,
    ) -> None:
        """``commit(group)``: the group's write (and, without ``sync``, its sync).
        ``sync(group)``: called on the loop once the group is written and the previous
        sync has ended; what it does before returning its awaitable (the bookie: take
        the files to fsync) happens before the next group's write starts; the group is
        acknowledged once the awaitable is done. ``on_failure(error)``: see the
        module."""
        self._commit = commit
        self._sync = sync
        self._on_failure = on_failure
        self._max_wait_s = max_wait_s
        self._max_bytes = max_bytes
        self._max_items = max_items
        #: (item, size, future, submitted at loop time, value), oldest first.
        self._pending: list[_Pending[T, R]] = []
        self._pending_bytes = 0
        self._wake = asyncio.Event()
        self._full = asyncio.Event()
        self._closing = False
        self._task: asyncio.Task[None] | None = None
        #: the sync of the last group handed to ``sync``, until it has ended
        self._syncing: asyncio.Task[None] | None = None
        #: groups handed to ``sync`` and not yet acknowledged or failed, oldest first
        self._in_flight: collections.deque[list[_Pending[T, R]]] = collections.deque()
        #: failures so far: a group handed on before the latest one failed with it
        self._epoch = 0
        #: the group in its write stage (or written, waiting for the sync ahead of it)
        self._writing: list[_Pending[T, R]] | None = None
        #: why ``_writing`` must fail once written: a sync ahead of it failed
        self._doom: Exception | None = None
        #: while the written group waits for the sync ahead of it: resolved by the next
        #: ``submit`` or by that sync's end, whichever comes first
        self._nudge: asyncio.Future[None] | None = None
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

    @property
    def pipelined(self) -> bool:
        """Whether a group is written while the one before it syncs."""
        return self._sync is not None

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
            nudge = self._nudge
            if nudge is not None and not nudge.done():
                nudge.set_result(None)
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
                        await self._outlast_sync()
                        return
                    self._wake.clear()
                    await self._wake.wait()
                    continue
                await self._gather()
                if self._pending:  # a failed sync may have failed them meanwhile
                    await self._commit_next_group()
        finally:
            # Only reached with items pending when cancelled: nobody will commit them.
            self._fail_pending(StorageFaultError("addEntries", "group commit stopped"))

    async def _gather(self) -> None:
        if self._closing or self._full.is_set() or self._max_wait_s <= 0:
            return
        if not self._sync_done():
            return  # a group written now joins the next sync, which cannot start sooner
        deadline = self._pending[0][3] + self._max_wait_s
        try:
            async with asyncio.timeout_at(deadline):
                await self._full.wait()
        except TimeoutError:
            pass

    def _take_group(self) -> list[_Pending[T, R]]:
        limit = len(self._pending) if self._max_items is None else self._max_items
        taken = self._pending[:limit]
        del self._pending[:limit]
        self._pending_bytes -= sum(entry[1] for entry in taken)
        if not (
            self._pending_bytes >= self._max_bytes
            or (self._max_items is not None and len(self._pending) >= self._max_items)
        ):
            self._full.clear()
        return taken

    async def _commit_next_group(self) -> None:
        taken = self._take_group()
        self._writing = taken
        self._doom = None
        if not await self._write(taken, taken):
            return
        # While the sync ahead is out: what arrives is written as it arrives and joins
        # this group (BookKeeper's journal likewise writes on while an fsync is out, and
        # the next fsync covers all it wrote), so an add arriving during a sync is synced
        # with the next one, not the one after. One wakeup per arrival or end, no task.
        while self._sync is not None and not self._sync_done():
            if self._pending:
                more = self._take_group()
                taken += more
                if not await self._write(taken, more):
                    return
            else:
                await self._arrival_or_sync_end(taken)
        if self._sync is None:
            self._writing = None
            self._acknowledge(taken)
            return
        await self._outlast_sync_holding(taken)
        self._writing = None
        if self._doom is not None:
            self._fail(taken, self._doom)
            return
        try:
            syncing = self._sync([entry[0] for entry in taken])
        except Exception as error:
            self._writing = taken
            await self._fail_written(taken, error)
            return
        self._in_flight.append(taken)
        self._syncing = asyncio.get_running_loop().create_task(
            self._sync_group(taken, syncing, self._epoch), name="bookie-group-sync"
        )

    async def _write(self, taken: list[_Pending[T, R]], part: list[_Pending[T, R]]) -> bool:
        """Write ``part`` of the group ``taken`` (``_writing``). False if the write failed:
        the group has then failed (see ``_fail_written``); a cancellation is raised."""
        try:
            await self._commit([entry[0] for entry in part])
        except BaseException as error:
            await self._fail_written(taken, _as_exception(error))
            if isinstance(error, Exception):
                return False
            raise
        return True

    async def _arrival_or_sync_end(self, taken: list[_Pending[T, R]]) -> None:
        """Wait until an item is submitted or the sync out ends. Cancelled (a cancelled
        ``close``), the written group ``taken`` fails at once, as in ``_outlast_sync``."""
        syncing = self._syncing
        assert syncing is not None
        nudge = self._nudge = asyncio.get_running_loop().create_future()
        syncing.add_done_callback(self._wake_writer)
        try:
            await nudge
        except BaseException:
            self._writing = None
            self._fail(taken, StorageFaultError("addEntries", "group commit stopped"))
            raise
        finally:
            self._nudge = None
            syncing.remove_done_callback(self._wake_writer)

    def _wake_writer(self, _syncing: asyncio.Task[None]) -> None:
        nudge = self._nudge
        if nudge is not None and not nudge.done():
            nudge.set_result(None)

    async def _fail_written(self, taken: list[_Pending[T, R]], error: Exception) -> None:
        """A written group (``_writing``) failed: every earlier group ends first,
        acknowledged or failed on its own account; then it fails, with the earlier
        failure if one doomed it (told already), else with ``error`` and everything
        pending."""
        await self._outlast_sync_holding(taken)
        self._writing = None
        if self._doom is not None:
            self._fail(taken, self._doom)
        else:
            self._fail_behind(taken, error)

    async def _sync_group(
        self, taken: list[_Pending[T, R]], syncing: Awaitable[None], epoch: int
    ) -> None:
        try:
            await syncing
        except BaseException as error:
            if self._epoch == epoch:
                self._fail_behind(taken, _as_exception(error))
            if not isinstance(error, Exception):
                raise
            return
        if self._epoch != epoch:
            return  # failed meanwhile, with an earlier group
        self._acknowledge(taken)

    def _sync_done(self) -> bool:
        return self._syncing is None or self._syncing.done()

    async def _outlast_sync(self) -> None:
        """Wait until the sync in flight (if any) has ended; not cancelled with a caller."""
        syncing = self._syncing
        if syncing is not None:
            if not syncing.done():
                await asyncio.wait((syncing,))
            self._syncing = None

    async def _outlast_sync_holding(self, taken: list[_Pending[T, R]]) -> None:
        """``_outlast_sync`` for a written group: if the committer is cancelled meanwhile
        (a cancelled ``close``), the group fails, as pending items do."""
        try:
            await self._outlast_sync()
        except BaseException:
            self._writing = None
            self._fail(taken, StorageFaultError("addEntries", "group commit stopped"))
            raise

    def _acknowledge(self, taken: list[_Pending[T, R]]) -> None:
        if self._in_flight and self._in_flight[0] is taken:
            self._in_flight.popleft()
        self.groups_committed += 1
        self.items_committed += len(taken)
        for entry in taken:
            if not entry[2].done():
                entry[2].set_result(entry[4])

    def _fail_behind(self, taken: list[_Pending[T, R]], error: Exception) -> Exception:
        """Fail ``taken``, every group handed on behind it, the group being written and
        everything pending (one step, with ``on_failure``; every group before ``taken``
        has ended)."""
        failure = error if self._on_failure is None else self._on_failure(error)
        self._epoch += 1
        self._fail(taken, failure)
        for group in self._in_flight:
            self._fail(group, failure)
        self._in_flight.clear()
        if self._writing is not None:
            self._doom = failure
        self._fail_pending(failure)
        return failure

    @staticmethod
    def _fail(taken: list[_Pending[T, R]], error: BaseException) -> None:
        for entry in taken:
            if not entry[2].done():
                entry[2].set_exception(error)

    def _fail_pending(self, error: BaseException) -> None:
        pending = self._pending
        self._pending = []
        self._pending_bytes = 0
        self._full.clear()
        self._fail(pending, error)

    async def close(self) -> None:
        """Commit what is pending, then stop the task and wait for it (and for the last
        sync). If this wait is cancelled, the task is cancelled too (pending items fail)
        and awaited, and so is the sync in flight (a thread that cannot be stopped: at
        most one group's sync)."""
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
            if self._syncing is not None:
                await asyncio.gather(self._syncing, return_exceptions=True)
            raise
