"""syncMode=batch pipelines its group commit: group N+1 is written while group N syncs.

First the GroupCommitter with two stages driven by hand (each sync is a future the test
resolves or fails), then the disk bookie with an fsync the test holds and fails.
"""

from __future__ import annotations

import asyncio
import os
import pathlib
import threading
from collections.abc import Awaitable, Callable
from typing import TypeVar

import pytest

from storage_stub.bookie import (
    DiskBookie,
    NoSuchEntryError,
    Storage,
    StorageFaultError,
)
from storage_stub.bookie.group_commit import GroupCommitter
from tests.harness import eventually_async
from tests.storage.test_bookie_disk_recovery import disk_bookie, payload

OpenStorage = Callable[..., Awaitable[Storage]]
T = TypeVar("T")


async def deadline(awaitable: Awaitable[T]) -> T:
    """``awaitable``'s outcome, or a failure after 30 s: a deadline against a hang, not
    a wait."""
    return await asyncio.wait_for(awaitable, 30)


async def settle() -> None:
    """Let every task that can run, run (no time passes): to check what did *not* happen."""
    for _ in range(20):
        await asyncio.sleep(0)


class Stages:
    """A write stage and a sync stage under the test's control: a write of an item named
    in ``held_writes`` waits for its event, one named in ``failing_writes`` raises; each
    sync is a future in ``syncs`` (by the group's first item) that the test resolves."""

    def __init__(self) -> None:
        self.written: list[list[str]] = []
        self.synced: list[list[str]] = []  # groups handed to the sync stage, in order
        self.syncs: dict[str, asyncio.Future[None]] = {}
        self.held_writes: dict[str, asyncio.Event] = {}
        self.writing: list[str] = []
        self.failing_writes: set[str] = set()
        self.failures: list[Exception] = []
        self.on_failure_saw: list[dict[str, bool]] = []
        self.watched: dict[str, asyncio.Future[object]] = {}

    async def write(self, group: list[str]) -> None:
        self.writing.append(group[0])
        held = self.held_writes.get(group[0])
        if held is not None:
            await held.wait()
        if group[0] in self.failing_writes:
            raise StorageFaultError("addEntries", f"write of {group[0]} failed")
        self.written.append(group)

    def sync(self, group: list[str]) -> asyncio.Future[None]:
        self.synced.append(group)
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.syncs[group[0]] = future
        return future

    def on_failure(self, error: Exception) -> Exception:
        self.failures.append(error)
        self.on_failure_saw.append({name: f.done() for name, f in self.watched.items()})
        return StorageFaultError("addEntries", f"group failed: {error}")


def pipelined(stages: Stages) -> GroupCommitter[str, object]:
    committer: GroupCommitter[str, object] = GroupCommitter(
        stages.write,
        max_wait_s=0.0,
        max_bytes=1 << 20,
        max_items=1,
        sync=stages.sync,
        on_failure=stages.on_failure,
    )
    committer.start()
    return committer


async def b_written_while_a_syncs(
    stages: Stages,
) -> tuple[GroupCommitter[str, object], asyncio.Future[object], asyncio.Future[object]]:
    """A pipelined committer with a's sync out and b written meanwhile (neither done):
    the committer, a's future and b's."""
    committer = pipelined(stages)
    a = committer.submit("a", 1, "a")
    await eventually_async(lambda: stages.synced == [["a"]], "a's sync to start")
    b = committer.submit("b", 1, "b")
    await eventually_async(lambda: stages.written == [["a"], ["b"]], "b written during a's sync")
    return committer, a, b


async def test_the_next_group_is_written_while_a_sync_is_out_and_acks_keep_group_order() -> None:
    stages = Stages()
    committer, a, b = await b_written_while_a_syncs(stages)
    await settle()
    # b is written and waits for a's sync before its own starts
    assert stages.synced == [["a"]]
    assert not a.done() and not b.done()
    # c arrives after b's write has ended, a's sync still out: written at once, it joins
    # b's group (before 2026-11-29 it waited for a's sync to end, then for a whole sync
    # of b's before its own could start)
    c = committer.submit("c", 1, "c")
    await eventually_async(lambda: stages.written[-1] == ["c"], "c written during a's sync")
    await settle()
    assert stages.synced == [["a"]] and committer.pending == 0
    assert not a.done() and not b.done() and not c.done()

    stages.syncs["a"].set_result(None)
    assert await deadline(a) == "a"
    await eventually_async(lambda: len(stages.synced) == 2, "b's sync to start")
    assert stages.synced[1] == ["b", "c"] and not b.done() and not c.done()
    d = committer.submit("d", 1, "d")
    await eventually_async(lambda: stages.written[-1] == ["d"], "d written during b's sync")
    assert not d.done()
    stages.syncs["b"].set_result(None)
    assert await deadline(b) == "b"
    assert await deadline(c) == "c"
    await eventually_async(lambda: "d" in stages.syncs, "d's sync to start once b's ended")
    stages.syncs["d"].set_result(None)
    assert await deadline(d) == "d"
    assert (committer.groups_committed, committer.items_committed) == (3, 4)
    await committer.close()


async def test_with_a_sync_out_nothing_waits_the_group_wait() -> None:
    """max_wait_s gathers a group only while no sync is out: with one out, an arrival is
    written at once (it joins the next sync, which cannot start sooner)."""
    stages = Stages()
    committer: GroupCommitter[str, object] = GroupCommitter(
        stages.write, max_wait_s=3600.0, max_bytes=2, sync=stages.sync
    )
    committer.start()
    a = committer.submit("a", 1, "a")
    b = committer.submit("b", 1, "b")  # full (max_bytes): written without the wait
    await eventually_async(lambda: stages.synced == [["a", "b"]], "a and b's sync to start")
    c = committer.submit("c", 1, "c")
    await eventually_async(lambda: stages.written[-1] == ["c"], "c written during the sync")
    stages.syncs["a"].set_result(None)
    assert await deadline(a) == "a" and await deadline(b) == "b"
    await eventually_async(lambda: "c" in stages.syncs, "c's sync to start")
    stages.syncs["c"].set_result(None)
    assert await deadline(c) == "c"
    await committer.close()


async def test_what_arrives_while_a_sync_is_out_is_written_and_joins_the_next_sync() -> None:
    stages = Stages()
    committer = pipelined(stages)  # one item a write: groups of one when no sync is out
    a = committer.submit("a", 1, "a")
    await eventually_async(lambda: stages.synced == [["a"]], "a's sync to start")
    stages.held_writes["b"] = asyncio.Event()
    b = committer.submit("b", 1, "b")
    await eventually_async(lambda: stages.writing == ["a", "b"], "b's write to start")
    c = committer.submit("c", 1, "c")
    d = committer.submit("d", 1, "d")
    stages.held_writes["b"].set()
    # a's sync is still out: c and d are written behind b, one write each, and wait
    await eventually_async(lambda: stages.writing == ["a", "b", "c", "d"], "c and d written")
    await settle()
    assert stages.synced == [["a"]] and not any(f.done() for f in (a, b, c, d))
    stages.syncs["a"].set_result(None)
    await eventually_async(lambda: len(stages.synced) == 2, "the next sync to start")
    assert stages.synced[1] == ["b", "c", "d"]  # one sync for all three
    assert await deadline(a) == "a" and not b.done()
    stages.syncs["b"].set_result(None)
    assert await deadline(asyncio.gather(b, c, d)) == ["b", "c", "d"]
    assert (committer.groups_committed, committer.items_committed) == (2, 4)
    await committer.close()


async def test_a_failed_sync_fails_its_group_the_group_written_behind_it_and_the_queue() -> None:
    stages = Stages()
    committer, a, b = await b_written_while_a_syncs(stages)
    c = committer.submit("c", 1, "c")

    stages.syncs["a"].set_exception(OSError(5, "Input/output error"))
    outcomes = await deadline(asyncio.gather(a, b, c, return_exceptions=True))
    assert all(isinstance(o, StorageFaultError) for o in outcomes), outcomes
    assert outcomes[0] is outcomes[1] is outcomes[2]  # what on_failure returned, once
    assert len(stages.failures) == 1 and isinstance(stages.failures[0], OSError)
    assert stages.synced == [["a"]]  # b never synced: nothing of it may be acknowledged

    d = committer.submit("d", 1, "d")  # the committer goes on
    await eventually_async(lambda: stages.synced[-1] == ["d"], "d's sync to start")
    stages.syncs["d"].set_result(None)
    assert await deadline(d) == "d"
    await committer.close()


async def test_a_failed_sync_fails_what_was_written_into_the_next_group_while_it_waited() -> None:
    """c arrives after b's write has ended, while a's sync is out: written at once into
    b's group, it fails with a's sync as b does, in the same step."""
    stages = Stages()
    committer, a, b = await b_written_while_a_syncs(stages)
    await settle()
    c = committer.submit("c", 1, "c")
    await eventually_async(lambda: stages.written[-1] == ["c"], "c written during a's sync")

    stages.syncs["a"].set_exception(OSError(5, "Input/output error"))
    outcomes = await deadline(asyncio.gather(a, b, c, return_exceptions=True))
    assert all(isinstance(o, StorageFaultError) for o in outcomes), outcomes
    assert outcomes[0] is outcomes[1] is outcomes[2] and len(stages.failures) == 1
    assert stages.synced == [["a"]]  # b and c never synced
    await committer.close()


async def test_a_sync_failing_while_the_next_group_is_being_written_fails_it_once_written() -> None:
    stages = Stages()
    committer = pipelined(stages)
    a = committer.submit("a", 1, "a")
    await eventually_async(lambda: stages.synced == [["a"]], "a's sync to start")
    stages.held_writes["b"] = asyncio.Event()
    b = committer.submit("b", 1, "b")
    await eventually_async(lambda: stages.writing == ["a", "b"], "b's write to start")
    c = committer.submit("c", 1, "c")

    stages.syncs["a"].set_exception(OSError(5, "Input/output error"))
    failed = await deadline(asyncio.gather(a, c, return_exceptions=True))
    assert all(isinstance(o, StorageFaultError) for o in failed)
    assert not b.done()  # its write is still out: it fails once the write has ended
    stages.held_writes["b"].set()
    with pytest.raises(StorageFaultError):
        await deadline(b)
    assert stages.written == [["a"], ["b"]] and stages.synced == [["a"]]
    assert len(stages.failures) == 1
    await committer.close()


async def test_a_write_failing_while_a_sync_is_out_waits_for_that_sync_first() -> None:
    stages = Stages()
    committer = pipelined(stages)
    a = committer.submit("a", 1, "a")
    stages.watched["a"] = a
    await eventually_async(lambda: stages.synced == [["a"]], "a's sync to start")
    stages.failing_writes.add("b")
    b = committer.submit("b", 1, "b")
    await eventually_async(lambda: "b" in stages.writing, "b's write to start")
    await settle()
    # b's write failed, but a's sync is out: b's failure (and the ids it gives back)
    # waits until a is acknowledged
    assert not b.done() and stages.failures == []
    stages.syncs["a"].set_result(None)
    assert await deadline(a) == "a"
    with pytest.raises(StorageFaultError):
        await deadline(b)
    assert stages.on_failure_saw == [{"a": True}]
    await committer.close()


async def test_close_waits_for_the_sync_in_flight() -> None:
    stages = Stages()
    committer = pipelined(stages)
    a = committer.submit("a", 1, "a")
    await eventually_async(lambda: stages.synced == [["a"]], "a's sync to start")
    closing = asyncio.ensure_future(committer.close())
    await settle()
    assert not closing.done()
    stages.syncs["a"].set_result(None)
    await deadline(closing)
    assert a.result() == "a"
    with pytest.raises(StorageFaultError):
        committer.submit("late", 1, "late")


async def test_a_cancelled_close_fails_the_written_group_and_waits_out_the_sync() -> None:
    stages = Stages()
    committer, a, b = await b_written_while_a_syncs(stages)
    closing = asyncio.ensure_future(committer.close())
    await settle()
    closing.cancel()
    await settle()
    # b was written but will never be synced: it fails at once; a's sync is still out
    assert isinstance(b.exception(), StorageFaultError)
    assert not closing.done()  # the cancelled close still waits for the sync in flight
    stages.syncs["a"].set_result(None)
    with pytest.raises(asyncio.CancelledError):
        await deadline(closing)
    assert a.result() == "a"


# ---------------------------------------------------------------------- the disk bookie


class HeldFsync:
    """The bookie's entry log fsync (``DiskBookie._fsync_logs``, batch mode) the test
    holds: once ``hold`` is set the next call waits until ``release``, then fails if
    ``fail`` is set; every call records the inodes it was given."""

    def __init__(self) -> None:
        self.real = DiskBookie._fsync_logs
        self.hold = False
        self.fail = False
        self.waiting = threading.Event()
        self.released = asyncio.Event()
        self.calls: list[set[int]] = []

    async def __call__(self, bookie: DiskBookie, fds: list[int]) -> None:
        self.calls.append({os.fstat(fd).st_ino for fd in fds})
        if self.hold:
            self.hold = False
            self.waiting.set()
            await deadline(self.released.wait())
            if self.fail:
                raise OSError(5, "Input/output error")
        await self.real(bookie, fds)

    def release(self) -> None:
        self.released.set()


@pytest.fixture
def held_fsync(monkeypatch: pytest.MonkeyPatch) -> HeldFsync:
    fsync = HeldFsync()

    async def held(bookie: DiskBookie, fds: list[int]) -> None:
        await fsync(bookie, fds)

    monkeypatch.setattr(DiskBookie, "_fsync_logs", held)
    return fsync


@pytest.mark.parametrize("direct", [True, False], ids=["direct-io", "page-cache"])
async def test_an_add_is_written_while_the_group_before_it_syncs_and_acked_after_it(
    open_store: OpenStorage, held_fsync: HeldFsync, direct: bool
) -> None:
    storage = await open_store(
        syncMode="batch", journalMaxGroupWaitMSec=0, dbStorage_directIOEntryLogger=direct
    )
    bookie = storage.bookie
    disk = disk_bookie(bookie)
    ledger = await bookie.create_ledger()
    assert await bookie.add_entries(ledger, [payload(ledger, 0)]) == 0

    held_fsync.hold = True
    first = asyncio.ensure_future(bookie.add_entries(ledger, [payload(ledger, 1)]))
    await eventually_async(held_fsync.waiting.is_set, "the first add's fsync")
    offset = disk.entry_log.write_offset
    second = asyncio.ensure_future(
        bookie.add_entries(ledger, [payload(ledger, 2), payload(ledger, 3)])
    )
    await eventually_async(
        lambda: disk.entry_log.write_offset > offset, "the second add written during the fsync"
    )
    await settle()
    assert not first.done() and not second.done()
    # neither is readable before its sync: reads go by what is confirmed
    assert await bookie.last_add_confirmed(ledger) == 0
    with pytest.raises(NoSuchEntryError):
        await bookie.read_entries(ledger, 1, 1)

    held_fsync.release()
    assert await deadline(first) == 1
    assert await deadline(second) == 3
    assert await bookie.read_entries(ledger, 0, 3) == [payload(ledger, e) for e in range(4)]
    await storage.close()
    reopened = await open_store(syncMode="batch")
    assert await reopened.bookie.read_entries(ledger, 0, 3) == [
        payload(ledger, e) for e in range(4)
    ]


async def test_a_failed_fsync_fails_the_adds_written_and_queued_behind_it(
    open_store: OpenStorage, held_fsync: HeldFsync
) -> None:
    storage = await open_store(syncMode="batch", journalMaxGroupWaitMSec=0)
    bookie = storage.bookie
    disk = disk_bookie(bookie)
    ledger = await bookie.create_ledger()
    other = await bookie.create_ledger()
    assert await bookie.add_entries(ledger, [b"durable-0"]) == 0

    held_fsync.hold = True
    held_fsync.fail = True
    first = asyncio.ensure_future(bookie.add_entries(ledger, [b"lost-1"]))
    await eventually_async(held_fsync.waiting.is_set, "the first add's fsync")
    offset = disk.entry_log.write_offset
    written_behind = asyncio.ensure_future(bookie.add_entries(ledger, [b"lost-2", b"lost-3"]))
    await eventually_async(lambda: disk.entry_log.write_offset > offset, "the second add written")
    queued = asyncio.ensure_future(bookie.add_entries(other, [b"lost-other-0"]))
    await settle()
    assert not queued.done()

    held_fsync.release()
    outcomes = await deadline(asyncio.gather(first, written_behind, queued, return_exceptions=True))
    assert all(isinstance(o, StorageFaultError) for o in outcomes), outcomes
    assert "fsync" in str(outcomes[0])
    for ledger_id, durable in ((ledger, 0), (other, -1)):
        assert await bookie.last_add_confirmed(ledger_id) == durable
        assert await bookie.get_last_entry_in_ledger(ledger_id) == durable
    assert not disk.read_only  # an I/O error is not a full disk: the bookie goes on

    # ids continue from the last durable entry, in both ledgers
    assert await bookie.add_entries(ledger, [b"durable-1"]) == 1
    assert await bookie.add_entries(other, [b"other-0"]) == 0
    await storage.close()
    reopened = await open_store(syncMode="batch")
    assert await reopened.bookie.read_entries(ledger, 0, 1) == [b"durable-0", b"durable-1"]
    assert await reopened.bookie.read_entries(other, 0, 0) == [b"other-0"]
    assert await reopened.bookie.get_last_entry_in_ledger(ledger) == 1


async def test_a_log_rolled_while_a_sync_is_out_is_made_durable_by_the_next_sync(
    open_store: OpenStorage, held_fsync: HeldFsync, tmp_path: pathlib.Path
) -> None:
    size = 3000  # with 4 KiB logs, every add opens a new log
    storage = await open_store(syncMode="batch", journalMaxGroupWaitMSec=0, logSizeLimit=4096)
    bookie = storage.bookie
    disk = disk_bookie(bookie)
    ledger = await bookie.create_ledger()
    assert await bookie.add_entries(ledger, [payload(ledger, 0, size)]) == 0

    held_fsync.hold = True
    first = asyncio.ensure_future(bookie.add_entries(ledger, [payload(ledger, 1, size)]))
    await eventually_async(held_fsync.waiting.is_set, "the first add's fsync")
    log_id = disk.entry_log.current_log_id
    syncs_before = len(held_fsync.calls)
    second = asyncio.ensure_future(bookie.add_entries(ledger, [payload(ledger, 2, size)]))
    await eventually_async(
        lambda: disk.entry_log.current_log_id == log_id + 1, "the log rolled during the fsync"
    )
    held_fsync.release()
    assert (await deadline(first), await deadline(second)) == (1, 2)
    # the sync of the group that opened the new log covered the file and its directory entry
    entrylogs = tmp_path / "data" / "entrylogs"
    new_log = os.stat(entrylogs / f"{log_id + 1}.log").st_ino
    assert {new_log, os.stat(entrylogs).st_ino} <= held_fsync.calls[syncs_before]
    await storage.close()
    reopened = await open_store(syncMode="batch")
    assert await reopened.bookie.read_entries(ledger, 0, 2) == [
        payload(ledger, e, size) for e in range(3)
    ]


async def test_closing_a_ledger_waits_for_its_adds_in_the_pipeline(
    open_store: OpenStorage, held_fsync: HeldFsync
) -> None:
    storage = await open_store(syncMode="batch", journalMaxGroupWaitMSec=0)
    bookie = storage.bookie
    disk = disk_bookie(bookie)
    ledger = await bookie.create_ledger()
    held_fsync.hold = True
    first = asyncio.ensure_future(bookie.add_entries(ledger, [b"e0"]))
    await eventually_async(held_fsync.waiting.is_set, "the first add's fsync")
    offset = disk.entry_log.write_offset
    second = asyncio.ensure_future(bookie.add_entries(ledger, [b"e1"]))
    await eventually_async(lambda: disk.entry_log.write_offset > offset, "the second add written")
    closing = asyncio.ensure_future(bookie.close_ledger(ledger))
    await settle()
    assert not closing.done()
    held_fsync.release()
    assert await deadline(closing) == 1
    assert (await deadline(first), await deadline(second)) == (0, 1)
    assert isinstance(disk, DiskBookie)


async def test_a_ledger_created_while_a_sync_is_out_keeps_its_id_when_that_sync_fails(
    open_store: OpenStorage, held_fsync: HeldFsync
) -> None:
    """Ledger ids while a sync is out: a ledger created then has an id of its own, its
    first add is written behind the sync and fails with it, its entry ids start again
    at 0, and the ids of every ledger survive a reopen (none reused, none lost)."""
    storage = await open_store(syncMode="batch", journalMaxGroupWaitMSec=0)
    bookie = storage.bookie
    disk = disk_bookie(bookie)
    first = await bookie.create_ledger()
    assert await bookie.add_entries(first, [b"first-0"]) == 0

    held_fsync.hold = True
    held_fsync.fail = True
    lost = asyncio.ensure_future(bookie.add_entries(first, [b"lost"]))
    await eventually_async(held_fsync.waiting.is_set, "the first add's fsync")
    created = await deadline(bookie.create_ledger())  # while the sync is out
    offset = disk.entry_log.write_offset
    behind = asyncio.ensure_future(bookie.add_entries(created, [b"created-lost"]))
    await eventually_async(lambda: disk.entry_log.write_offset > offset, "its add written")
    held_fsync.release()
    outcomes = await deadline(asyncio.gather(lost, behind, return_exceptions=True))
    assert all(isinstance(o, StorageFaultError) for o in outcomes), outcomes

    later = await bookie.create_ledger()
    assert len({first, created, later}) == 3
    assert await bookie.last_add_confirmed(created) == -1
    assert await bookie.add_entries(created, [b"created-0"]) == 0
    assert await bookie.add_entries(later, [b"later-0"]) == 0
    await storage.close()

    reopened = (await open_store(syncMode="batch")).bookie
    assert await reopened.read_entries(first, 0, 0) == [b"first-0"]
    assert await reopened.read_entries(created, 0, 0) == [b"created-0"]
    assert await reopened.read_entries(later, 0, 0) == [b"later-0"]
    assert await reopened.get_last_entry_in_ledger(created) == 0
    assert await reopened.create_ledger() not in {first, created, later}
