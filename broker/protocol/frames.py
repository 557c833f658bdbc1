"""Framing of Pulsar's binary protocol.

Every frame is ``total size (4) | command size (4) | BaseCommand``; SEND and MESSAGE
frames go on with the entry (``magic 0x0e01 | CRC32C | metadata size | metadata |
payload``, :mod:`broker.ledger.entry`). Sizes are big-endian; ``total size`` counts
everything after itself.
"""

from __future__ import annotations

import io
import struct
from typing import Any

from broker.pulsar_api import BaseCommand

SIZES = struct.Struct(">II")
U32 = struct.Struct(">I")
#: the fewest bytes an entry cut at the end of a read has for the rest to be read into
#: its bytes (:class:`CutEntry`), not joined from the parts as they came: the join of a
#: small one costs less than the read more it takes to stop reading at the frame's end
CUT_ENTRY_MIN_BYTES = 16 * 1024
#: the most: a CutEntry's bytes are made when the frame's head arrives, so a client that
#: sends heads and no more makes the connection hold this much each (the parts of a
#: larger frame are only what arrived); a batch of the clients' default 128 KiB fits
CUT_ENTRY_MAX_BYTES = 256 * 1024
#: the most all the cut entries of a server's connections together may hold before their
#: rest arrived: each is made whole-sized when only the frame's head is there, so 2,000
#: connections sending the head of a 256 KiB entry and no more grew the broker by 500
#: MiB (their parts, 20 MiB); past this, a cut frame keeps its parts as they come
CUT_ENTRIES_MAX_BYTES = 16 * 1024 * 1024
#: room for the command and headers around a message of maxMessageSize, as Pulsar's
#: frame limit (Commands.MESSAGE_SIZE_FRAME_PADDING)
FRAME_PADDING = 10 * 1024


class FrameError(Exception):
    """A frame that breaks the protocol; the connection is closed with this reason."""


def command_frame(command: Any) -> bytes:
    """A frame carrying only ``command``. O(command size)."""
    body = command.SerializeToString()
    return SIZES.pack(len(body) + 4, len(body)) + body


def payload_frame_head(command: Any, entry_size: int) -> bytes:
    """The sizes and command that precede an entry in a SEND or MESSAGE frame."""
    body = command.SerializeToString()
    return SIZES.pack(len(body) + 4 + entry_size, len(body)) + body


def split_frame(
    data: bytes | bytearray, view: memoryview, offset: int, end: int
) -> tuple[Any, bytes]:
    """The BaseCommand and the entry (b"" for none) of the frame whose bytes after its
    total size are ``data[offset:end]`` (``view`` is a memoryview of ``data``). The
    command parses from the view, the entry is one copy out of ``data`` (bytes, also
    out of a bytearray): no intermediate slices. FrameError, with parse_command's
    reasons, if it does not parse. O(frame size)."""
    if end - offset < 4:
        raise FrameError("frame shorter than its command size")
    size = U32.unpack_from(data, offset)[0]
    start = offset + 4
    command_end = start + size
    if command_end > end:
        raise FrameError(f"command size {size} runs past the frame ({end - offset} bytes)")
    try:
        command = BaseCommand.FromString(view[start:command_end])
    except Exception as error:  # protobuf DecodeError, or a required field missing
        raise FrameError(f"command does not parse: {error}") from None
    if command_end == end:
        return command, b""
    if type(data) is bytes:
        return command, data[command_end:end]
    return command, bytes(view[command_end:end])


def split_frame_parts(parts: list[memoryview], total: int) -> tuple[Any, bytes]:
    """:func:`split_frame` of a frame that arrived in parts: ``parts`` hold exactly its
    ``total`` bytes, its total size included. The command parses where it lies when the
    first part holds it (nearly always: a cut falls in the entry), and the entry is one
    copy, a join of the parts; else the parts are joined and split as one frame.
    O(frame size)."""
    first = parts[0]
    if len(first) >= 8:
        command_end = 8 + U32.unpack_from(first, 4)[0]
        if command_end <= len(first):
            try:
                command = BaseCommand.FromString(first[8:command_end])
            except Exception as error:  # protobuf DecodeError, or a required field missing
                raise FrameError(f"command does not parse: {error}") from None
            if command_end == total:
                return command, b""
            return command, b"".join([first[command_end:], *parts[1:]])
    whole = b"".join(parts)
    return split_frame(whole, memoryview(whole), 4, total)


def parse_command(frame: memoryview) -> tuple[Any, int]:
    """The BaseCommand at the start of ``frame`` (which starts after the total size) and
    where the rest (the entry of a SEND) begins. FrameError if it does not parse."""
    if len(frame) < 4:
        raise FrameError("frame shorter than its command size")
    size = U32.unpack_from(frame)[0]
    end = 4 + size
    if end > len(frame):
        raise FrameError(f"command size {size} runs past the frame ({len(frame)} bytes)")
    try:
        command = BaseCommand.FromString(frame[4:end])
    except Exception as error:  # protobuf DecodeError, or a required field missing
        raise FrameError(f"command does not parse: {error}") from None
    return command, end


class CutEntry:
    """The entry of a SEND or MESSAGE frame cut at the end of a read, whose rest the
    next reads bring straight into its bytes: ``view`` is where they land, from
    ``have`` on. The bytes are a BytesIO's own (zeroed once), whose ``getvalue`` hands
    them over without a copy once no view of them is left; a join of the parts as they
    came copied every byte of the entry once more (and before, the reads' bytes were a
    copy of the loop's read buffer). The frame's command is kept as it came (a few
    bytes), parsed once the entry is whole, as a frame that arrived in parts is."""

    __slots__ = ("_file", "command", "have", "size", "view")

    def __init__(self, command: bytes, size: int) -> None:
        self.command = command
        self.size = size
        self._file = io.BytesIO(bytes(size))
        self.view: memoryview = self._file.getbuffer()
        self.have = 0

    def take(self) -> tuple[Any, bytes]:
        """The frame's BaseCommand and its entry, once ``view`` is full. FrameError, with
        split_frame's reasons, if the command does not parse. O(command size), and no
        copy of the entry unless a view of it is still held somewhere."""
        self.view.release()
        try:
            command = BaseCommand.FromString(self.command)
        except Exception as error:  # protobuf DecodeError, or a required field missing
            raise FrameError(f"command does not parse: {error}") from None
        return command, self._file.getvalue()

    def drop(self) -> None:
        """Let the bytes go (the connection closed with the frame unfinished)."""
        self.view.release()
