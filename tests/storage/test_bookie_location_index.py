"""EntryLocationIndex: one key per frame, floor seeks to the frame of an entry, runs
spanning frames, floor seeks between ledgers, stats and deletes."""

from __future__ import annotations

import pathlib
from collections.abc import Iterator

import pytest

from storage_stub.bookie.entry_log import EntryRun
from storage_stub.bookie.frame import Frame, FrameLocation, payloads_offset
from storage_stub.bookie.location_index import EntryLocationIndex


@pytest.fixture
def index(tmp_path: pathlib.Path) -> Iterator[EntryLocationIndex]:
    opened = EntryLocationIndex(tmp_path / "index")
    yield opened
    opened.close()


def frame(ledger_id: int, first: int, count: int, length: int = 10) -> Frame:
    return Frame(ledger_id, first, [bytes([65 + i % 26]) * length for i in range(count)])


def test_one_frame_answers_for_each_of_its_entries(index: EntryLocationIndex) -> None:
    index.add_frames(
        [(frame(4, 0, 3), FrameLocation(0, 100)), (frame(5, 0, 2), FrameLocation(1, 0))],
        sync=True,
    )
    data = payloads_offset(100, 3)
    assert index.find_runs(4, 1, 1) == ([EntryRun(0, data + 10, (10,))], 2)
    assert index.find_runs(4, 0, 2) == ([EntryRun(0, data, (10, 10, 10))], 3)
    assert index.find_runs(5, 1, 1) == ([EntryRun(1, payloads_offset(0, 2) + 10, (10,))], 2)


def test_runs_span_frames_of_different_sizes_and_logs(index: EntryLocationIndex) -> None:
    index.add_frames(
        [
            (Frame(2, 0, [b"a", b"bb", b"ccc"]), FrameLocation(0, 0)),
            (Frame(2, 3, [b"dddd"]), FrameLocation(0, 500)),
            (Frame(3, 0, [b"other"]), FrameLocation(0, 600)),
            (Frame(2, 4, [b"e", b"ff"]), FrameLocation(1, 0)),
        ],
        sync=False,
    )
    runs, missing = index.find_runs(2, 1, 5)
    assert missing == 6
    assert runs == [
        EntryRun(0, payloads_offset(0, 3) + 1, (2, 3)),
        EntryRun(0, payloads_offset(500, 1), (4,)),
        EntryRun(1, payloads_offset(0, 2), (1, 2)),
    ]
    assert index.find_runs(2, 4, 4) == ([EntryRun(1, payloads_offset(0, 2), (1,))], 5)


def test_entries_not_indexed_are_reported_as_the_first_missing_id(
    index: EntryLocationIndex,
) -> None:
    index.add_frames(
        [(frame(3, 0, 4), FrameLocation(0, 0)), (frame(3, 6, 2), FrameLocation(0, 999))],
        sync=False,
    )
    assert index.find_runs(3, 2, 7)[1] == 4  # a gap between frames
    assert index.find_runs(3, 6, 9)[1] == 8  # past the last frame
    assert index.find_runs(3, 4, 4) == ([], 4)  # in the gap
    assert index.find_runs(4, 0, 0) == ([], 0)  # ledger 3 sorts just below
    assert index.find_runs(2, 0, 0) == ([], 0)  # nothing below at all


def test_floor_seek_finds_the_last_entry_of_the_last_frame_inside_the_ledger(
    index: EntryLocationIndex,
) -> None:
    index.add_frames(
        [
            (frame(3, 0, 2), FrameLocation(0, 0)),
            (frame(3, 2, 3), FrameLocation(0, 100)),
            (frame(5, 0, 2), FrameLocation(0, 200)),
        ],
        sync=False,
    )
    assert index.get_last_entry_in_ledger(3) == 4
    assert index.get_last_entry_in_ledger(4) == -1  # ledger 3's keys sort just below
    assert index.get_last_entry_in_ledger(5) == 1
    assert index.get_last_entry_in_ledger(2) == -1  # nothing below at all
    assert index.get_last_entry_in_ledger(9) == -1
    assert index.floor_seeks == 5


def test_entry_ids_sort_numerically_not_textually(index: EntryLocationIndex) -> None:
    index.add_frames(
        [(frame(1, first, 1), FrameLocation(0, first * 50)) for first in range(300)],
        sync=False,
    )
    assert index.get_last_entry_in_ledger(1) == 299
    runs, missing = index.find_runs(1, 250, 260)
    assert missing == 261
    assert [run.offset for run in runs] == [
        payloads_offset(first * 50, 1) for first in range(250, 261)
    ]


def test_deleting_a_ledger_removes_only_its_frames(index: EntryLocationIndex) -> None:
    index.add_frames(
        [
            (frame(6, 0, 4), FrameLocation(0, 0)),
            (frame(7, 0, 4), FrameLocation(0, 100)),
            (frame(7, 4, 4), FrameLocation(0, 200)),
            (frame(8, 0, 1), FrameLocation(0, 300)),
        ],
        sync=False,
    )
    index.delete_ledger(7, sync=True)
    assert index.find_runs(7, 0, 0) == ([], 0)
    assert index.get_last_entry_in_ledger(7) == -1
    assert index.get_last_entry_in_ledger(6) == 3
    assert index.get_last_entry_in_ledger(8) == 0


def test_ledger_stats_count_entries_and_payload_bytes(index: EntryLocationIndex) -> None:
    index.add_frames(
        [
            (frame(2, 0, 3, length=7), FrameLocation(0, 0)),
            (frame(3, 0, 5, length=100), FrameLocation(0, 100)),
            (Frame(3, 5, [b"x" * 100] * 3 + [b""]), FrameLocation(0, 900)),
        ],
        sync=False,
    )
    assert index.ledger_stats(2) == (3, 21)
    assert index.ledger_stats(3) == (9, 800)
    assert index.ledger_stats(4) == (0, 0)


def test_frames_survive_reopening(tmp_path: pathlib.Path) -> None:
    index = EntryLocationIndex(tmp_path / "index")
    index.add_frames([(frame(1, 0, 2), FrameLocation(0, 0))], sync=True)
    index.close()
    reopened = EntryLocationIndex(tmp_path / "index")
    assert reopened.get_last_entry_in_ledger(1) == 1
    assert reopened.find_runs(1, 0, 0) == ([EntryRun(0, payloads_offset(0, 2), (10,))], 1)
    reopened.close()
