"""LedgerMetadataIndex: ledger records and a next ledger id that never goes back."""

from __future__ import annotations

import pathlib

from storage_stub.bookie.api import LedgerMetadata
from storage_stub.bookie.ledger_metadata import LedgerMetadataIndex
from storage_stub.bookie.rocks import open_rocks


def new_ledger(index: LedgerMetadataIndex) -> LedgerMetadata:
    ledger_id = index.allocate_ledger_id()
    metadata = LedgerMetadata(ledger_id, closed=False, last_entry_id=-1, length=0, created_ms=5)
    index.create(metadata, sync=True)
    return metadata


def test_ledgers_and_the_next_id_survive_reopening(tmp_path: pathlib.Path) -> None:
    db = open_rocks(tmp_path / "metadata")
    index = LedgerMetadataIndex(db)
    first = new_ledger(index)
    second = new_ledger(index)
    index.put(LedgerMetadata(second.ledger_id, True, 41, 4200, 5), sync=True)
    db.close()

    db = open_rocks(tmp_path / "metadata")
    reopened = LedgerMetadataIndex(db)
    assert reopened.load_all() == {
        first.ledger_id: first,
        second.ledger_id: LedgerMetadata(second.ledger_id, True, 41, 4200, 5),
    }
    assert reopened.allocate_ledger_id() == second.ledger_id + 1
    db.close()


def test_deleting_the_newest_ledger_does_not_free_its_id(tmp_path: pathlib.Path) -> None:
    db = open_rocks(tmp_path / "metadata")
    index = LedgerMetadataIndex(db)
    newest = new_ledger(index)
    index.delete(newest.ledger_id, sync=True)
    assert index.get(newest.ledger_id) is None
    db.close()

    db = open_rocks(tmp_path / "metadata")
    reopened = LedgerMetadataIndex(db)
    assert reopened.load_all() == {}
    assert reopened.allocate_ledger_id() == newest.ledger_id + 1
    db.close()


def test_records_of_other_owners_of_the_database_are_ignored(tmp_path: pathlib.Path) -> None:
    db = open_rocks(tmp_path / "metadata")
    db.put(b"Mmanaged-ledgers/x", b"not a ledger")
    index = LedgerMetadataIndex(db)
    metadata = new_ledger(index)
    assert index.load_all() == {metadata.ledger_id: metadata}
    db.close()
