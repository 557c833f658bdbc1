"""Append-only entry log files ``entrylogs/<n>.log``: where entry payloads live.

Record layout (big-endian)::

    ledger id u64 | entry id i64 | payload length u32 | crc32 u32 | payload

The CRC covers the first 20 header bytes and the payload, so a torn or zero-filled tail
never parses as a record. Records of one ``append`` are contiguous and written with one
``pwrite``: they are in the OS page cache (readable, and surviving a process kill) when
``append`` returns, durable only after ``sync``. The location index, not the log, says
which records were acknowledged; recovery only cuts a torn tail off the last log.

All methods block (file I/O): the bookie calls ``sync`` and ``fsync_all`` from a thread.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import struct
import zlib
from collections.abc import Iterable, Sequence
from typing import NamedTuple

from storage_stub.bookie.api import StorageFaultError

_PREFIX = struct.Struct(">QqI")
_CRC = struct.Struct(">I")
#: Bytes of header in front of every payload.
HEADER_SIZE = _PREFIX.size + _CRC.size
#: Contiguous records are read with one pread while the span stays under this size.
MAX_GROUPED_READ_BYTES = 256 * 1024
_RECOVERY_CHUNK_BYTES = 4 * 1024 * 1024


class EntryLocation(NamedTuple):
    """Where one entry's record starts, and its payload length."""

    log_id: int
    offset: int
    length: int


def encode_record_into(
    buffer: bytearray, position: int, ledger_id: int, entry_id: int, payload: bytes
) -> int:
    """Write one record at ``position`` of ``buffer`` (pre-sized); return the next position."""
    length = len(payload)
    _PREFIX.pack_into(buffer, position, ledger_id, entry_id, length)
    crc = zlib.crc32(payload, zlib.crc32(memoryview(buffer)[position : position + _PREFIX.size]))
    _CRC.pack_into(buffer, position + _PREFIX.size, crc)
    start = position + HEADER_SIZE
    buffer[start : start + length] = payload
    return start + length


def valid_prefix_length(fd: int, size: int) -> int:
    """Length of the longest prefix of the file made of whole records with good CRCs.

    Cost: reads the file once in 4 MiB chunks and CRCs every byte: O(size).
    """
    position = 0
    chunk = b""
    chunk_start = 0
    while position + HEADER_SIZE <= size:
        if position + HEADER_SIZE > chunk_start + len(chunk):
            chunk_start = position
            chunk = os.pread(fd, min(_RECOVERY_CHUNK_BYTES, size - position), position)
        relative = position - chunk_start
        _ledger_id, _entry_id, length = _PREFIX.unpack_from(chunk, relative)
        (crc,) = _CRC.unpack_from(chunk, relative + _PREFIX.size)
        end = position + HEADER_SIZE + length
        if end > size:
            break
        if end > chunk_start + len(chunk):
            chunk_start = position
            chunk = os.pread(fd, max(_RECOVERY_CHUNK_BYTES, end - position), position)
            relative = 0
        view = memoryview(chunk)
        payload_start = relative + HEADER_SIZE
        expected = zlib.crc32(
            view[payload_start : payload_start + length],
            zlib.crc32(view[relative : relative + _PREFIX.size]),
        )
        if expected != crc:
            break
        position = end
    return position


class EntryLogger:
    """The entry log files of one data directory; appends go to the newest.

    ``append``: one buffer build + one pwrite, O(batch bytes). ``read``: one pread.
    ``read_many``: one pread per run of contiguous records (up to 256 KiB), else one each.
    """

    __slots__ = (
        "_broken",
        "_current_fd",
        "_current_id",
        "_directory",
        "_directory_fd",
        "_fds",
        "_size_limit",
        "_unsynced",
        "_write_offset",
    )

    def __init__(self, directory: pathlib.Path, size_limit: int) -> None:
        """Open (creating if needed) the logs under ``directory``; cut a torn tail off
        the newest one. Cost: O(size of the newest log) for the tail check."""
        self._directory = directory
        self._size_limit = size_limit
        self._fds: dict[int, int] = {}
        self._unsynced: set[int] = set()
        self._broken: OSError | None = None
        directory.mkdir(parents=True, exist_ok=True)
        self._directory_fd = os.open(directory, os.O_RDONLY)
        try:
            log_ids = sorted(
                int(path.stem) for path in directory.glob("*.log") if path.stem.isdigit()
            )
            for log_id in log_ids[:-1]:
                self._fds[log_id] = os.open(self._path(log_id), os.O_RDONLY)
            if log_ids:
                self._current_id = log_ids[-1]
                self._current_fd = os.open(self._path(self._current_id), os.O_RDWR)
                self._fds[self._current_id] = self._current_fd
                self._write_offset = self._truncate_torn_tail(self._current_fd)
            else:
                self._current_id = -1
                self._current_fd = -1
                self._write_offset = 0
                self._start_log(0)
        except BaseException:
            self.close()
            raise

    def _path(self, log_id: int) -> pathlib.Path:
        return self._directory / f"{log_id}.log"

    @staticmethod
    def _truncate_torn_tail(fd: int) -> int:
        size = os.fstat(fd).st_size
        valid = valid_prefix_length(fd, size)
        if valid < size:
            os.ftruncate(fd, valid)
            os.fsync(fd)
        return valid

    def _start_log(self, log_id: int) -> None:
        fd = os.open(self._path(log_id), os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        self._fds[log_id] = fd
        self._current_id = log_id
        self._current_fd = fd
        self._write_offset = 0
        # The new file's directory entry must be durable with the first records in it.
        self._unsynced.add(self._directory_fd)

    @property
    def current_log_id(self) -> int:
        return self._current_id

    @property
    def write_offset(self) -> int:
        """Size of the current log: where the next record goes."""
        return self._write_offset

    def append(
        self, ledger_id: int, first_entry_id: int, entries: Sequence[bytes]
    ) -> list[EntryLocation]:
        """Write ``entries`` as contiguous records (rolling to a new log first when the
        current one would pass the size limit) and return their locations.

        All or nothing: a failed write is cut off again and raises StorageFaultError.
        """
        if self._broken is not None:
            raise StorageFaultError("addEntries", f"entry log unusable: {self._broken}")
        total = 0
        for payload in entries:
            total += HEADER_SIZE + len(payload)
        if self._write_offset > 0 and self._write_offset + total > self._size_limit:
            try:
                self._start_log(self._current_id + 1)
            except OSError as error:
                raise StorageFaultError("addEntries", f"cannot roll entry log: {error}") from None
        buffer = bytearray(total)
        log_id = self._current_id
        start = self._write_offset
        locations: list[EntryLocation] = []
        position = 0
        entry_id = first_entry_id
        for payload in entries:
            locations.append(EntryLocation(log_id, start + position, len(payload)))
            position = encode_record_into(buffer, position, ledger_id, entry_id, payload)
            entry_id += 1
        self._write_all(buffer, start)
        self._write_offset = start + total
        self._unsynced.add(self._current_fd)
        return locations

    def _write_all(self, buffer: bytearray, offset: int) -> None:
        fd = self._current_fd
        view = memoryview(buffer)
        written = 0
        try:
            while written < len(buffer):
                written += os.pwrite(fd, view[written:], offset + written)
        except OSError as error:
            try:
                os.ftruncate(fd, offset)
            except OSError as truncate_error:
                self._broken = truncate_error
            raise StorageFaultError("addEntries", f"entry log write failed: {error}") from None

    def _fd(self, log_id: int) -> int:
        fd = self._fds.get(log_id)
        if fd is None:
            raise StorageFaultError("readEntries", f"entry log {log_id} does not exist")
        return fd

    def _pread(self, log_id: int, length: int, offset: int) -> bytes:
        try:
            data = os.pread(self._fd(log_id), length, offset)
        except OSError as error:
            raise StorageFaultError("readEntries", f"entry log read failed: {error}") from None
        if len(data) != length:
            raise StorageFaultError(
                "readEntries", f"entry log {log_id} is short at offset {offset}"
            )
        return data

    def read(self, location: EntryLocation) -> bytes:
        """The payload at ``location``: one pread, one allocation."""
        return self._pread(location.log_id, location.length, location.offset + HEADER_SIZE)

    def read_many(self, locations: Sequence[EntryLocation]) -> list[bytes]:
        """Payloads at ``locations``, in order. Contiguous records of one log are read with
        one pread while the span stays under MAX_GROUPED_READ_BYTES (one copy per payload
        out of it); others one pread each."""
        payloads: list[bytes] = []
        count = len(locations)
        i = 0
        while i < count:
            first = locations[i]
            end = first.offset + HEADER_SIZE + first.length
            j = i + 1
            while j < count:
                location = locations[j]
                if location.log_id != first.log_id or location.offset != end:
                    break
                next_end = end + HEADER_SIZE + location.length
                if next_end - first.offset > MAX_GROUPED_READ_BYTES:
                    break
                end = next_end
                j += 1
            if j == i + 1:
                payloads.append(self.read(first))
            else:
                span = self._pread(first.log_id, end - first.offset, first.offset)
                base = first.offset - HEADER_SIZE
                for k in range(i, j):
                    location = locations[k]
                    start = location.offset - base
                    payloads.append(span[start : start + location.length])
            i = j
        return payloads

    def take_unsynced(self) -> list[int]:
        """File descriptors written since the last sync (call on the loop thread); hand
        them to ``fsync_all`` and give them back with ``restore_unsynced`` on failure."""
        fds = list(self._unsynced)
        self._unsynced.clear()
        return fds

    def restore_unsynced(self, fds: Iterable[int]) -> None:
        self._unsynced.update(fds)

    @staticmethod
    def fsync_all(fds: Iterable[int]) -> None:
        """Blocking: fsync each descriptor. Thread-safe."""
        for fd in fds:
            os.fsync(fd)

    def sync(self) -> None:
        """Blocking: make every appended record durable."""
        fds = self.take_unsynced()
        try:
            self.fsync_all(fds)
        except BaseException:
            self.restore_unsynced(fds)
            raise

    def close(self) -> None:
        """Release the descriptors (no fsync: call ``sync`` first for durability)."""
        for fd in self._fds.values():
            with contextlib.suppress(OSError):
                os.close(fd)
        self._fds.clear()
        self._unsynced.clear()
        if self._directory_fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self._directory_fd)
            self._directory_fd = -1
