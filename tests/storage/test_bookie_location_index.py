"""EntryLocationIndex: point and range lookups, floor seeks between ledgers, deletes."""

from __future__ import annotations

import pathlib
from collections.abc import Iterator

import pytest

from storage_stub.bookie.entry_log import EntryLocation
from storage_stub.bookie.location_index import EntryLocationIndex


@pytest.fixture
def index(tmp_path: pathlib.Path) -> Iterator[EntryLocationIndex]:
    opened = EntryLocationIndex(tmp_path / "index")
    yield opened
    opened.close()


def locations(count: int, log_id: int = 0, length: int = 10) -> list[EntryLocation]:
    return [EntryLocation(log_id, i * (length + 24), length) for i in range(count)]


def test_added_locations_are_found_one_by_one_and_by_range(index: EntryLocationIndex) -> None:
    index.add_locations([(4, 0, locations(3)), (5, 0, locations(2, log_id=1))], sync=True)
    assert index.get_location(4, 1) == EntryLocation(0, 34, 10)
    assert index.get_location(5, 1) == EntryLocation(1, 34, 10)
    assert index.get_location(4, 3) is None
    assert index.get_locations(4, 1, 3) == [
        EntryLocation(0, 34, 10),
        EntryLocation(0, 68, 10),
        None,
    ]


def test_floor_seek_stays_inside_the_ledger(index: EntryLocationIndex) -> None:
    index.add_locations([(3, 0, locations(5)), (5, 0, locations(2))], sync=False)
    assert index.get_last_entry_in_ledger(3) == 4
    assert index.get_last_entry_in_ledger(4) == -1  # ledger 3's keys sort just below
    assert index.get_last_entry_in_ledger(5) == 1
    assert index.get_last_entry_in_ledger(2) == -1  # nothing below at all
    assert index.get_last_entry_in_ledger(9) == -1
    assert index.floor_seeks == 5


def test_entry_ids_sort_numerically_not_textually(index: EntryLocationIndex) -> None:
    index.add_locations([(1, 0, locations(300))], sync=False)
    assert index.get_last_entry_in_ledger(1) == 299


def test_deleting_a_ledger_removes_only_its_locations(index: EntryLocationIndex) -> None:
    index.add_locations(
        [(6, 0, locations(4)), (7, 0, locations(4)), (8, 0, locations(1))], sync=False
    )
    index.delete_ledger(7, sync=True)
    assert index.get_location(7, 0) is None
    assert index.get_last_entry_in_ledger(7) == -1
    assert index.get_last_entry_in_ledger(6) == 3
    assert index.get_last_entry_in_ledger(8) == 0


def test_ledger_stats_count_entries_and_payload_bytes(index: EntryLocationIndex) -> None:
    index.add_locations(
        [(2, 0, locations(3, length=7)), (3, 0, locations(9, length=100))], sync=False
    )
    assert index.ledger_stats(2) == (3, 21)
    assert index.ledger_stats(3) == (9, 900)
    assert index.ledger_stats(4) == (0, 0)


def test_locations_survive_reopening(tmp_path: pathlib.Path) -> None:
    index = EntryLocationIndex(tmp_path / "index")
    index.add_locations([(1, 0, locations(2))], sync=True)
    index.close()
    reopened = EntryLocationIndex(tmp_path / "index")
    assert reopened.get_last_entry_in_ledger(1) == 1
    assert reopened.get_location(1, 0) == EntryLocation(0, 0, 10)
    reopened.close()
