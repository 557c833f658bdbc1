"""Entry location index: (ledger id, entry id) -> where the entry's record is.

RocksDB under ``<data>/index``. Key: 16 bytes big-endian (ledger id, entry id), so one
ledger's entries are adjacent and ordered. Value: 16 bytes big-endian (entry log id u32,
record offset u64, payload length u32); the length saves a header read per entry and
lets a ledger's size be recovered from the index alone.

Methods block (RocksDB calls); a synced write also fsyncs the WAL, so the bookie runs
those on a thread.
"""

from __future__ import annotations

import pathlib
import struct
from collections.abc import Iterable, Sequence
from typing import cast

from rocksdict import Rdict, WriteBatch

from storage_stub.bookie.entry_log import EntryLocation
from storage_stub.bookie.rocks import open_rocks, write_options

#: What rocksdict accepts as a key (this index only ever passes bytes).
_RocksKey = str | int | float | bytes | bool
_KEY = struct.Struct(">QQ")
_VALUE = struct.Struct(">IQI")
_MAX_ENTRY_ID = (1 << 63) - 1
_SYNC = write_options(sync=True)
_NO_SYNC = write_options(sync=False)


def location_key(ledger_id: int, entry_id: int) -> bytes:
    return _KEY.pack(ledger_id, entry_id)


class EntryLocationIndex:
    """RocksDB-backed locations. ``get_location``: one point lookup. ``get_locations``: one
    multi-get. ``add_locations``: one WriteBatch. ``get_last_entry_in_ledger``: one floor
    seek (counted in ``floor_seeks``). ``delete_ledger``: one range tombstone."""

    __slots__ = ("_db", "floor_seeks")

    def __init__(self, path: pathlib.Path) -> None:
        self._db: Rdict = open_rocks(path)
        #: Floor seeks made by get_last_entry_in_ledger since open.
        self.floor_seeks = 0

    def get_location(self, ledger_id: int, entry_id: int) -> EntryLocation | None:
        value = self._db.get(_KEY.pack(ledger_id, entry_id))
        return None if value is None else EntryLocation._make(_VALUE.unpack(value))

    def get_locations(self, ledger_id: int, first: int, last: int) -> list[EntryLocation | None]:
        """Locations of ``first..last`` (None where missing), with one multi-get."""
        pack = _KEY.pack
        keys: list[_RocksKey] = [pack(ledger_id, entry_id) for entry_id in range(first, last + 1)]
        values = cast(list[bytes | None], self._db.get(keys))
        unpack = _VALUE.unpack
        make = EntryLocation._make
        return [None if value is None else make(unpack(value)) for value in values]

    def add_locations(
        self,
        runs: Iterable[tuple[int, int, Sequence[EntryLocation]]],
        *,
        sync: bool,
    ) -> None:
        """Index every ``(ledger id, first entry id, locations)`` run in one atomic batch."""
        batch = WriteBatch(raw_mode=True)
        pack_key = _KEY.pack
        pack_value = _VALUE.pack
        for ledger_id, first_entry_id, locations in runs:
            entry_id = first_entry_id
            for log_id, offset, length in locations:
                batch.put(pack_key(ledger_id, entry_id), pack_value(log_id, offset, length))
                entry_id += 1
        self._db.write(batch, _SYNC if sync else _NO_SYNC)

    def get_last_entry_in_ledger(self, ledger_id: int) -> int:
        """Floor seek: the greatest entry id stored for the ledger, -1 when it has none.
        One RocksDB seek_for_prev to (ledger id, 2^63-1)."""
        self.floor_seeks += 1
        iterator = self._db.iter()
        iterator.seek_for_prev(_KEY.pack(ledger_id, _MAX_ENTRY_ID))
        if not iterator.valid():
            return -1
        found_ledger_id, entry_id = _KEY.unpack(iterator.key())
        return entry_id if found_ledger_id == ledger_id else -1

    def ledger_stats(self, ledger_id: int) -> tuple[int, int]:
        """``(entry count, payload bytes)`` of the ledger: a scan, O(entries of the ledger)."""
        count = 0
        length = 0
        iterator = self._db.iter()
        iterator.seek(_KEY.pack(ledger_id, 0))
        end = _KEY.pack(ledger_id + 1, 0)
        while iterator.valid():
            if iterator.key() >= end:
                break
            count += 1
            length += _VALUE.unpack(iterator.value())[2]
            iterator.next()
        return count, length

    def delete_ledger(self, ledger_id: int, *, sync: bool) -> None:
        """Remove every location of the ledger with one range delete."""
        self._db.delete_range(
            _KEY.pack(ledger_id, 0), _KEY.pack(ledger_id + 1, 0), _SYNC if sync else _NO_SYNC
        )

    def flush(self) -> None:
        """Blocking: flush the memtable to SST files."""
        self._db.flush()

    def close(self) -> None:
        self._db.close()
