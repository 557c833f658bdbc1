"""Append-only entry log files ``entrylogs/<n>.log``: where entry payloads live.

One frame per add call (big-endian)::

    crc32 u32 | ledger id u64 | first entry id i64 | count u32 | payload bytes u64
    | count x payload length u32 | payload 1 | ... | payload count

The CRC covers everything after itself. A frame is valid only if its count is at least
1, its lengths add up to its payload bytes, it ends inside the file and its CRC matches,
so a torn tail and the zeros of a preallocated tail never parse as a frame.

Two write paths give the same file contents:

- through the page cache: a frame is written with one ``pwritev`` of [header, payload 1,
  ...], no copy of the payloads;
- direct I/O (``direct_io``): the frames of a group are copied into one reused,
  page-aligned buffer and written with one O_DIRECT ``pwrite`` from the start of the
  partly filled last block (its bytes written again, unchanged, so a torn rewrite leaves
  them as they were) to the next block boundary (zeros after the last frame, like a
  preallocated tail; the next group overwrites them). No page-cache page is filled, and
  filling them was what a write cost most on the machine brokerlab is tuned on.
  ``plan_direct`` and ``finish_direct`` run on the caller's thread; the copy, the CRCs
  and the pwrite (``DirectWrite.execute``, or the compiled writer thread of
  ``direct_writer``) may run on another. Reads go through the page cache
  on either path.

A written frame survives a process kill, and is durable only after ``sync``. Files grow
in preallocated steps of up to PREALLOCATE_BYTES, so a write does not pay for growing the
file; ``close`` trims the unused preallocation (and the direct path's padding). A step
never takes more than ``preallocation_budget``, which the bookie's disk monitor sets so that
preallocation never fills the disk: with no budget left a write grows the file by itself,
and a fallocate that fails gives back what it took. Recovery cuts the newest log back to
its last valid frame; ``frames_from`` reads the frames written after the location index's
replay point, which the bookie indexes again (the logs are its journal, see disk.py).
Failed writes, rolls and fsyncs raise StorageFaultError (NoSpaceError when the disk is
full).

Blocking file I/O throughout: ``Frame`` building and reads run on the event loop;
page-cache writes in sync modes always and batch and ``sync`` on the bookie's writer
thread; the direct path's copies, CRCs and pwrites on the compiled writer thread (else
the copy on the loop, the rest on the writer thread).
"""

from __future__ import annotations

import contextlib
import errno
import mmap
import os
import pathlib
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from typing import NamedTuple, NoReturn

from storage_stub.bookie.api import NO_SPACE_ERRNOS, StorageFaultError, os_fault
from storage_stub.bookie.direct_io import DIRECT_IO_ALIGNMENT, MAX_DIRECT_WRITE_BYTES, DirectWrite
from storage_stub.bookie.frame import (
    FRAME_HEADER_SIZE,
    Frame,
    FrameLocation,
    ScannedFrame,
    copy_frame,
    scan_frames,
    valid_prefix_length,
)

#: Nearby runs of one log are read with one pread while the span stays under this size.
MAX_GROUPED_READ_BYTES = 256 * 1024
#: Entry log files grow in steps of this size (capped by the log size limit).
PREALLOCATE_BYTES = 64 * 1024 * 1024
_IOV_MAX = 1024
_ZEROS = bytes(DIRECT_IO_ALIGNMENT)
#: posix_fallocate errors meaning "not supported here": writes then grow the file.
_NO_FALLOCATE = frozenset((errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL))
#: Names the log format, so logs of another format are refused, never cut as torn.
FORMAT_FILE = "FORMAT"
FORMAT = b"brokerlab entry log: one frame per add, v1\n"


class EntryRun(NamedTuple):
    """Consecutive entries of one frame: the log, where the first payload starts, and
    every payload's length in entry order."""

    log_id: int
    offset: int
    lengths: Sequence[int]


class EntryLogger:
    """The entry log files of one data directory; frames go to the newest.

    ``write``: one pwritev per frame (plus a fallocate per 64 MiB), O(frame count +
    frame bytes copied by the kernel); with direct I/O, ``write_group``: one memcpy per
    frame into the aligned buffer and one pwrite per group and log. ``read_runs``: one
    pread per group of nearby runs (up to 256 KiB), one copy per payload out of it.
    """

    __slots__ = (
        "_allocated",
        "_broken",
        "_buffer",
        "_current_fd",
        "_current_id",
        "_direct_fd",
        "_directory",
        "_directory_fd",
        "_fds",
        "_size_limit",
        "_tail",
        "_unprobed",
        "_unsynced",
        "_write_offset",
        "direct_io",
        "preallocation_budget",
    )

    def __init__(self, directory: pathlib.Path, size_limit: int, direct_io: bool = False) -> None:
        """Open (creating if needed) the logs under ``directory``; cut the newest one back
        to its last valid frame. Cost: O(size of the newest log) for that check.

        ``direct_io`` asks for ``write_group`` to write with O_DIRECT; where the file
        system refuses O_DIRECT the logger writes through the page cache and
        ``direct_io`` reads False."""
        self._directory = directory
        self._size_limit = size_limit
        self.direct_io = direct_io and hasattr(os, "O_DIRECT")
        self._direct_fd = -1
        #: The written bytes of the current log's last, partly filled block (direct I/O
        #: rewrites that block with the next group, as O_DIRECT writes whole blocks).
        self._tail = b""
        self._buffer: mmap.mmap | None = None
        self._fds: dict[int, int] = {}
        self._unsynced: set[int] = set()
        self._broken: OSError | None = None
        #: the direct-I/O probe found no block to write (a full disk): O_DIRECT is trusted
        #: until the first direct write, which turns it off if the file system refuses it
        self._unprobed = False
        #: bytes preallocation may still take (None: no limit); set by the disk monitor
        self.preallocation_budget: int | None = None
        self._directory_fd = -1
        directory.mkdir(parents=True, exist_ok=True)
        self._directory_fd = os.open(directory, os.O_RDONLY)
        try:
            log_ids = sorted(
                int(path.stem) for path in directory.glob("*.log") if path.stem.isdigit()
            )
            self._check_format(bool(log_ids))
            for log_id in log_ids[:-1]:
                self._fds[log_id] = os.open(self._path(log_id), os.O_RDONLY)
            if log_ids:
                self._current_id = log_ids[-1]
                self._current_fd = os.open(self._path(self._current_id), os.O_RDWR)
                self._fds[self._current_id] = self._current_fd
                self._write_offset = self._truncate_torn_tail(self._current_fd)
                self._allocated = self._write_offset
                self._open_direct()
            else:
                self._current_id = -1
                self._current_fd = -1
                self._write_offset = 0
                self._allocated = 0
                self._start_log(0)
        except BaseException:
            self.close()
            raise

    def _check_format(self, has_logs: bool) -> None:
        """Refuse logs of another format (ValueError); mark a new directory as ours."""
        marker = self._directory / FORMAT_FILE
        if marker.exists():
            if marker.read_bytes() != FORMAT:
                raise ValueError(f"{self._directory}: entry logs of an unknown format")
        elif has_logs:
            raise ValueError(
                f"{self._directory}: entry logs of an older brokerlab (one record per entry); "
                "this version reads only its own format: use a new data directory"
            )
        else:
            fd = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                os.write(fd, FORMAT)
                os.fsync(fd)
            finally:
                os.close(fd)

    def _path(self, log_id: int) -> pathlib.Path:
        return self._directory / f"{log_id}.log"

    @staticmethod
    def _truncate_torn_tail(fd: int) -> int:
        """Cut everything after the last valid frame (a torn frame, preallocated zeros)."""
        size = os.fstat(fd).st_size
        valid = valid_prefix_length(fd, size)
        if valid < size:
            os.ftruncate(fd, valid)
            os.fsync(fd)
        return valid

    def _start_log(self, log_id: int) -> None:
        fd = os.open(self._path(log_id), os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        self._trim_preallocation()
        self._fds[log_id] = fd
        self._current_id = log_id
        self._current_fd = fd
        self._write_offset = 0
        self._allocated = 0
        # The new file's directory entry must be durable with the first frames in it.
        self._unsynced.add(self._directory_fd)
        self._open_direct()

    def _open_direct(self) -> None:
        """Open the current log a second time for O_DIRECT writes (the first descriptor
        serves reads, truncation and fsync), load its partly written last block and
        write that block back as a probe (the same bytes; zeros after them, cut off
        again). Turns direct I/O off for good where the file system refuses O_DIRECT or
        its alignment."""
        if self._direct_fd >= 0:
            os.close(self._direct_fd)
            self._direct_fd = -1
        self._tail = b""
        self._unprobed = False
        if not self.direct_io:
            return
        path = str(self._path(self._current_id))
        try:
            self._direct_fd = os.open(path, os.O_WRONLY | os.O_DIRECT)
        except OSError as error:
            if error.errno != errno.EINVAL:
                raise
            self.direct_io = False
            return
        partial = self._write_offset % DIRECT_IO_ALIGNMENT
        start = self._write_offset - partial
        if partial:
            self._tail = os.pread(self._current_fd, partial, start)
        size = os.fstat(self._current_fd).st_size
        probe = self._aligned_buffer(DIRECT_IO_ALIGNMENT)
        probe[:partial] = self._tail
        probe[partial:DIRECT_IO_ALIGNMENT] = _ZEROS[: DIRECT_IO_ALIGNMENT - partial]
        try:
            with memoryview(probe) as view:
                os.pwrite(self._direct_fd, view[:DIRECT_IO_ALIGNMENT], start)
        except OSError as error:
            if error.errno in NO_SPACE_ERRNOS:
                # A full disk has no block for the probe (a start-up on a full disk).
                self._unprobed = True
            elif error.errno != errno.EINVAL:
                raise
            else:
                self._stop_direct()
                return
        if start + DIRECT_IO_ALIGNMENT > size:
            os.ftruncate(self._current_fd, size)  # the probe's zeros grew the file

    def _stop_direct(self) -> None:
        """Write through the page cache from now on (the file system refuses O_DIRECT)."""
        if self._direct_fd >= 0:
            os.close(self._direct_fd)
            self._direct_fd = -1
        self._tail = b""
        self._unprobed = False
        self.direct_io = False

    def _trim_preallocation(self) -> None:
        """Give back the unused preallocated tail of the current log."""
        if self._current_fd >= 0 and self._allocated > self._write_offset:
            with contextlib.suppress(OSError):
                os.ftruncate(self._current_fd, self._write_offset)
            self._allocated = self._write_offset

    def _preallocate(self, end: int) -> None:
        """Make sure the current log has blocks up to ``end``: one fallocate of up to
        PREALLOCATE_BYTES (never past the size limit unless one frame needs it) and never
        more than ``preallocation_budget``; when that leaves less than ``end``, no
        fallocate: the write grows the file by itself. Cost: an fstat and a fallocate."""
        start = self._allocated
        target = max(end, min(start + PREALLOCATE_BYTES, self._size_limit))
        budget = self.preallocation_budget
        if budget is not None and target - start > budget:
            target = start + budget
            if target < end:
                self._allocated = end  # what the write itself allocates
                return
        fallocate = getattr(os, "posix_fallocate", None)
        if fallocate is not None:
            fd = self._current_fd
            size = os.fstat(fd).st_size
            try:
                fallocate(fd, start, target - start)
            except OSError as error:
                if error.errno not in _NO_FALLOCATE:
                    # No room, say: ext4 keeps the blocks (and the size) a failed
                    # fallocate got, so give them back; the write itself will tell.
                    with contextlib.suppress(OSError):
                        os.ftruncate(fd, size)
                    self.preallocation_budget = 0
                    return
        if budget is not None:
            self.preallocation_budget = budget - (target - start)
        self._allocated = target

    @property
    def current_log_id(self) -> int:
        return self._current_id

    @property
    def write_offset(self) -> int:
        """End of the last frame of the current log: where the next frame goes."""
        return self._write_offset

    def cut_back(self, location: FrameLocation) -> bool:
        """Void what the current log holds from ``location`` on (where the first of
        frames that were written but whose adds failed starts), so that nothing of them
        is left for a replay to index: the frame header there is zeroed, which no scan
        reads past (like a preallocated tail), and the next frame goes there. The blocks
        stay allocated (a cut on a full disk frees nothing another writer could take
        before the next frame needs them); the next sync makes the cut durable. Only
        while no write is out. False, and nothing changed, when the log has rolled
        since ``location`` (those frames stay: a replay may keep them) or nothing lies
        after it. StorageFaultError if the write fails (the log is then unusable, as
        after a failed write that could not be cut off)."""
        offset = location.offset
        if location.log_id != self._current_id or offset >= self._write_offset:
            return False
        fd = self._current_fd
        try:
            os.pwrite(fd, bytes(FRAME_HEADER_SIZE), offset)
            partial = offset % DIRECT_IO_ALIGNMENT
            tail = os.pread(fd, partial, offset - partial) if self.direct_io and partial else b""
        except OSError as error:
            self._broken = error
            raise os_fault("addEntries", "voiding failed frames in the entry log", error) from None
        self._write_offset = offset
        self._tail = tail
        self._unsynced.add(fd)
        return True

    def frames_from(self, log_id: int, offset: int) -> Iterator[tuple[int, ScannedFrame]]:
        """The valid frames from ``offset`` of log ``log_id`` on, through every newer log,
        in log order, as (log id, frame): the journal replay that recovery runs from the
        location index's replay point (see the bookie). Each log is read up to its first
        frame that is not valid (a torn frame, the zeros of a preallocated tail), the
        newest one up to where the next frame goes. Blocking; O(bytes scanned)."""
        for current in sorted(self._fds):
            if current < log_id:
                continue
            fd = self._fds[current]
            size = self._write_offset if current == self._current_id else os.fstat(fd).st_size
            start = min(offset, size) if current == log_id else 0
            for frame in scan_frames(fd, size, start):
                yield current, frame

    def write(self, frame: Frame) -> FrameLocation:
        """Write ``frame`` after the last one (rolling to a new log first when the current
        one would pass the size limit) and return where it starts.

        All or nothing: a failed write is cut off again and raises StorageFaultError.
        """
        if self.direct_io:
            return self.write_group((frame,))[0]
        return self._write_buffered(frame)

    def _write_buffered(self, frame: Frame) -> FrameLocation:
        if self._broken is not None:
            raise StorageFaultError("addEntries", f"entry log unusable: {self._broken}")
        size = len(frame.header) + frame.payload_bytes
        if self._write_offset > 0 and self._write_offset + size > self._size_limit:
            try:
                self._start_log(self._current_id + 1)
            except OSError as error:
                raise os_fault("addEntries", "rolling the entry log", error) from None
        offset = self._write_offset
        if offset + size > self._allocated:
            self._preallocate(offset + size)
        self._write_frame(frame, offset, size)
        self._write_offset = offset + size
        self._unsynced.add(self._current_fd)
        return FrameLocation(self._current_id, offset)

    def append(
        self, ledger_id: int, first_entry_id: int, entries: Sequence[bytes]
    ) -> FrameLocation:
        """Build the frame of ``entries`` and ``write`` it."""
        return self.write(Frame(ledger_id, first_entry_id, entries))

    def write_group(self, frames: Sequence[Frame]) -> list[FrameLocation]:
        """Write ``frames`` one after another and return where each starts (blocking).
        With direct I/O: ``plan_direct``, ``DirectWrite.execute`` and ``finish_direct``
        for each log the frames go to; without, one ``write`` per frame."""
        if not self.direct_io:
            return [self._write_buffered(frame) for frame in frames]
        locations: list[FrameLocation] = []
        while len(locations) < len(frames):
            write = self.plan_direct(frames, len(locations))
            try:
                write.execute()
            except OSError as error:
                self.abandon_direct(write, error)
            self.finish_direct(write)
            locations += write.locations
        return locations

    async def write_direct_group(
        self,
        frames: Sequence[Frame],
        execute: Callable[[DirectWrite], Awaitable[None]],
        copy: bool = True,
    ) -> list[FrameLocation]:
        """``write_group`` with direct I/O, each planned write run by ``execute`` (the
        entry log writer) while the caller's loop goes on: where each frame starts.
        ``copy``: whether the frames are copied into the buffer here (else ``execute``
        copies ``DirectWrite.copies``). StorageFaultError if a write fails (it is cut
        back)."""
        locations: list[FrameLocation] = []
        while len(locations) < len(frames):
            write = self.plan_direct(frames, len(locations), copy)
            try:
                await execute(write)
            except OSError as error:
                self.abandon_direct(write, error)
            self.finish_direct(write)
            locations += write.locations
        return locations

    def plan_direct(
        self, frames: Sequence[Frame], first: int = 0, copy: bool = True
    ) -> DirectWrite:
        """Prepare one O_DIRECT write of ``frames[first:]``, as many of them as the current
        log and MAX_DIRECT_WRITE_BYTES take (rolling to a new log first when not even the
        first one fits): place them in the reused page-aligned buffer, from the start of
        the partly written last block (its bytes written again, unchanged) to the next
        block boundary (zeros after the last frame, as in a preallocated tail). They are
        copied there now, or with ``copy=False`` left in the result's ``copies`` for
        whoever runs the write.

        Run the result's ``execute`` (on any thread; it touches nothing but the buffer
        and the file), then ``finish_direct`` or, if it raised, ``abandon_direct``;
        nothing else may be written in between. O(bytes of the frames taken): one
        memcpy per entry (O(frames) with ``copy=False``), and a fallocate per 64 MiB;
        the frames' CRCs are left to ``execute``.
        """
        if not self.direct_io:
            raise ValueError("plan_direct needs direct I/O")
        if self._broken is not None:
            raise StorageFaultError("addEntries", f"entry log unusable: {self._broken}")
        count = len(frames)
        if not 0 <= first < count:
            raise ValueError(f"no frame to write at {first} of {count}")
        offset = self._write_offset
        end = offset
        taken = first
        while taken < count:
            frame = frames[taken]
            size = len(frame.header) + frame.payload_bytes
            if taken > first and end - offset + size > MAX_DIRECT_WRITE_BYTES:
                break
            if end > 0 and end + size > self._size_limit:
                if taken > first:
                    break
                try:
                    self._start_log(self._current_id + 1)
                except OSError as error:
                    raise os_fault("addEntries", "rolling the entry log", error) from None
                offset = end = 0
            end += size
            taken += 1
        tail = self._tail
        start = offset - len(tail)
        padded_end = -(-end // DIRECT_IO_ALIGNMENT) * DIRECT_IO_ALIGNMENT
        if padded_end > self._allocated:
            self._preallocate(padded_end)
        length = padded_end - start
        buffer = self._aligned_buffer(length)
        buffer[: len(tail)] = tail
        position = len(tail)
        locations: list[FrameLocation] = []
        unsealed: list[tuple[int, int]] = []
        copies: list[tuple[int, bytearray, Sequence[bytes]]] = []
        log_id = self._current_id
        for index in range(first, taken):
            frame = frames[index]
            locations.append(FrameLocation(log_id, start + position))
            if copy:
                end_of_frame = copy_frame(buffer, position, frame)
            else:
                copies.append((position, frame.header, frame.entries))
                end_of_frame = position + len(frame.header) + frame.payload_bytes
            if not frame.sealed:
                unsealed.append((position, end_of_frame))
            position = end_of_frame
        buffer[position:length] = _ZEROS[: length - position]
        return DirectWrite(
            self._direct_fd,
            buffer,
            start,
            length,
            end,
            locations,
            unsealed,
            copies,
        )

    def finish_direct(self, write: DirectWrite) -> None:
        """After ``write.execute()`` returned: its frames are in the log."""
        kept = write.end % DIRECT_IO_ALIGNMENT
        relative_end = write.end - write.start
        self._tail = write.buffer[relative_end - kept : relative_end]
        self._write_offset = write.end
        self._unsynced.add(self._current_fd)
        self._unprobed = False

    def abandon_direct(self, write: DirectWrite, error: OSError) -> NoReturn:
        """After ``write.execute()`` raised ``error``: cut the log back to where the write
        began and raise StorageFaultError (NoSpaceError for a full disk)."""
        offset = self._write_offset
        try:
            os.ftruncate(self._current_fd, offset)
            self._allocated = offset
        except OSError as truncate_error:
            self._broken = truncate_error
        if error.errno == errno.EINVAL and self._unprobed:
            self._stop_direct()  # the probe could not run; the file system refuses O_DIRECT
        raise os_fault("addEntries", "entry log write", error) from None

    def _aligned_buffer(self, size: int) -> mmap.mmap:
        """A page-aligned buffer (an anonymous mapping) of at least ``size`` bytes, kept
        for the next write."""
        buffer = self._buffer
        if buffer is None or len(buffer) < size:
            if buffer is not None:
                buffer.close()
            capacity = DIRECT_IO_ALIGNMENT
            while capacity < size:
                capacity *= 2
            buffer = self._buffer = mmap.mmap(-1, capacity)
        return buffer

    def _write_frame(self, frame: Frame, offset: int, size: int) -> None:
        frame.seal()
        fd = self._current_fd
        try:
            written = 0
            if frame.count < _IOV_MAX:
                written = os.pwritev(fd, [frame.header, *frame.entries], offset)
            if written < size:
                # Rare: a short write, or more entries than one pwritev takes.
                whole = memoryview(b"".join((frame.header, *frame.entries)))
                while written < size:
                    written += os.pwrite(fd, whole[written:], offset + written)
        except OSError as error:
            try:
                os.ftruncate(fd, offset)
                self._allocated = offset
            except OSError as truncate_error:
                self._broken = truncate_error
            raise os_fault("addEntries", "entry log write", error) from None

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

    def read_runs(self, runs: Sequence[EntryRun]) -> list[bytes]:
        """The payloads of ``runs``, in order. Runs of one log that follow each other
        (gaps of frame headers between them are read over) are read with one pread while
        the span stays under MAX_GROUPED_READ_BYTES; a larger run alone in one pread.
        Cost: one pread per group, one copy per payload."""
        payloads: list[bytes] = []
        append = payloads.append
        count = len(runs)
        i = 0
        while i < count:
            first = runs[i]
            end = first.offset + sum(first.lengths)
            j = i + 1
            while j < count:
                run = runs[j]
                if run.log_id != first.log_id or run.offset < end:
                    break
                next_end = run.offset + sum(run.lengths)
                if next_end - first.offset > MAX_GROUPED_READ_BYTES:
                    break
                end = next_end
                j += 1
            span = self._pread(first.log_id, end - first.offset, first.offset)
            if i + 1 == j and len(first.lengths) == 1:
                append(span)
            else:
                base = first.offset
                for k in range(i, j):
                    run = runs[k]
                    start = run.offset - base
                    for length in run.lengths:
                        append(span[start : start + length])
                        start += length
            i = j
        return payloads

    def take_unsynced(self) -> list[int]:
        """File descriptors written since the last sync (call on the writer thread); hand
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
        """Blocking: make every written frame durable. StorageFaultError (NoSpaceError for
        a full disk) if an fsync fails; its descriptors stay due for the next sync."""
        fds = self.take_unsynced()
        try:
            self.fsync_all(fds)
        except OSError as error:
            self.restore_unsynced(fds)
            raise os_fault("addEntries", "entry log fsync", error) from None
        except BaseException:
            self.restore_unsynced(fds)
            raise

    def close(self) -> None:
        """Trim the preallocated tail and release the descriptors (no fsync: call
        ``sync`` first for durability)."""
        if self._fds:
            self._trim_preallocation()
        for fd in self._fds.values():
            with contextlib.suppress(OSError):
                os.close(fd)
        self._fds.clear()
        self._unsynced.clear()
        self._current_fd = -1
        if self._direct_fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self._direct_fd)
            self._direct_fd = -1
        if self._buffer is not None:
            self._buffer.close()
            self._buffer = None
        if self._directory_fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self._directory_fd)
            self._directory_fd = -1
