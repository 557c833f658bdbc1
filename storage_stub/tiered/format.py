"""The layout of stream set objects (SSOs) and stream objects (SOs).

One format for both (an SO is an object whose blocks all belong to one stream)::

    data section   data blocks, each a run of entries [u32 length][bytes] of one stream
                   with contiguous offsets; a range of a stream is one or more blocks
    index block    one 36-byte record per data block, sorted by (stream id, start offset):
                   stream id u64, start offset u64, end offset u64 (exclusive),
                   data position u64, data length u32
    footer         16 bytes: index position u64, index length u32, magic "BLS1"

The object's ranges are learned only from its index block, as in AutoMQ V2 where the
metadata image does not carry SSO ranges. A reader fetches the tail of the object
(footer plus, usually, the whole index block) in one ranged get.
"""

from __future__ import annotations

import struct
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Sequence
from typing import NamedTuple

from storage_stub.tiered.api import CorruptObjectError

BLOCK_RECORD = struct.Struct("<QQQQI")
FOOTER = struct.Struct("<QI4s")
ENTRY_LENGTH = struct.Struct("<I")
MAGIC = b"BLS1"
#: A data block is cut once it holds this many bytes, so a short read fetches little
#: (AutoMQ's s3.object.block.size default).
BLOCK_MAX_BYTES = 512 * 1024
#: Bytes fetched from the end of an object to read its index: footer and, for up to
#: ~1,800 blocks, the whole index block in one get.
TAIL_READ_BYTES = 64 * 1024


class StreamRange(NamedTuple):
    """Contiguous offsets ``start_offset..end_offset`` (end exclusive) of one stream."""

    stream_id: int
    start_offset: int
    end_offset: int


class DataBlockIndex(NamedTuple):
    """One data block: offsets ``start_offset..end_offset`` of a stream at ``position``."""

    stream_id: int
    start_offset: int
    end_offset: int
    position: int
    length: int


class RangeData(NamedTuple):
    """Entries of one stream with offsets ``start_offset, start_offset + 1, ...``."""

    stream_id: int
    start_offset: int
    entries: Sequence[bytes]

    @property
    def end_offset(self) -> int:
        return self.start_offset + len(self.entries)


def encode_object(ranges: Iterable[RangeData]) -> bytes:
    """Encode ranges (sorted by stream id, then offset; none overlapping) as one object.

    Cost: O(entries + total bytes)."""
    parts: list[bytes] = []
    records: list[bytes] = []
    position = 0
    pack_length = ENTRY_LENGTH.pack
    for stream_id, start_offset, entries in ranges:
        block_start = start_offset
        block_position = position
        offset = start_offset
        for entry in entries:
            parts.append(pack_length(len(entry)))
            parts.append(entry)
            position += ENTRY_LENGTH.size + len(entry)
            offset += 1
            if position - block_position >= BLOCK_MAX_BYTES:
                records.append(
                    BLOCK_RECORD.pack(
                        stream_id, block_start, offset, block_position, position - block_position
                    )
                )
                block_start, block_position = offset, position
        if offset > block_start:
            records.append(
                BLOCK_RECORD.pack(
                    stream_id, block_start, offset, block_position, position - block_position
                )
            )
    index = b"".join(records)
    parts.append(index)
    parts.append(FOOTER.pack(position, len(index), MAGIC))
    return b"".join(parts)


def index_location(key: str, tail: bytes, object_size: int) -> tuple[int, int]:
    """``(index position, index length)`` from the footer at the end of ``tail``."""
    if len(tail) < FOOTER.size:
        raise CorruptObjectError(key, "shorter than its footer")
    position, length, magic = FOOTER.unpack_from(tail, len(tail) - FOOTER.size)
    if magic != MAGIC or position + length + FOOTER.size != object_size:
        raise CorruptObjectError(key, "bad footer")
    if length % BLOCK_RECORD.size:
        raise CorruptObjectError(key, "index length is not a whole number of records")
    return position, length


class ObjectIndex:
    """An object's parsed index block: its data blocks, and per stream its ranges.

    ``blocks_of`` is a binary search: O(log(blocks)). ``ranges()`` is O(blocks).
    """

    __slots__ = ("_stream_ids", "blocks", "object_id")

    def __init__(self, object_id: int, blocks: list[DataBlockIndex]) -> None:
        self.object_id = object_id
        self.blocks = blocks
        self._stream_ids = [block.stream_id for block in blocks]

    @classmethod
    def parse(cls, object_id: int, key: str, index: bytes) -> ObjectIndex:
        blocks = list(map(DataBlockIndex._make, BLOCK_RECORD.iter_unpack(index)))
        previous: DataBlockIndex | None = None
        for block in blocks:
            if block.end_offset <= block.start_offset or (
                previous is not None
                and (block.stream_id, block.start_offset)
                < (previous.stream_id, previous.end_offset)
            ):
                raise CorruptObjectError(key, "index records out of order")
            previous = block
        return cls(object_id, blocks)

    def blocks_of(self, stream_id: int) -> list[DataBlockIndex]:
        """This stream's blocks, in offset order."""
        low = bisect_left(self._stream_ids, stream_id)
        high = bisect_right(self._stream_ids, stream_id, low)
        return self.blocks[low:high]

    def stream_ids(self) -> list[int]:
        """Distinct stream ids, ascending."""
        ids: list[int] = []
        for stream_id in self._stream_ids:
            if not ids or ids[-1] != stream_id:
                ids.append(stream_id)
        return ids

    def ranges(self) -> list[StreamRange]:
        """Every stream's contiguous ranges (adjacent blocks merged), sorted."""
        ranges: list[StreamRange] = []
        for block in self.blocks:
            last = ranges[-1] if ranges else None
            if (
                last is not None
                and last.stream_id == block.stream_id
                and last.end_offset == block.start_offset
            ):
                ranges[-1] = StreamRange(block.stream_id, last.start_offset, block.end_offset)
            else:
                ranges.append(StreamRange(block.stream_id, block.start_offset, block.end_offset))
        return ranges

    def data_bytes_of(self, stream_id: int) -> int:
        return sum(block.length for block in self.blocks_of(stream_id))


def decode_block(key: str, block: DataBlockIndex, data: bytes) -> list[bytes]:
    """The entries of ``block`` from its bytes. Cost: O(entries)."""
    entries: list[bytes] = []
    position = 0
    unpack_length = ENTRY_LENGTH.unpack_from
    size = len(data)
    while position < size:
        if position + ENTRY_LENGTH.size > size:
            raise CorruptObjectError(key, "truncated entry length")
        (length,) = unpack_length(data, position)
        position += ENTRY_LENGTH.size
        if position + length > size:
            raise CorruptObjectError(key, "truncated entry")
        entries.append(data[position : position + length])
        position += length
    if len(entries) != block.end_offset - block.start_offset:
        raise CorruptObjectError(key, "block holds a different number of entries")
    return entries
