"""GroupCommitter: gathering, size trigger, failures that take the queue with them, close."""

from __future__ import annotations

import asyncio

import pytest

from storage_stub.bookie import StorageFaultError
from storage_stub.bookie.group_commit import GroupCommitter


class RecordingCommit:
    """A commit function that records its groups and can be made to fail or to block."""

    def __init__(self) -> None:
        self.groups: list[list[str]] = []
        self.fail_next: Exception | None = None
        self.gate: asyncio.Event | None = None
        self.entered = asyncio.Event()

    async def __call__(self, group: list[str]) -> None:
        self.entered.set()
        if self.gate is not None:
            await self.gate.wait()
        if self.fail_next is not None:
            error, self.fail_next = self.fail_next, None
            raise error
        self.groups.append(group)


async def test_items_submitted_together_commit_as_one_group_once_the_bytes_are_in() -> None:
    commit = RecordingCommit()
    committer: GroupCommitter[str, object] = GroupCommitter(commit, max_wait_s=3600.0, max_bytes=50)
    committer.start()
    futures = [committer.submit(f"item{i}", 10, i) for i in range(5)]
    # each future resolves to the value its caller gave
    assert await asyncio.gather(*futures) == [0, 1, 2, 3, 4]
    assert commit.groups == [[f"item{i}" for i in range(5)]]
    assert (committer.groups_committed, committer.items_committed) == (1, 5)
    await committer.close()


async def test_a_lone_item_is_committed_when_its_wait_runs_out() -> None:
    commit = RecordingCommit()
    committer: GroupCommitter[str, object] = GroupCommitter(
        commit, max_wait_s=0.001, max_bytes=1 << 20
    )
    committer.start()
    await committer.submit("alone", 1, "alone")
    assert commit.groups == [["alone"]]
    await committer.close()


async def test_max_items_one_commits_every_item_by_itself_in_order() -> None:
    commit = RecordingCommit()
    committer: GroupCommitter[str, object] = GroupCommitter(
        commit, max_wait_s=0.0, max_bytes=1 << 20, max_items=1
    )
    committer.start()
    await asyncio.gather(*(committer.submit(f"item{i}", 1, f"item{i}") for i in range(4)))
    assert commit.groups == [["item0"], ["item1"], ["item2"], ["item3"]]
    await committer.close()


async def test_a_failed_commit_fails_its_group_and_everything_queued_behind_it() -> None:
    commit = RecordingCommit()
    commit.gate = asyncio.Event()
    committer: GroupCommitter[str, object] = GroupCommitter(
        commit, max_wait_s=0.0, max_bytes=1 << 20, max_items=2
    )
    committer.start()
    first_group = [committer.submit("a", 1, "a"), committer.submit("b", 1, "b")]
    await commit.entered.wait()  # the committer holds the first group
    queued = committer.submit("c", 1, "c")
    commit.fail_next = StorageFaultError("addEntries", "disk on fire")
    commit.gate.set()
    outcomes = await asyncio.gather(*first_group, queued, return_exceptions=True)
    assert all(isinstance(o, StorageFaultError) for o in outcomes)

    await committer.submit("d", 1, "d")  # the committer keeps going
    assert commit.groups == [["d"]]
    await committer.close()


async def test_close_commits_what_is_pending_then_refuses_new_items() -> None:
    commit = RecordingCommit()
    committer: GroupCommitter[str, object] = GroupCommitter(
        commit, max_wait_s=3600.0, max_bytes=1 << 20
    )
    committer.start()
    pending = [committer.submit("x", 1, "x"), committer.submit("y", 1, "y")]
    await committer.close()
    assert all(future.done() and future.exception() is None for future in pending)
    assert commit.groups == [["x", "y"]]
    with pytest.raises(StorageFaultError):
        committer.submit("z", 1, "z")


async def test_cancelling_close_stops_the_task_and_fails_what_was_pending() -> None:
    commit = RecordingCommit()
    commit.gate = asyncio.Event()
    committer: GroupCommitter[str, object] = GroupCommitter(
        commit, max_wait_s=0.0, max_bytes=1 << 20, max_items=1
    )
    committer.start()
    first = committer.submit("blocked", 1, "blocked")
    second = committer.submit("queued", 1, "queued")
    await commit.entered.wait()
    close_started = asyncio.Event()

    async def close() -> None:
        close_started.set()
        await committer.close()

    closing = asyncio.ensure_future(close())
    await close_started.wait()  # close is now waiting on the blocked commit
    closing.cancel()
    with pytest.raises(asyncio.CancelledError):
        await closing
    for future in (first, second):
        assert isinstance(future.exception(), StorageFaultError)
