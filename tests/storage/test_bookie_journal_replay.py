"""Recovery replays the entry logs into the location index (syncMode=batch writes the
index without syncing its WAL: the entry logs are the journal).

A crash that loses unsynced index writes (a power loss) is played by dropping the
index writes from some point on (``LostIndexWrites``), then closing and reopening: the
index then holds what it held before the drop, replay point included, as RocksDB
recovers a prefix of its writes. Every acknowledged entry must be readable after the
reopen, with each ledger's last entry and size as before.
"""

from __future__ import annotations

import asyncio
import logging
import pathlib
import struct
from collections.abc import Iterable

import pytest

from storage_stub.bookie import NoSuchEntryError, Storage, StorageFaultError
from storage_stub.bookie.frame import Frame, FrameLocation, ScannedFrame
from storage_stub.bookie.location_index import EntryLocationIndex
from tests.harness import eventually_async
from tests.storage.test_bookie_disk_recovery import disk_bookie, payload
from tests.storage.test_bookie_pipelined_commit import HeldFsync, OpenStorage, deadline
from tests.storage.test_bookie_pipelined_commit import held_fsync as held_fsync


class LostIndexWrites:
    """``EntryLocationIndex.add_frames`` as a power loss leaves it: while ``lost`` is
    set, writes do nothing (and count in ``dropped``); every call records its ``sync``."""

    def __init__(self) -> None:
        self.real = EntryLocationIndex.add_frames
        self.lost = False
        self.dropped = 0
        self.syncs: list[bool] = []

    def __call__(
        self,
        index: EntryLocationIndex,
        frames: Iterable[tuple[Frame, FrameLocation]],
        *,
        sync: bool,
    ) -> None:
        self.syncs.append(sync)
        if self.lost:
            self.dropped += 1
            return
        self.real(index, frames, sync=sync)


@pytest.fixture
def lost_writes(monkeypatch: pytest.MonkeyPatch) -> LostIndexWrites:
    lost = LostIndexWrites()

    def add_frames(
        index: EntryLocationIndex,
        frames: Iterable[tuple[Frame, FrameLocation]],
        *,
        sync: bool,
    ) -> None:
        lost(index, frames, sync=sync)

    monkeypatch.setattr(EntryLocationIndex, "add_frames", add_frames)
    return lost


async def reopen(
    storage: Storage, open_store: OpenStorage, lost: LostIndexWrites, **settings: object
) -> Storage:
    """Close ``storage`` (its index flushed as it is, the dropped writes missing) and open
    it again, index writes no longer dropped."""
    await storage.close()
    lost.lost = False
    return await open_store(**settings)


async def concurrent_adds(storage: Storage, ledger: int, first: int, count: int, size: int) -> None:
    """``count`` adds of one entry each to ``ledger``, all in flight at once (so they
    group), entries ``first`` on; each acknowledged with its own id."""
    ids = await deadline(
        asyncio.gather(
            *(
                storage.bookie.add_entries(ledger, [payload(ledger, first + k, size)])
                for k in range(count)
            )
        )
    )
    assert ids == list(range(first, first + count))


def append(path: pathlib.Path, data: bytes) -> None:
    with path.open("ab") as tail:
        tail.write(data)


@pytest.mark.parametrize("direct", [True, False], ids=["direct-io", "page-cache"])
async def test_acknowledged_entries_whose_index_writes_were_lost_are_replayed(
    open_store: OpenStorage, lost_writes: LostIndexWrites, direct: bool
) -> None:
    settings = {
        "syncMode": "batch",
        "dbStorage_directIOEntryLogger": direct,
        "logSizeLimit": 64 * 1024,  # so the lost part spans several logs
    }
    storage = await open_store(**settings)
    bookie = storage.bookie
    ledger = await bookie.create_ledger()
    other = await bookie.create_ledger()
    await concurrent_adds(storage, ledger, 0, 10, 1000)
    lost_writes.lost = True
    log_before = disk_bookie(bookie).entry_log.current_log_id
    for round_ in range(6):
        await concurrent_adds(storage, ledger, 10 + 20 * round_, 20, 1000)
        assert await bookie.add_entries(other, [payload(other, round_, 3000)]) == round_
    assert lost_writes.dropped > 0
    assert disk_bookie(bookie).entry_log.current_log_id > log_before + 1
    assert not any(lost_writes.syncs), "batch writes the index without syncing its WAL"

    reopened = await reopen(storage, open_store, lost_writes, **settings)
    again = reopened.bookie
    assert await again.last_add_confirmed(ledger) == 129
    assert await again.get_last_entry_in_ledger(ledger) == 129
    assert await again.read_entries(ledger, 0, 129) == [
        payload(ledger, e, 1000) for e in range(130)
    ]
    assert await again.read_entries(other, 0, 5) == [payload(other, e, 3000) for e in range(6)]
    assert (await again.ledger_metadata(ledger)).length == 130 * 1000
    # ids go on from the replayed entries
    assert await again.add_entries(ledger, [b"next"]) == 130
    assert await again.add_entries(other, [b"next"]) == 6


async def test_a_clean_close_leaves_nothing_to_replay(
    open_store: OpenStorage, caplog: pytest.LogCaptureFixture
) -> None:
    storage = await open_store(syncMode="batch")
    ledger = await storage.bookie.create_ledger()
    await concurrent_adds(storage, ledger, 0, 30, 100)
    await storage.close()
    with caplog.at_level(logging.INFO, logger="storage_stub.bookie.disk"):
        reopened = await open_store(syncMode="batch")
    assert not [r for r in caplog.records if "replayed" in r.getMessage()]
    assert await reopened.bookie.read_entries(ledger, 0, 29) == [
        payload(ledger, e, 100) for e in range(30)
    ]


async def test_a_closed_ledger_is_replayed_up_to_its_last_entry_and_a_deleted_one_not_at_all(
    open_store: OpenStorage, lost_writes: LostIndexWrites
) -> None:
    storage = await open_store(syncMode="batch")
    bookie = storage.bookie
    closed = await bookie.create_ledger()
    deleted = await bookie.create_ledger()
    await concurrent_adds(storage, closed, 0, 5, 100)
    lost_writes.lost = True
    await concurrent_adds(storage, closed, 5, 5, 100)
    await concurrent_adds(storage, deleted, 0, 5, 100)
    assert await bookie.close_ledger(closed) == 9  # the close itself is durable
    await bookie.delete_ledger(deleted)

    reopened = await reopen(storage, open_store, lost_writes, syncMode="batch")
    again = reopened.bookie
    metadata = await again.ledger_metadata(closed)
    assert metadata.closed and metadata.last_entry_id == 9
    assert await again.read_entries(closed, 0, 9) == [payload(closed, e, 100) for e in range(10)]
    index = disk_bookie(again).index
    assert index.get_last_entry_in_ledger(closed) == 9
    assert index.get_last_entry_in_ledger(deleted) == -1  # not brought back by the replay
    assert index.find_runs(deleted, 0, 4) == ([], 0)


async def test_after_a_failed_group_the_next_index_write_is_synced_and_the_retry_replays(
    open_store: OpenStorage, lost_writes: LostIndexWrites, held_fsync: HeldFsync
) -> None:
    """The frames of a failed group stay in the log; the ids go back and the retry
    writes the same ids later in the log. The first index write after the failure is
    synced, so the replay point passes the failed frames for good: a crash after it
    replays only what follows the retry."""
    storage = await open_store(syncMode="batch", journalMaxGroupWaitMSec=0)
    bookie = storage.bookie
    ledger = await bookie.create_ledger()
    assert await bookie.add_entries(ledger, [b"durable-0"]) == 0

    held_fsync.hold = True
    held_fsync.fail = True
    failed = asyncio.ensure_future(bookie.add_entries(ledger, [b"lost-1", b"lost-2", b"lost-3"]))
    await eventually_async(held_fsync.waiting.is_set, "the held fsync")
    held_fsync.release()
    with pytest.raises(Exception, match="fsync"):
        await deadline(failed)

    lost_writes.syncs.clear()
    assert await bookie.add_entries(ledger, [b"retry-1"]) == 1
    assert lost_writes.syncs == [True]  # the first index write after the failure
    lost_writes.lost = True
    assert await bookie.add_entries(ledger, [b"after-2"]) == 2
    assert lost_writes.syncs == [True, False]  # and only that one

    reopened = await reopen(storage, open_store, lost_writes, syncMode="batch")
    again = reopened.bookie
    assert await again.last_add_confirmed(ledger) == 2
    assert await again.read_entries(ledger, 0, 2) == [b"durable-0", b"retry-1", b"after-2"]
    with pytest.raises(NoSuchEntryError):
        await again.read_entries(ledger, 3, 3)


async def test_replay_stops_at_a_torn_frame_and_a_new_index_is_rebuilt_from_every_log(
    open_store: OpenStorage, lost_writes: LostIndexWrites, tmp_path: pathlib.Path
) -> None:
    """The first index write of a new bookie lost (no replay point at all): the replay
    starts at the first log. A frame torn by the crash, after the acknowledged ones,
    is cut off, and nothing after it is indexed."""
    lost_writes.lost = True
    storage = await open_store(syncMode="batch", dbStorage_directIOEntryLogger=False)
    bookie = storage.bookie
    ledger = await bookie.create_ledger()
    await concurrent_adds(storage, ledger, 0, 8, 500)
    entry_log = disk_bookie(bookie).entry_log
    log_path = tmp_path / "data" / "entrylogs" / f"{entry_log.current_log_id}.log"
    await storage.close()
    # a torn frame after the acknowledged ones: the start of a frame of entry 8
    torn = Frame(ledger, 8, [payload(ledger, 8, 500)])
    torn.seal()
    append(log_path, bytes(torn.header) + payload(ledger, 8, 500)[:100])

    lost_writes.lost = False
    again = (await open_store(syncMode="batch")).bookie
    assert await again.last_add_confirmed(ledger) == 7
    assert await again.read_entries(ledger, 0, 7) == [payload(ledger, e, 500) for e in range(8)]
    assert await again.add_entries(ledger, [b"next"]) == 8


def test_a_replayed_frame_replaces_its_ledgers_locations_from_its_first_entry_on(
    tmp_path: pathlib.Path,
) -> None:
    """Frames of adds that failed, then the retry of the first with the same first id:
    the retry is what the index names, and the failed entries after it are gone."""
    index = EntryLocationIndex(tmp_path / "index")
    try:
        failed = [
            ScannedFrame(0, 40, 5, 1, 1, struct.pack(">I", 1)),
            ScannedFrame(40, 80, 5, 2, 2, struct.pack(">2I", 1, 1)),
        ]
        retry = ScannedFrame(100, 140, 5, 1, 1, struct.pack(">I", 7))
        other = ScannedFrame(200, 240, 6, 0, 1, struct.pack(">I", 2))
        end = FrameLocation(0, 240)
        frames = [(0, frame) for frame in (*failed, retry, other)]
        assert index.replay(frames, end) == 4
        assert index.get_last_entry_in_ledger(5) == 1
        runs, missing = index.find_runs(5, 1, 3)
        assert missing == 2 and [tuple(run.lengths) for run in runs] == [(7,)]
        assert index.get_last_entry_in_ledger(6) == 0
        assert index.replay_point() == end
    finally:
        index.close()


@pytest.mark.parametrize("direct", [True, False], ids=["direct-io", "page-cache"])
async def test_adds_that_failed_are_not_brought_back_by_the_replay(
    open_store: OpenStorage, held_fsync: HeldFsync, direct: bool
) -> None:
    """A failed group's frames are in the log, after the replay point: the bookie voids
    them before its next write or its close, so a reopen does not index an add that was
    answered with an error, and the next add takes their ids."""
    settings = {"syncMode": "batch", "dbStorage_directIOEntryLogger": direct}
    storage = await open_store(journalMaxGroupWaitMSec=0, **settings)
    bookie = storage.bookie
    ledger = await bookie.create_ledger()
    assert await bookie.add_entries(ledger, [b"durable-0"]) == 0
    held_fsync.hold = True
    held_fsync.fail = True
    failed = asyncio.ensure_future(bookie.add_entries(ledger, [b"failed-1", b"failed-2"]))
    await eventually_async(held_fsync.waiting.is_set, "the held fsync")
    held_fsync.release()
    with pytest.raises(StorageFaultError, match="fsync"):
        await deadline(failed)
    await storage.close()

    reopened = await open_store(**settings)
    again = reopened.bookie
    assert await again.last_add_confirmed(ledger) == 0
    with pytest.raises(NoSuchEntryError):
        await again.read_entries(ledger, 1, 1)
    assert await again.add_entries(ledger, [b"durable-1"]) == 1
    await reopened.close()
    third = (await open_store(**settings)).bookie
    assert await third.read_entries(ledger, 0, 1) == [b"durable-0", b"durable-1"]
    assert await third.last_add_confirmed(ledger) == 1


async def test_a_frame_past_a_hole_in_its_ledger_is_not_replayed(
    open_store: OpenStorage, lost_writes: LostIndexWrites, tmp_path: pathlib.Path
) -> None:
    """Frames after the replay point whose ids skip ahead of their ledger (the frames
    between lost or voided) were never acknowledged: the replay keeps the ledger's ids
    whole, indexing up to the hole, and the other ledgers' frames still."""
    storage = await open_store(syncMode="batch", dbStorage_directIOEntryLogger=False)
    bookie = storage.bookie
    ledger = await bookie.create_ledger()
    other = await bookie.create_ledger()
    await concurrent_adds(storage, ledger, 0, 3, 100)
    lost_writes.lost = True
    await concurrent_adds(storage, ledger, 3, 2, 100)
    log_id = disk_bookie(bookie).entry_log.current_log_id
    await storage.close()
    # frames as a crash could leave them: one of entry 7 (5 and 6 missing), then one of
    # the other ledger
    entry_log = tmp_path / "data" / "entrylogs" / f"{log_id}.log"
    for frame in (Frame(ledger, 7, [b"past-the-hole"]), Frame(other, 0, [b"other-0"])):
        frame.seal()
        append(entry_log, bytes(frame.header) + b"".join(frame.entries))

    again = (await reopen(storage, open_store, lost_writes, syncMode="batch")).bookie
    assert await again.last_add_confirmed(ledger) == 4
    assert await again.read_entries(ledger, 0, 4) == [payload(ledger, e, 100) for e in range(5)]
    assert await again.read_entries(other, 0, 0) == [b"other-0"]
    assert await again.add_entries(ledger, [b"next"]) == 5
