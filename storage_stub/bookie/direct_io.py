"""One planned O_DIRECT write of entry log frames (``EntryLogger.plan_direct`` plans
it; ``execute`` here, or the compiled writer thread of ``direct_writer``, runs it)."""

from __future__ import annotations

import errno
import mmap
import os
from collections.abc import Sequence

from storage_stub.bookie.frame import FrameLocation, copy_parts, seal_copied_frames

#: Direct writes start, end and sit in memory on multiples of this (a page: enough for
#: every block size Linux's O_DIRECT asks for on common file systems).
DIRECT_IO_ALIGNMENT = 4096
#: One direct write takes frames up to about this many bytes (a frame larger than this
#: goes alone); a bigger group is written in several, so the aligned buffer stays small
#: whatever the number of producers.
MAX_DIRECT_WRITE_BYTES = 4 * 1024 * 1024


class DirectWrite:
    """One planned O_DIRECT write (see ``EntryLogger.plan_direct``): ``length`` bytes of
    ``buffer`` to ``start`` of a log, both block-aligned; the frames in it end at ``end``
    and start at ``locations``. ``unsealed``: the (start, end) in ``buffer`` of each
    frame whose CRC is filled in before writing (``seal_copied_frames``). ``copies``:
    the (position in ``buffer``, header, entries) of each frame still to be copied
    there (planned with ``copy=False``; empty once copied)."""

    __slots__ = (
        "buffer",
        "copies",
        "end",
        "fd",
        "length",
        "locations",
        "start",
        "unsealed",
    )

    def __init__(
        self,
        fd: int,
        buffer: mmap.mmap,
        start: int,
        length: int,
        end: int,
        locations: list[FrameLocation],
        unsealed: list[tuple[int, int]],
        copies: list[tuple[int, bytearray, Sequence[bytes]]],
    ) -> None:
        #: the log's O_DIRECT descriptor
        self.fd = fd
        self.buffer = buffer
        self.start = start
        self.length = length
        self.end = end
        self.locations = locations
        self.unsealed = unsealed
        self.copies = copies

    def copy(self) -> None:
        """Copy the frames still to be copied into the buffer (on the caller's thread).
        O(their bytes)."""
        buffer = self.buffer
        for position, header, entries in self.copies:
            copy_parts(buffer, position, header, entries)
        self.copies = []

    def execute(self) -> None:
        """Blocking, on the caller's thread (``write_group``, or the bookie's writer thread
        where the compiled writer is not built): the frames' copies, their CRCs, then the
        pwrite. OSError if the write fails."""
        self.copy()
        seal_copied_frames(self.buffer, self.unsealed)
        with memoryview(self.buffer) as view:
            written = 0
            while written < self.length:
                count = os.pwrite(self.fd, view[written : self.length], self.start + written)
                if count <= 0:
                    raise OSError(errno.EIO, "direct write made no progress")
                written += count
