"""Entry location index: (ledger id, first entry id of a frame) -> where the frame is.

RocksDB under ``<data>/index``. One key per entry-log frame, that is per add call. Key:
16 bytes big-endian (ledger id, first entry id), so one ledger's frames are adjacent and
ordered. Value (big-endian): entry log id u32, frame offset u64, count u32, then the
count payload lengths u32 exactly as in the frame header. The lengths let a read locate
entry k of a frame without reading the frame header, and let a ledger's size be recovered
from the index alone.

Entry e of a ledger is in the frame with the greatest key <= (ledger, e): a floor seek.

Every batch of frame locations also writes the replay point, under the key of ledger
2^64-1 (never allocated): the log and offset where the batch's last frame ends. RocksDB
recovers a prefix of its writes, so after a crash every frame before the replay point is
indexed, and the bookie indexes the frames after it again from the entry logs
(``replay``), as BookKeeper replays its journal into its ledger storage; this is what
lets syncMode=batch write the index without syncing its WAL (see disk.py).
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

from storage_stub.bookie.entry_log import EntryRun
from storage_stub.bookie.frame import (
    Frame,
    FrameLocation,
    ScannedFrame,
    lengths_struct,
    payloads_offset,
)
from storage_stub.bookie.rocks import RocksDatabase, write_options

_KEY = struct.Struct(">QQ")
_VALUE = struct.Struct(">IQI")  # log id, frame offset, count; the lengths follow
_MAX_ENTRY_ID = (1 << 63) - 1
#: Where the replay point lives: the key of a ledger id no bookie allocates (ids count
#: up from 0), after every real key, so no floor seek or ledger scan meets it.
_REPLAY_KEY = _KEY.pack((1 << 64) - 1, 0)
_POINT = struct.Struct(">IQ")  # log id, offset
#: Frames per write batch while replaying.
_REPLAY_BATCH_FRAMES = 4096
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

    __slots__ = ("_rocks", "floor_seeks", "indexed_end")

    def __init__(self, path: pathlib.Path, *, allow_read_only: bool = False) -> None:
        """Open (creating if missing) the index at ``path``; ``allow_read_only``: open it
        read-only when the disk is too full to open it read-write (see RocksDatabase)."""
        self._rocks = RocksDatabase(path, name="location index", allow_read_only=allow_read_only)
        #: Floor seeks made by get_last_entry_in_ledger since open.
        self.floor_seeks = 0
        #: Where the last frame indexed since open ends (the replay point this process
        #: wrote last); None until the first write or replay.
        self.indexed_end: FrameLocation | None = None

    @property
    def database(self) -> RocksDatabase:
        return self._rocks

    def add_frames(self, frames: Iterable[tuple[Frame, FrameLocation]], *, sync: bool) -> None:
        """Index every written frame, given in log order, in one atomic batch, with the
        replay point moved to the end of the last: O(frames + their entry counts) bytes
        copied, no per-entry work in Python."""
        batch = WriteBatch(raw_mode=True)
        pack_key = _KEY.pack
        pack_value = _VALUE.pack
        end: FrameLocation | None = None
        for frame, (log_id, offset) in frames:
            batch.put(
                pack_key(frame.ledger_id, frame.first_entry_id),
                pack_value(log_id, offset, frame.count) + frame.raw_lengths,
            )
            end = FrameLocation(log_id, offset + len(frame.header) + frame.payload_bytes)
        if end is not None:
            batch.put(_REPLAY_KEY, _POINT.pack(*end))
        rocks = self._rocks
        try:
            rocks.db.write(batch, _SYNC if sync else _NO_SYNC)
        except Exception as error:
            raise rocks.write_fault("addEntries", "location index write", error) from None
        if end is not None:
            self.indexed_end = end

    def replay_point(self) -> FrameLocation | None:
        """Where the frames not known to be indexed start: the end of the last frame
        indexed; None when no index write ever recorded one (an empty index, or one
        written by a brokerlab before the replay point, which synced every write)."""
        try:
            value = self._rocks.db.get(_REPLAY_KEY)
        except Exception as error:
            raise self._rocks.fault("open", "location index read", error) from None
        if value is None:
            return None
        log_id, offset = _POINT.unpack(value)
        return FrameLocation(log_id, offset)

    def is_empty(self) -> bool:
        """Whether the index holds no key at all. One seek."""
        try:
            iterator = self._rocks.db.iter()
            iterator.seek_to_first()
            return not iterator.valid()
        except Exception as error:
            raise self._rocks.fault("open", "location index read", error) from None

    def replay(self, frames: Iterable[tuple[int, ScannedFrame]], end: FrameLocation) -> int:
        """Index ``frames`` (log id, frame), read from the entry logs after the replay
        point, in log order, then move the replay point to ``end`` with a synced write;
        returns how many were indexed. A frame replaces every location of its ledger
        from its first entry on (a later frame with the same ids is a retry of adds
        that failed: the later one is what was acknowledged). Blocking: one write per
        4096 frames, O(frames + their entry counts)."""
        rocks = self._rocks
        indexed = 0
        batch = WriteBatch(raw_mode=True)
        try:
            for log_id, frame in frames:
                ledger_id = frame.ledger_id
                batch.delete_range(
                    _KEY.pack(ledger_id, frame.first_entry_id), _KEY.pack(ledger_id + 1, 0)
                )
                batch.put(
                    _KEY.pack(ledger_id, frame.first_entry_id),
                    _VALUE.pack(log_id, frame.offset, frame.entry_count) + frame.raw_lengths,
                )
                indexed += 1
                if indexed % _REPLAY_BATCH_FRAMES == 0:
                    rocks.db.write(batch, _NO_SYNC)
                    batch = WriteBatch(raw_mode=True)
            batch.put(_REPLAY_KEY, _POINT.pack(end.log_id, end.offset))
            rocks.db.write(batch, _SYNC)
        except Exception as error:
            raise rocks.write_fault("open", "location index replay", error) from None
        self.indexed_end = end
        return indexed

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
