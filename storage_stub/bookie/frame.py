"""Entry log frames: one add call's entries as the entry log stores them.

The frame format (big-endian)::

    crc32 u32 | ledger id u64 | first entry id i64 | count u32 | payload bytes u64
    | count x payload length u32 | payload 1 | ... | payload count

The CRC covers everything after itself. A frame is valid only if its count is at least
1, its lengths add up to its payload bytes, it ends inside the file and its CRC matches,
so a torn tail and the zeros of a preallocated tail never parse as a frame
(:func:`valid_prefix_length`). Headers and copies into a direct-I/O buffer run compiled
(``storage_stub.bookie._frames``) where it was built, else in Python, to the same bytes.
"""

from __future__ import annotations

import mmap
import os
import struct
from collections.abc import Iterable, Iterator, Sequence
from typing import NamedTuple

from isal.isal_zlib import crc32

try:  # compiled with the package where a C compiler allows (setup.py)
    from storage_stub.bookie import _frames as _compiled
except ImportError:
    _compiled = None  # type: ignore[assignment]

_CRC = struct.Struct(">I")
_FIXED = struct.Struct(">IQqIQ")  # crc, ledger id, first entry id, count, payload bytes
#: Bytes of a frame header before its lengths (the whole header is this + 4 x count).
FRAME_HEADER_SIZE = _FIXED.size
#: Bytes per payload length in a frame header (and in an index value).
LENGTH_SIZE = 4
_RECOVERY_CHUNK_BYTES = 4 * 1024 * 1024
_MAX_ENTRIES_PER_FRAME = (1 << 32) - 1
_LENGTHS: dict[int, struct.Struct] = {}


def lengths_struct(count: int) -> struct.Struct:
    """The struct of ``count`` big-endian u32 lengths (cached per count)."""
    packer = _LENGTHS.get(count)
    if packer is None:
        packer = struct.Struct(f">{count}I")
        if len(_LENGTHS) < 4096:
            _LENGTHS[count] = packer
    return packer


class Frame:
    """One add call's entries, ready to write: ``header`` is the whole frame header and
    its tail ``header[FRAME_HEADER_SIZE:]`` the raw lengths, which the location index
    stores as they are. The CRC is filled in by ``seal`` (one pass over the payloads,
    ISA-L, about 0.05 us per KiB), which the page-cache path calls before writing; the
    direct path computes it over the frame's copy in its buffer instead, on the writer
    thread (one call instead of one per payload), and leaves ``header`` unsealed.

    Building one costs one header allocation: no payload is copied. The header comes
    from ``storage_stub.bookie._frames`` where it was built (about 0.4 us for 100
    entries against 5 in Python), else from :func:`frame_header`.
    """

    __slots__ = (
        "count",
        "entries",
        "first_entry_id",
        "header",
        "ledger_id",
        "payload_bytes",
        "sealed",
    )

    def __init__(self, ledger_id: int, first_entry_id: int, entries: Sequence[bytes]) -> None:
        if _compiled is None:
            header, payload_bytes = frame_header(ledger_id, first_entry_id, entries)
        else:
            try:
                header, payload_bytes = _compiled.frame_header(ledger_id, first_entry_id, entries)
            except TypeError:  # entries that are not a list or tuple of bytes
                header, payload_bytes = frame_header(ledger_id, first_entry_id, entries)
        self.ledger_id = ledger_id
        self.first_entry_id = first_entry_id
        self.count = len(entries)
        self.payload_bytes = payload_bytes
        self.header = header
        self.entries = entries
        self.sealed = False

    def seal(self) -> None:
        """Fill in the header's CRC (over everything after it). Idempotent."""
        if self.sealed:
            return
        crc = crc32(memoryview(self.header)[_CRC.size :])
        for payload in self.entries:
            crc = crc32(payload, crc)
        _CRC.pack_into(self.header, 0, crc)
        self.sealed = True

    @property
    def size(self) -> int:
        """Bytes of the whole frame in the log."""
        return len(self.header) + self.payload_bytes

    @property
    def raw_lengths(self) -> memoryview:
        return memoryview(self.header)[FRAME_HEADER_SIZE:]


def compiled_frames() -> bool:
    """Whether frame headers and direct-buffer copies run compiled (``_frames`` built)."""
    return _compiled is not None


def frame_header(
    ledger_id: int, first_entry_id: int, entries: Sequence[bytes]
) -> tuple[bytearray, int]:
    """The header of a frame of ``entries`` (its CRC 0) and their total size: what
    ``_frames.frame_header`` computes, in Python. O(entries)."""
    count = len(entries)
    if not 0 < count <= _MAX_ENTRIES_PER_FRAME:
        raise ValueError(f"a frame holds 1 to {_MAX_ENTRIES_PER_FRAME} entries, not {count}")
    lengths = list(map(len, entries))
    payload_bytes = sum(lengths)
    header = bytearray(FRAME_HEADER_SIZE + LENGTH_SIZE * count)
    _FIXED.pack_into(header, 0, 0, ledger_id, first_entry_id, count, payload_bytes)
    lengths_struct(count).pack_into(header, FRAME_HEADER_SIZE, *lengths)
    return header, payload_bytes


def copy_frame(buffer: mmap.mmap, position: int, frame: Frame) -> int:
    """Copy ``frame`` (header, then entries) into ``buffer`` at ``position``; where the
    copy ends (``copy_parts``)."""
    return copy_parts(buffer, position, frame.header, frame.entries)


def copy_parts(
    buffer: mmap.mmap, position: int, header: bytearray, entries: Sequence[bytes]
) -> int:
    """Copy ``header``, then ``entries``, into ``buffer`` at ``position``; where the copy
    ends. ``_frames.copy_frame`` where built (one memcpy an entry), else a join and one
    slice assignment (the frame copied twice). O(frame bytes)."""
    if _compiled is not None:
        try:
            return _compiled.copy_frame(buffer, position, header, entries)
        except TypeError:  # entries that are not a list or tuple of bytes
            pass
    data = b"".join((header, *entries))
    end = position + len(data)
    if position < 0 or end > len(buffer):
        raise ValueError(
            f"a frame of {len(data)} bytes at {position} overruns a buffer of {len(buffer)}"
        )
    buffer[position:end] = data
    return end


class FrameLocation(NamedTuple):
    """Where a frame starts in which log."""

    log_id: int
    offset: int


def seal_copied_frames(buffer: mmap.mmap, frames: Iterable[tuple[int, int]]) -> None:
    """Fill in the CRC of each frame copied, unsealed, to ``buffer[start:end]`` (one
    ISA-L pass over each, about 1 us per 100 KiB here; it holds the GIL)."""
    with memoryview(buffer) as view:
        for frame_start, frame_end in frames:
            crc = crc32(view[frame_start + _CRC.size : frame_end])
            _CRC.pack_into(buffer, frame_start, crc)


def payloads_offset(frame_offset: int, count: int) -> int:
    """Where the first payload of a frame of ``count`` entries starts."""
    return frame_offset + FRAME_HEADER_SIZE + LENGTH_SIZE * count


class ScannedFrame(NamedTuple):
    """A valid frame found by :func:`scan_frames`: where it starts and ends in its log,
    its ids and its payload lengths exactly as in its header (what the location index
    stores)."""

    offset: int
    end: int
    ledger_id: int
    first_entry_id: int
    entry_count: int
    raw_lengths: bytes


def scan_frames(fd: int, size: int, start: int = 0) -> Iterator[ScannedFrame]:
    """The whole, valid frames of the file from ``start`` on, in order, up to the first
    that is not (a torn frame, preallocated zeros) or the end of ``size`` bytes.

    Cost: reads the span once in 4 MiB chunks (one pread per larger frame) and CRCs every
    byte: O(size - start).
    """
    position = start
    chunk = b""
    chunk_start = start
    while position + FRAME_HEADER_SIZE <= size:
        if position + FRAME_HEADER_SIZE > chunk_start + len(chunk):
            chunk_start = position
            chunk = os.pread(fd, min(_RECOVERY_CHUNK_BYTES, size - position), position)
            if len(chunk) < FRAME_HEADER_SIZE:
                return
        relative = position - chunk_start
        crc, ledger_id, first, count, payload_bytes = _FIXED.unpack_from(chunk, relative)
        if count == 0:  # also every zero-filled (preallocated) tail
            return
        end = payloads_offset(position, count) + payload_bytes
        if end > size:
            return
        if end > chunk_start + len(chunk):
            chunk_start = position
            chunk = os.pread(
                fd, min(max(_RECOVERY_CHUNK_BYTES, end - position), size - position), position
            )
            if len(chunk) < end - position:
                return
            relative = 0
        view = memoryview(chunk)
        lengths_at = relative + FRAME_HEADER_SIZE
        lengths = lengths_struct(count).unpack_from(view, lengths_at)
        if sum(lengths) != payload_bytes:
            return
        if crc32(view[relative + _CRC.size : relative + end - position]) != crc:
            return
        raw = bytes(view[lengths_at : lengths_at + LENGTH_SIZE * count])
        yield ScannedFrame(position, end, ledger_id, first, count, raw)
        position = end


def valid_prefix_length(fd: int, size: int) -> int:
    """Length of the longest prefix of the file made of whole, valid frames
    (:func:`scan_frames` from the start). O(size)."""
    valid = 0
    for frame in scan_frames(fd, size):
        valid = frame.end
    return valid
