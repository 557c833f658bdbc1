"""Entry location index: (ledger id, first entry id of a frame) -> where the frame is.

RocksDB under ``<data>/index``. One key per entry-log frame, that is per add call. Key:
16 bytes big-endian (ledger id, first entry id), so one ledger's frames are adjacent and
ordered. Value (big-endian): entry log id u32, frame offset u64, count u32, then the
count payload lengths u32 exactly as in the frame header. The lengths let a read locate
entry k of a frame without reading the frame header, and let a ledger's size be recovered
from the index alone.

Entry e of a ledger is in the frame with the greatest key <= (ledger, e): a floor seek.
Methods block (RocksDB calls); a synced write also fsyncs the WAL, so the bookie runs
writes on its writer thread. A RocksDB failure raises StorageFaultError (NoSpaceError
for a full disk) naming the operation; a failed write leaves ``database`` failed until
it is reopened (see rocks.RocksDatabase).
"""

from __future__ import annotations

import pathlib
import struct
from collections.abc import Iterable

from rocksdict import WriteBatch

from storage_stub.bookie.api import StorageFaultError, os_fault
from storage_stub.bookie.entry_log import EntryRun
from storage_stub.bookie.frame import Frame, FrameLocation, lengths_struct, payloads_offset
from storage_stub.bookie.rocks import RocksDatabase, WalFiles, write_options

_KEY = struct.Struct(">QQ")
_VALUE = struct.Struct(">IQI")  # log id, frame offset, count; the lengths follow
_MAX_ENTRY_ID = (1 << 63) - 1
_SYNC = write_options(sync=True)
_NO_SYNC = write_options(sync=False)


def location_key(ledger_id: int, first_entry_id: int) -> bytes:
    return _KEY.pack(ledger_id, first_entry_id)


class EntryLocationIndex:
    """RocksDB-backed frame locations.

    ``add_frames``: one WriteBatch with one put per frame. ``find_runs``: one floor seek,
    then one iterator step per further frame. ``get_last_entry_in_ledger``: one floor
    seek (counted in ``floor_seeks``). ``ledger_stats``: a scan over the ledger's frames.
    ``delete_ledger``: one range tombstone.
    """

    __slots__ = ("_rocks", "_wal", "floor_seeks")

    def __init__(self, path: pathlib.Path, *, allow_read_only: bool = False) -> None:
        """Open (creating if missing) the index at ``path``; ``allow_read_only``: open it
        read-only when the disk is too full to open it read-write (see RocksDatabase)."""
        self._rocks = RocksDatabase(path, name="location index", allow_read_only=allow_read_only)
        self._wal = WalFiles(path)
        #: Floor seeks made by get_last_entry_in_ledger since open.
        self.floor_seeks = 0

    @property
    def database(self) -> RocksDatabase:
        return self._rocks

    def add_frames(self, frames: Iterable[tuple[Frame, FrameLocation]], *, sync: bool) -> None:
        """Index every written frame in one atomic batch: O(frames + their entry counts)
        bytes copied, no per-entry work in Python."""
        batch = WriteBatch(raw_mode=True)
        pack_key = _KEY.pack
        pack_value = _VALUE.pack
        for frame, (log_id, offset) in frames:
            batch.put(
                pack_key(frame.ledger_id, frame.first_entry_id),
                pack_value(log_id, offset, frame.count) + frame.raw_lengths,
            )
        rocks = self._rocks
        try:
            rocks.db.write(batch, _SYNC if sync else _NO_SYNC)
        except Exception as error:
            raise rocks.write_fault("addEntries", "location index write", error) from None

    def wal_due(self) -> list[int]:
        """The descriptors whose fsync makes every index write so far durable (see
        rocks.WalFiles): for ``add_frames(..., sync=False)`` followed by those fsyncs off
        the loop, which is what ``sync=True`` does without holding the GIL through the
        fsync. Call again only once the last call's fsyncs are done. StorageFaultError
        if the files cannot be listed or opened."""
        try:
            return self._wal.due()
        except OSError as error:
            raise os_fault("addEntries", "location index WAL listing", error) from None

    def wal_sync_failed(self, error: OSError) -> StorageFaultError:
        """What a failed fsync of ``wal_due``'s descriptors raises; the database is
        marked failed, as RocksDB marks itself after a failed synced write (what was
        written may be lost, so nothing more is written until it is reopened)."""
        fault = os_fault("addEntries", "location index WAL fsync", error)
        self._rocks.failed = fault.detail
        return fault

    def find_runs(self, ledger_id: int, first: int, last: int) -> tuple[list[EntryRun], int]:
        """The entries ``first..last`` (first <= last) as runs, one per frame, in order,
        and the first of those ids not indexed (``last + 1`` when every one is).

        Cost: one floor seek, one iterator step per further frame, one unpack of each
        frame's lengths.
        """
        try:
            return self._find_runs(ledger_id, first, last)
        except Exception as error:
            raise self._rocks.fault("readEntries", "location index read", error) from None

    def _find_runs(self, ledger_id: int, first: int, last: int) -> tuple[list[EntryRun], int]:
        runs: list[EntryRun] = []
        iterator = self._rocks.db.iter()
        iterator.seek_for_prev(_KEY.pack(ledger_id, first))
        if not iterator.valid():
            return runs, first
        wanted = first
        unpack_key = _KEY.unpack
        unpack_value = _VALUE.unpack_from
        while wanted <= last:
            found_ledger_id, frame_first = unpack_key(iterator.key())
            if found_ledger_id != ledger_id or frame_first > wanted:
                break
            value = iterator.value()
            log_id, offset, count = unpack_value(value)
            skip = wanted - frame_first
            if skip >= count:
                break
            take = min(count, last - frame_first + 1)
            lengths = lengths_struct(count).unpack_from(value, _VALUE.size)
            start = payloads_offset(offset, count) + sum(lengths[:skip])
            runs.append(EntryRun(log_id, start, lengths[skip:take]))
            wanted = frame_first + take
            if wanted > last:
                break
            iterator.next()
            if not iterator.valid():
                break
        return runs, wanted

    def get_last_entry_in_ledger(self, ledger_id: int) -> int:
        """Floor seek: the greatest entry id stored for the ledger, -1 when it has none.
        One RocksDB seek_for_prev to (ledger id, 2^63-1); the frame found holds it last."""
        self.floor_seeks += 1
        try:
            iterator = self._rocks.db.iter()
            iterator.seek_for_prev(_KEY.pack(ledger_id, _MAX_ENTRY_ID))
            if not iterator.valid():
                return -1
            key = iterator.key()
            value = iterator.value()
        except Exception as error:
            raise self._rocks.fault("getLastEntry", "location index seek", error) from None
        found_ledger_id, frame_first = _KEY.unpack(key)
        if found_ledger_id != ledger_id:
            return -1
        count: int = _VALUE.unpack_from(value)[2]
        return frame_first + count - 1

    def ledger_stats(self, ledger_id: int) -> tuple[int, int]:
        """``(entry count, payload bytes)`` of the ledger: a scan, O(entries of the ledger)."""
        try:
            return self._ledger_stats(ledger_id)
        except Exception as error:
            raise self._rocks.fault("getLastEntry", "location index scan", error) from None

    def _ledger_stats(self, ledger_id: int) -> tuple[int, int]:
        count = 0
        length = 0
        iterator = self._rocks.db.iter()
        iterator.seek(_KEY.pack(ledger_id, 0))
        end = _KEY.pack(ledger_id + 1, 0)
        while iterator.valid():
            if iterator.key() >= end:
                break
            value = iterator.value()
            frame_count = _VALUE.unpack_from(value)[2]
            count += frame_count
            length += sum(lengths_struct(frame_count).unpack_from(value, _VALUE.size))
            iterator.next()
        return count, length

    def delete_ledger(self, ledger_id: int, *, sync: bool) -> None:
        """Remove every frame location of the ledger with one range delete."""
        rocks = self._rocks
        try:
            rocks.db.delete_range(
                _KEY.pack(ledger_id, 0), _KEY.pack(ledger_id + 1, 0), _SYNC if sync else _NO_SYNC
            )
        except Exception as error:
            raise rocks.write_fault("deleteLedger", "location index delete", error) from None

    def flush(self) -> None:
        """Blocking: flush the memtable to SST files."""
        rocks = self._rocks
        try:
            rocks.db.flush()
        except Exception as error:
            raise rocks.write_fault("flush", "location index flush", error) from None

    def close(self, *, flush: bool = True) -> None:
        """Flush (unless ``flush`` is false: a full disk) and close; never raises (a
        failure is logged: the WAL has every write)."""
        self._rocks.close(flush=flush)
        self._wal.close()
