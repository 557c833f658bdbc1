"""The entry logs' O_DIRECT writes, in a process of their own.

With ``dbStorage_directIOEntryLogger`` the loop copies each group of adds into the entry
logger's page-aligned buffer, and the block-aligned write happens elsewhere so the loop
goes on while the device works. A thread did it first, but a thread shares the broker's
GIL: on a loop that decodes produce bodies (pybase64 releases the GIL on every call) one
thread round trip cost the loop about 230 us of CPU and some 20 context switches of GIL
hand-overs, against 42 us for a round trip to a process over a socket, measured with the
same load. Under ``brokerlab bench http`` the process made produce 5% (syncMode=none) to
13% (batch) faster at 16 producers, and 40% at 2.

The buffer is a memfd that the entry logger and this process both map
(``EntryLogger.buffer_fd``). A request names the log file, the byte range of the buffer
to write at its offset, the buffer's size (the process maps it again when it grew) and
the frames whose CRC32 it fills in first (``seal_copied_frames``, as the thread did);
the answer is 0, or the errno of the open or pwrite that failed. Writes go one at a
time (the bookie's group committer has one group out at a time); answers come in
request order.

A process that exits while its owner is open sets ``died`` and fails the writes it was
given (``brokerlab serve`` stops on it). It runs in a process group of its own and ignores
SIGINT and SIGTERM: Ctrl-C stops the broker, which commits what is pending and then ends
the process by closing the socket.

Wire format over a Unix socket pair, little-endian:

- request: u64 file offset, u64 length, u64 buffer size, u32 path length, u32 frame
  count, the path (UTF-8), and per frame u64 start and u64 end in the buffer;
- answer: i64 errno (0: written).

``DirectWriter.start`` runs it as ``python -c`` calling ``main([SOCKET_FD, BUFFER_FD])``.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import errno
import mmap
import os
import select
import socket
import struct
import sys
from collections.abc import Sequence

from storage_stub.bookie.entry_log import DirectWrite, seal_copied_frames
from storage_stub.child_process import SocketChild, SocketProtocol

REQUEST = struct.Struct("<QQQII")
RANGE = struct.Struct("<QQ")
ANSWER = struct.Struct("<q")
_STOP_DEADLINE_S = 30.0
#: the child's program (not ``-m``: the package imports this module first, and runpy
#: warns when it runs a module already imported). It stops when the bookie closes the
#: socket (dying first would lose a write), so it ignores SIGINT and SIGTERM, before its
#: imports, which take a while
_CHILD = (
    "import signal; signal.signal(signal.SIGINT, signal.SIG_IGN); "
    "signal.signal(signal.SIGTERM, signal.SIG_IGN); "
    "import sys; from storage_stub.bookie.direct_writer import main; sys.exit(main(sys.argv[1:]))"
)


class _Connection(SocketProtocol):
    """The writer's socket on the loop: answers resolve the waiting writes in order."""

    def __init__(self) -> None:
        super().__init__()
        self.pending: collections.deque[asyncio.Future[int]] = collections.deque()
        self.buffer = bytearray()
        self.lost: str | None = None

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        size = ANSWER.size
        while len(self.buffer) >= size and self.pending:
            (code,) = ANSWER.unpack_from(self.buffer)
            del self.buffer[:size]
            future = self.pending.popleft()
            if not future.done():
                future.set_result(code)

    def connection_lost(self, exc: BaseException | None) -> None:
        self.lost = f"the entry log writer's socket closed ({exc or 'end of stream'})"
        while self.pending:
            future = self.pending.popleft()
            if not future.done():
                future.set_result(errno.EIO)


class DirectWriter:
    """One writer process for one entry logger's buffer. ``start`` it, ``write`` planned
    writes (O(frames) on the loop: one small send), ``close`` it."""

    def __init__(self, buffer_fd: int) -> None:
        self._buffer_fd = buffer_fd
        self._child: SocketChild[_Connection] | None = None
        self._closing = False
        #: set (to the reason) when the process exits while its owner is open
        self.died: asyncio.Future[str] = asyncio.get_running_loop().create_future()

    async def start(self) -> None:
        buffer_fd = str(self._buffer_fd)
        self._child = await SocketChild.start(
            "entry log writer process",
            lambda fd: ("-c", _CHILD, str(fd), buffer_fd),
            _Connection,
            self.died,
            pass_fds=(self._buffer_fd,),
        )

    async def write(self, write: DirectWrite) -> None:
        """Have the process fill in the write's unsealed frames' CRCs and write it: O(its
        frames) on the loop. OSError with the process's errno (EIO when the process is
        gone); the write may then have happened in part."""
        if self._child is None or self._closing:
            raise OSError(errno.EIO, "the entry log writer process is not running")
        connection = self._child.connection
        transport = connection.transport
        if connection.lost is not None or transport is None or transport.is_closing():
            raise OSError(errno.EIO, connection.lost or "the entry log writer is not connected")
        path = write.path.encode()
        unsealed = write.unsealed
        parts = [
            REQUEST.pack(write.start, write.length, len(write.buffer), len(path), len(unsealed))
        ]
        parts.append(path)
        parts += [RANGE.pack(frame_start, frame_end) for frame_start, frame_end in unsealed]
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        connection.pending.append(future)
        transport.write(b"".join(parts))
        code = await future
        if code:
            raise OSError(code, f"entry log write in the writer process: {os.strerror(code)}")

    async def close(self) -> None:
        """End the process's input: it answers what it was sent and exits. One that does
        not stop within the deadline is killed."""
        self._closing = True
        if self._child is not None:
            await self._child.close(_STOP_DEADLINE_S)
        if not self.died.done():
            self.died.cancel()


# ---------------------------------------------------------------------- the process


class _Requests:
    """The process's end of the socket, read by waiting in ``poll`` for input.

    A process blocked in ``recv`` on a Unix socket is woken whenever its peer reads
    from the pair: the loop's read of each answer woke this process for nothing, a
    context switch for it and a cross-CPU wakeup charged to the loop (about 1.2% of the
    loop's CPU under 16 producers of 100 x 1 KiB messages, measured with perf).
    ``poll`` sleeps on the same queue but is woken only for the events it waits for,
    here input.
    """

    __slots__ = ("_buffer", "_poller", "_sock")

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._poller = select.poll()
        self._poller.register(sock.fileno(), select.POLLIN)
        self._buffer = bytearray()

    def read(self, size: int) -> bytes:
        """The next ``size`` bytes, or fewer at the end of the input. O(size)."""
        buffer = self._buffer
        while len(buffer) < size:
            self._poller.poll()
            chunk = self._sock.recv(max(size - len(buffer), _RECV_BYTES))
            if not chunk:
                break
            buffer += chunk
        taken = bytes(buffer[:size])
        del buffer[:size]
        return taken


#: a read takes what has arrived up to this much (a request is 32 bytes, its path and
#: 16 bytes a frame)
_RECV_BYTES = 64 * 1024


def serve(sock: socket.socket, buffer_fd: int) -> None:
    """Write until the other end closes. Per request O(frames + bytes written)."""
    reader = _Requests(sock)
    buffer: mmap.mmap | None = None
    path = ""
    fd = -1
    try:
        while True:
            head = reader.read(REQUEST.size)
            if len(head) < REQUEST.size:
                return
            start, length, buffer_size, path_length, count = REQUEST.unpack(head)
            rest = reader.read(path_length + RANGE.size * count)
            if len(rest) < path_length + RANGE.size * count:
                return
            if buffer is None or len(buffer) != buffer_size:
                if buffer is not None:
                    buffer.close()
                buffer = mmap.mmap(buffer_fd, buffer_size)
            code = 0
            try:
                requested = rest[:path_length].decode()
                if requested != path:
                    if fd >= 0:
                        os.close(fd)
                    fd, path = -1, ""
                    fd = os.open(requested, os.O_WRONLY | os.O_DIRECT | os.O_CLOEXEC)
                    path = requested
                seal_copied_frames(buffer, RANGE.iter_unpack(rest[path_length:]))
                _write_all(fd, buffer, start, length)
            except OSError as error:
                code = error.errno or errno.EIO
            sock.sendall(ANSWER.pack(code))
    finally:
        if fd >= 0:
            os.close(fd)
        if buffer is not None:
            buffer.close()


def _write_all(fd: int, buffer: mmap.mmap, start: int, length: int) -> None:
    with memoryview(buffer) as view:
        written = 0
        while written < length:
            count = os.pwrite(fd, view[written:length], start + written)
            if count <= 0:
                raise OSError(errno.EIO, "direct write made no progress")
            written += count


def main(argv: Sequence[str]) -> int:
    if len(argv) != 2:
        print("usage: main([SOCKET_FD, BUFFER_FD])", file=sys.stderr)
        return 2
    with (
        socket.socket(fileno=int(argv[0])) as sock,
        contextlib.suppress(BrokenPipeError, ConnectionResetError),
    ):
        serve(sock, int(argv[1]))
    return 0
