"""The entry log's O_DIRECT writes, on a compiled thread that never takes the GIL.

With ``dbStorage_directIOEntryLogger`` the entry logger places each group of adds in its
page-aligned buffer (``EntryLogger.plan_direct``), and three things remain per group:
copy the payloads there, fill in the frames' CRCs, and write the buffer with one
block-aligned ``pwrite``. ``ThreadWriter`` has ``storage_stub.bookie._writer`` do all
three on a POSIX thread of its own, which touches no Python object and so never waits
for the GIL nor makes the loop wait for it: the loop hands over pointers to the payloads
(keeping them referenced until the write is collected) and hears of the end through an
eventfd it watches. The CRC is ISA-L's, from the ``isal`` package's own library (the
same function the Python path calls), else zlib's.

What it replaced, measured with 16 producers of 100 x 1 KiB messages (syncMode=none, four
alternating rounds): with a process that mapped the same buffer (the loop copied, the
process sealed and wrote) a produce request cost the loop 366-390 us, with this thread
341-353 us, and produce rose 2-14%. A Python thread had cost more than the process: it
shares the loop's GIL, about 230 us of the loop's CPU a round trip in GIL hand-overs.

Without the compiled module (no C compiler, or no zlib headers) the bookie copies on
the loop and runs ``DirectWrite.execute`` on its writer thread instead: the same bytes,
slower.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os

from isal import isal_zlib

from storage_stub.bookie.direct_io import DirectWrite

try:  # compiled with the package where a C compiler and zlib's headers allow (setup.py)
    from storage_stub.bookie import _writer as _compiled_writer
except ImportError:
    _compiled_writer = None  # type: ignore[assignment]

log = logging.getLogger(__name__)


def thread_writer_built() -> bool:
    """Whether ``ThreadWriter`` can run (``storage_stub.bookie._writer`` is built)."""
    return _compiled_writer is not None


def thread_writer_crc() -> str | None:
    """Whose CRC-32 the writer thread would seal frames with ("isa-l" or "zlib"); None
    where it is not built. Starts and joins a thread to ask."""
    if _compiled_writer is None:
        return None
    writer = _compiled_writer.Writer(isal_library=isal_zlib.__file__)
    writer.close()
    return writer.crc


class ThreadWriter:
    """The entry logger's direct writes on a compiled thread (``_writer.Writer``) that
    never takes the GIL: it copies the frames' payloads into the buffer, fills in their
    CRCs and does the pwrite, and the loop hears of the end through an eventfd. Per
    write on the loop: O(entries) to hand over the payloads (no copy), one wakeup.

    Make it on the loop, ``write`` planned writes (planned with ``copy=False``; one at a
    time), ``close`` it (its owner, the bookie, does in ``close``). The thread reports
    every failure as the write's errno and has no other way to fail: nothing runs on it
    that could raise, and it holds no lock the loop waits for while it writes.
    """

    __slots__ = ("_closed", "_loop", "_waiting", "_writer")

    def __init__(self) -> None:
        if _compiled_writer is None:
            raise RuntimeError("storage_stub.bookie._writer is not built")
        self._loop = asyncio.get_running_loop()
        # the isal package's own copy of ISA-L, whose CRC-32 the Python path uses too
        self._writer = _compiled_writer.Writer(isal_library=isal_zlib.__file__)
        if self._writer.crc != "isa-l":
            log.warning(
                "the entry log writer seals frames with zlib's CRC-32: %s has no "
                "crc32_gzip_refl, and zlib's is about 15 times slower",
                isal_zlib.__file__,
            )
        self._waiting: asyncio.Future[int] | None = None
        self._closed = False
        self._loop.add_reader(self._writer.event_fd, self._on_done)

    def _on_done(self) -> None:
        code = self._writer.collect()
        waiting = self._waiting
        if code is None or waiting is None:
            return
        self._waiting = None
        if not waiting.done():
            waiting.set_result(code)

    async def write(self, write: DirectWrite) -> None:
        """Have the thread copy the write's frames, fill in their CRCs and write it: O(its
        entries) on the loop. OSError with the write's errno; the write may then have
        happened in part. Cancelled, it still waits for the thread's write to end before
        it raises CancelledError."""
        if self._closed:
            raise OSError(errno.EIO, "the entry log writer is closed")
        writer = self._writer
        if writer.busy:  # one write at a time: a caller that did not wait for the last
            raise OSError(errno.EBUSY, "the entry log's last write is still out")
        try:
            writer.submit(
                write.buffer, write.fd, write.start, write.length, write.copies, write.unsealed
            )
        except TypeError:  # entries that are not a list or tuple of bytes: copy them here
            write.copy()
            writer.submit(write.buffer, write.fd, write.start, write.length, [], write.unsealed)
        write.copies = []
        code = await self._wait()
        if code:
            raise OSError(code, f"entry log write: {os.strerror(code)}")

    async def fsync(self, fds: list[int]) -> None:
        """Have the thread fsync each of ``fds`` in turn: O(fds) on the loop, one wakeup,
        and neither the loop nor a Python thread waits on the device or, once the device
        answers, on the GIL. OSError with the errno of the first fsync that failed (the
        ones after it are not tried). Cancelled, it still waits for the thread first."""
        if self._closed:
            raise OSError(errno.EIO, "the entry log writer is closed")
        writer = self._writer
        if writer.busy:
            raise OSError(errno.EBUSY, "the writer's last job is still out")
        writer.submit_fsync(fds)
        code = await self._wait()
        if code:
            raise OSError(code, f"fsync: {os.strerror(code)}")

    async def _wait(self) -> int:
        """The submitted job's errno (0: done)."""
        waiting = self._waiting = self._loop.create_future()
        try:
            return await waiting
        except asyncio.CancelledError:
            await self._outlast()
            raise

    async def _outlast(self) -> None:
        """A cancelled ``write``'s write goes on on the thread, into the entry logger's
        buffer and file: wait (cancelled again or not) until it has ended, so that the
        logger plans nothing (a buffer reuse, a roll that closes the file) under it."""
        while self._writer.busy:
            ended = self._waiting = self._loop.create_future()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.shield(ended)

    async def close(self) -> None:
        """Let a write still out finish, then end the thread. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._loop.remove_reader(self._writer.event_fd)
        self._writer.close()  # joins the thread: at most one write left to finish
        self._on_done()  # that write's outcome
