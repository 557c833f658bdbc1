"""Produce bodies encoded in codec processes, beside the event loop.

Under produce the loop's thread is the broker's bottleneck: it runs on one core, and
about 40% of its time per message went to the body: JSON validation, base64 decoding
and Pulsar's entry format with its CRC32C. That work is a pure function of the body's
bytes, two limits and the publish time (``broker.http.produce_encoding``), so a codec
process does it on another core: the loop sends the raw body and gets the entries back.
Pulsar's broker likewise decodes requests on its I/O threads, not its ordered executors.

The answers are the loop's own. A process refuses whatever it does not encode (a body
the route's type refuses, a limit, bad base64, any exception), and the loop then runs
the same functions itself, which raise the error the route reports. Bodies under
``MIN_BODY_BYTES`` stay on the loop: the round trip costs more than their encoding.

One difference in order, not in answers: the publish time is read when the body is,
and a small body encoded on the loop meanwhile (or one in a less busy process) can be
stored before a large one read earlier, so publish times along a topic are not always
increasing, as with several Pulsar producers (resetcursor by time, a binary search as in
Pulsar, may then land a few entries off).

``httpCodecProcesses`` (brokerlab only) sets how many processes; 0 encodes on the loop,
and -1 (the default) picks ``default_codec_processes()``: none on a machine of one or two
cores, one on more. The trip costs CPU (about 1.3 us a 1 KiB message on the loop for
the socket copies and wake-ups, against some 4 us of encoding moved away; the process
itself spends 4-5), so it pays only where a core is free: on two cores, shared with a
client, ``brokerlab bench http`` measured the same throughput with it at about a quarter
more CPU a message. A process that exits while the broker runs takes the broker down (``died``).

Wire format over a Unix socket pair, little-endian, answers in request order:

- request: u32 body length, u32 max messages, u32 max size, u64 publish time (ms), body;
- answer: u32 length of what follows, i32 batch size (-1: refused), u32 entry count,
  the entries' u32 lengths, the entries.

Run as ``python -m broker.http.codec FD`` with FD one end of the pair.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import os
import signal
import socket
import struct
import sys
from collections.abc import Sequence

from storage_stub.child_process import SocketChild, SocketProtocol

REQUEST = struct.Struct("<IIIQ")
ANSWER = struct.Struct("<IiI")
REFUSED = ANSWER.pack(0, -1, 0)
#: smaller bodies are encoded on the loop: 16 KiB is about ten 1 KiB messages, whose
#: encoding (~30 us) is as long as a round trip to the process
MIN_BODY_BYTES = 16 * 1024
#: Linux clamps this to net.core.wmem_max / rmem_max; larger buffers take a whole
#: produce body of 100 x 1 KiB in one send
_SOCKET_BUFFER_BYTES = 1 << 20
_STOP_DEADLINE_S = 10.0
#: a process writes at most this many buffers with one sendmsg (Linux's IOV_MAX is 1024)
_MAX_IOVECS = 1000


def default_codec_processes() -> int:
    """What httpCodecProcesses=-1 means here: 1 with three or more usable cores (the loop,
    the process, and one for the storage writer and clients), else 0."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    return 1 if cores >= 3 else 0


Encoded = tuple[list[bytes], int]
"""The entries of a produce body and its batch size (0: unbatched)."""


class CodecError(Exception):
    """A codec process is gone: the broker cannot encode in it any more."""


class _Connection(SocketProtocol):
    """The loop's end of one process's socket: writes requests, reads answers and
    resolves them in order. Reading an answer is O(entries) slices of the bytes it
    arrived in; an answer split over several reads is collected until it is whole and
    then joined once: O(answer size) however many reads it took."""

    def __init__(self) -> None:
        super().__init__()
        self.pending: collections.deque[asyncio.Future[Encoded | None]] = collections.deque()
        self._partial = bytearray()
        #: bytes the answer begun in ``_partial`` needs in all (0: its header is not in)
        self._partial_needs = 0
        self.lost: BaseException | None = None

    def data_received(self, data: bytes) -> None:
        if self._partial:
            partial = self._partial
            partial += data
            if not self._partial_needs and len(partial) >= ANSWER.size:
                self._partial_needs = ANSWER.size + ANSWER.unpack_from(partial)[0]
            if not self._partial_needs or len(partial) < self._partial_needs:
                return  # the answer is not whole yet: no join
            data = bytes(partial)
            partial.clear()
            self._partial_needs = 0
        offset = 0
        size = len(data)
        header = ANSWER.size
        while size - offset >= header:
            length, batch_size, count = ANSWER.unpack_from(data, offset)
            start = offset + header
            end = start + length
            if end > size:
                break
            result: Encoded | None = None
            if batch_size >= 0:
                lengths = struct.unpack_from(f"<{count}I", data, start)
                starts = list(itertools.accumulate(lengths, initial=start + 4 * count))
                entries = list(map(data.__getitem__, map(slice, starts, starts[1:])))
                result = (entries, batch_size)
            future = self.pending.popleft()
            if not future.done():
                future.set_result(result)
            offset = end
        if offset < size:
            self._partial += memoryview(data)[offset:]
            if size - offset >= header:
                self._partial_needs = header + ANSWER.unpack_from(data, offset)[0]

    def connection_lost(self, exc: BaseException | None) -> None:
        self.lost = exc or CodecError("the codec process closed its socket")
        while self.pending:
            future = self.pending.popleft()
            if not future.done():
                future.set_exception(CodecError(f"codec process lost: {self.lost}"))


class CodecPool:
    """``processes`` codec processes, started by ``start`` and stopped by ``close``.
    ``encode`` sends a body to the process with the fewest requests pending: O(body)
    on the loop for the socket copy, O(entries) to take the answer apart."""

    def __init__(self, processes: int) -> None:
        if processes < 1:
            raise ValueError(f"a codec pool needs at least one process, not {processes}")
        self.size = processes
        self._processes: list[SocketChild[_Connection]] = []
        self._closing = False
        #: bodies encoded in a process, and bodies a process refused (the loop reported them)
        self.encoded = 0
        self.refused = 0
        #: set (to the reason) when a process exits while the broker runs
        self.died: asyncio.Future[str] = asyncio.get_running_loop().create_future()

    async def start(self) -> None:
        for _ in range(self.size):
            child = await SocketChild.start(
                "codec process",
                lambda fd: ("-m", "broker.http.codec", str(fd)),
                _Connection,
                self.died,
                socket_buffer_bytes=_SOCKET_BUFFER_BYTES,
            )
            self._processes.append(child)

    async def encode(
        self, body: bytes, max_messages: int, max_size: int, now_ms: int
    ) -> Encoded | None:
        """The body's entries and batch size, or None where the process refused it (the
        caller encodes it on the loop, which raises the error to report). CodecError
        if the process is gone."""
        if self._closing or self.died.cancelled():
            raise CodecError("the codec processes are stopping")
        if self.died.done():
            raise CodecError(self.died.result())
        try:
            # before a place in the queue is taken: a request not sent must not take one
            header = REQUEST.pack(len(body), max_messages, max_size, now_ms)
        except struct.error:
            return None  # past the wire format's fields (or not integers): the loop's
        chosen = min(self._processes, key=_pending_count)
        connection = chosen.connection
        transport = connection.transport
        if transport is None or connection.lost is not None or transport.is_closing():
            raise CodecError(f"codec process {chosen.process.pid} is not connected")
        future: asyncio.Future[Encoded | None] = asyncio.get_running_loop().create_future()
        connection.pending.append(future)
        transport.write(header)
        transport.write(body)
        result = await future
        if result is None:
            self.refused += 1
        else:
            self.encoded += 1
        return result

    async def close(self) -> None:
        """End every process's input: it answers what it was sent (read on as usual)
        and stops at the end of its input; then close the sockets. A process that does
        not stop within the deadline is killed."""
        self._closing = True
        for child in self._processes:
            child.end_input()
        for child in self._processes:
            await child.wait_stopped(_STOP_DEADLINE_S)
        if not self.died.done():
            self.died.cancel()


def _pending_count(entry: SocketChild[_Connection]) -> int:
    return len(entry.connection.pending)


# ---------------------------------------------------------------------- the process


def _send(sock: socket.socket, parts: Sequence[bytes]) -> None:
    """Write every part, in one sendmsg when the socket takes it all."""
    total = sum(map(len, parts))
    sent = sock.sendmsg(parts) if len(parts) <= _MAX_IOVECS else 0
    if sent < total:
        sock.sendall(b"".join(parts)[sent:])


def serve(sock: socket.socket) -> None:
    """Answer requests until the other end closes. O(body) each."""
    from pydantic import TypeAdapter

    from broker.http.models import ProduceRequest
    from broker.http.produce_encoding import encode_body

    adapter: TypeAdapter[ProduceRequest] = TypeAdapter(ProduceRequest)
    reader = sock.makefile("rb", buffering=_SOCKET_BUFFER_BYTES)
    while True:
        head = reader.read(REQUEST.size)
        if len(head) < REQUEST.size:
            return
        size, max_messages, max_size, now_ms = REQUEST.unpack(head)
        body = reader.read(size)
        if len(body) < size:
            return
        try:
            entries, batch_size = encode_body(
                body, adapter.validate_json, max_messages, max_size, now_ms
            )
            lengths = struct.pack(f"<{len(entries)}I", *map(len, entries))
            # an answer past the length field raises here as well: the loop's
            answer = [
                ANSWER.pack(len(lengths) + sum(map(len, entries)), batch_size, len(entries)),
                lengths,
                *entries,
            ]
        except Exception:  # the loop encodes it again and reports what it raises
            sock.sendall(REFUSED)
            continue
        _send(sock, answer)


def main(argv: Sequence[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m broker.http.codec FD", file=sys.stderr)
        return 2
    # it stops when the broker closes the socket; dying first would read as a crash
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    # a broken or reset socket: the broker went away first
    with (
        socket.socket(fileno=int(argv[0])) as sock,
        contextlib.suppress(BrokenPipeError, ConnectionResetError),
    ):
        serve(sock)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
