"""The entry log's compiled writer thread: the logs it writes hold exactly the bytes the
page-cache path writes, whatever the groups (buffer growth, rolls, reopens); it keeps the
payloads it was handed alive until the write is collected, and a write it was refused
leaves nothing queued; a write that fails is reported with its errno and cut back, and
it goes on writing; its CRCs are zlib's CRC-32 with either library; a bookie without it
writes the same entries."""

from __future__ import annotations

import asyncio
import errno
import mmap
import os
import pathlib
import random
import select
import subprocess
import sys
import zlib
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from isal import isal_zlib

from storage_stub.bookie import StorageFaultError, direct_writer
from storage_stub.bookie.direct_writer import ThreadWriter, thread_writer_built
from storage_stub.bookie.entry_log import EntryLogger
from storage_stub.bookie.frame import Frame, FrameLocation
from tests.storage.conftest import OpenStorage
from tests.storage.test_bookie_entry_log_direct import groups, log_bytes, read_back

pytestmark = pytest.mark.skipif(
    not thread_writer_built(), reason="storage_stub.bookie._writer is not built here"
)
DEADLINE_MS = 10_000


def distinct_frames(sizes: list[list[int]], first_entry: int, seed: int) -> list[Frame]:
    """Frames of entries of the given sizes (ledger 1, ids from ``first_entry``), each
    entry's bytes random: a copy out of order or out of place shows in the log."""
    rng = random.Random(seed)
    frames = []
    for frame_sizes in sizes:
        entries = [rng.randbytes(size) for size in frame_sizes]
        frames.append(Frame(1, first_entry, entries))
        first_entry += len(entries)
    return frames


async def write_plan(directory: pathlib.Path, size_limit: int, plan: list[Any]) -> None:
    """Write ``plan`` (groups of frames of entry sizes, or "reopen") as the bookie does:
    each planned write copied, sealed and written by the thread."""
    logger = EntryLogger(directory, size_limit, direct_io=True)
    writer = ThreadWriter()
    written: list[tuple[FrameLocation, Frame]] = []
    next_entry = 0
    try:
        for index, step in enumerate(plan):
            if step == "reopen":
                await writer.close()
                logger.close()
                logger = EntryLogger(directory, size_limit, direct_io=True)
                writer = ThreadWriter()
                continue
            frames = distinct_frames(step, next_entry, index)
            next_entry += sum(map(len, step))
            locations = await logger.write_direct_group(frames, writer.write, copy=False)
            written += zip(locations, frames, strict=True)
        for location, frame in written:
            assert read_back(logger, location, frame) == list(frame.entries)
    finally:
        await writer.close()
        logger.close()


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(plan=groups)
def test_the_writer_thread_writes_the_bytes_the_page_cache_path_writes(
    tmp_path_factory: pytest.TempPathFactory, plan: list[Any]
) -> None:
    root = tmp_path_factory.mktemp("logs")
    size_limit = 9_000  # several rolls in most plans
    asyncio.run(write_plan(root / "thread", size_limit, plan))
    buffered = EntryLogger(root / "buffered", size_limit, direct_io=False)
    next_entry = 0
    for index, step in enumerate(plan):
        if step == "reopen":
            buffered.close()
            buffered = EntryLogger(root / "buffered", size_limit, direct_io=False)
            continue
        buffered.write_group(distinct_frames(step, next_entry, index))
        next_entry += sum(map(len, step))
    buffered.close()
    assert log_bytes(root / "thread") == log_bytes(root / "buffered")


async def test_entries_it_cannot_take_are_copied_on_the_loop_to_the_same_bytes(
    tmp_path: pathlib.Path,
) -> None:
    """Entries that are not a list or tuple of bytes (here memoryviews) are refused by
    the thread; ThreadWriter copies them on the loop and the log is the same."""
    payloads = [b"first" * 100, b"second" * 300, b"third"]
    for name, entries in (("bytes", payloads), ("views", [memoryview(p) for p in payloads])):
        logger = EntryLogger(tmp_path / name, 1 << 20, direct_io=True)
        writer = ThreadWriter()
        try:
            frames = [Frame(1, 0, entries), Frame(1, 3, [b"next"])]
            locations = await logger.write_direct_group(frames, writer.write, copy=False)
            assert read_back(logger, locations[0], frames[0]) == payloads
        finally:
            await writer.close()
            logger.close()
    assert log_bytes(tmp_path / "views") == log_bytes(tmp_path / "bytes")


async def test_a_failed_write_is_reported_with_its_errno_and_the_next_one_goes_through(
    tmp_path: pathlib.Path,
) -> None:
    logger = EntryLogger(tmp_path, 1 << 20, direct_io=True)
    writer = ThreadWriter()
    read_only = os.open(tmp_path / "0.log", os.O_RDONLY)
    try:
        kept = Frame(1, 0, [b"k" * 700])
        await logger.write_direct_group([kept], writer.write, copy=False)
        offset = logger.write_offset
        lost = Frame(1, 1, [b"x" * 9000])
        write = logger.plan_direct([lost], copy=False)
        write.fd = read_only  # the thread's pwrite fails
        with pytest.raises(OSError) as failure:
            await writer.write(write)
        assert failure.value.errno == errno.EBADF
        with pytest.raises(StorageFaultError):
            logger.abandon_direct(write, failure.value)
        assert logger.write_offset == offset
        again = Frame(1, 1, [b"y" * 300])
        [location] = await logger.write_direct_group([again], writer.write, copy=False)
        assert location == FrameLocation(0, offset)
        assert read_back(logger, FrameLocation(0, 0), kept) == [b"k" * 700]
        assert read_back(logger, location, again) == [b"y" * 300]
    finally:
        os.close(read_only)
        await writer.close()
        logger.close()


async def test_a_cancelled_write_ends_on_the_thread_before_the_cancellation_is_raised(
    tmp_path: pathlib.Path,
) -> None:
    """The entry logger plans its next write (reusing the buffer, maybe rolling the log
    and closing the file) as soon as a write returns: a cancelled write must not return
    while the thread still copies or writes."""
    logger = EntryLogger(tmp_path, 1 << 30, direct_io=True)
    writer = ThreadWriter()
    try:
        big = Frame(1, 0, [os.urandom(1 << 20) for _ in range(32)])  # takes the thread a while
        task = asyncio.create_task(logger.write_direct_group([big], writer.write, copy=False))
        for _ in range(1000):  # until the task has handed the write over
            if writer._writer.busy:
                break
            await asyncio.sleep(0)
        assert writer._writer.busy
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert not writer._writer.busy
        again = Frame(1, 0, [b"z" * 5000])
        [location] = await logger.write_direct_group([again], writer.write, copy=False)
        assert read_back(logger, location, again) == [b"z" * 5000]
    finally:
        await writer.close()
        logger.close()


def wait_done(writer: Any) -> int:
    """Poll the writer's eventfd (with a deadline), then collect: the write's errno."""
    poller = select.poll()
    poller.register(writer.event_fd, select.POLLIN)
    assert poller.poll(DEADLINE_MS), "the write did not finish before the deadline"
    code = writer.collect()
    assert code is not None
    return int(code)


def raw_writer(isal: bool = True) -> Any:
    from storage_stub.bookie import _writer

    return _writer.Writer(isal_library=isal_zlib.__file__ if isal else None)


def test_the_payloads_stay_referenced_until_the_write_is_collected(
    tmp_path: pathlib.Path,
) -> None:
    """The thread reads the payloads without the GIL: the loop must not free them while
    the write is out, and must not leak them after."""
    writer = raw_writer()
    payload = os.urandom(5000)  # one object, referenced by the list and by this test
    entries = [payload, payload]
    fd = os.open(tmp_path / "log", os.O_RDWR | os.O_CREAT)
    buffer = mmap.mmap(-1, 16384)
    try:
        before = sys.getrefcount(payload)
        writer.submit(buffer, fd, 0, 16384, [(0, bytearray(36), entries)], [(0, 10036)])
        assert sys.getrefcount(payload) == before + 2
        with pytest.raises(BufferError):
            buffer.close()  # exported to the thread while the write is out
        assert wait_done(writer) == 0
        assert sys.getrefcount(payload) == before
        assert os.pread(fd, 10000, 36) == payload * 2
    finally:
        writer.close()
        buffer.close()
        os.close(fd)


def test_a_refused_write_queues_nothing_and_holds_nothing(tmp_path: pathlib.Path) -> None:
    writer = raw_writer()
    payload = os.urandom(100)
    fd = os.open(tmp_path / "log", os.O_RDWR | os.O_CREAT)
    buffer = mmap.mmap(-1, 4096)
    refused: list[tuple[list[Any], list[Any], type[Exception]]] = [
        ([(4000, b"h" * 32, [payload])], [], ValueError),  # overruns the buffer
        ([(0, b"h" * 32, [payload]), (0, b"h", [bytearray(3)])], [], TypeError),
        ([(0, b"h" * 32, [payload])], [(4090, 4100)], ValueError),  # seal outside
        ([(0, b"h" * 32, [payload])], [(0, 2)], ValueError),  # no room for a CRC
        ([(0.0, b"h", [payload])], [], TypeError),
        ([], [(8, -(2**63))], ValueError),  # an end whose difference would overflow
        ([(4090, b"h" * 32, [])], [], ValueError),  # the header alone overruns
    ]
    before = sys.getrefcount(payload)
    try:
        for copies, seals, error in refused:
            with pytest.raises(error):
                writer.submit(buffer, fd, 0, 4096, copies, seals)
            assert not writer.busy
            assert sys.getrefcount(payload) == before
        with pytest.raises(ValueError):
            writer.submit(buffer, fd, 0, 8192, [], [])  # longer than the buffer
        writer.submit(buffer, fd, 0, 4096, [(0, b"h" * 32, [payload])], [])
        with pytest.raises(RuntimeError):  # one write at a time
            writer.submit(buffer, fd, 0, 4096, [], [])
        assert wait_done(writer) == 0
        assert os.pread(fd, 132, 0) == b"h" * 32 + payload
        assert writer.collect() is None  # nothing out
    finally:
        writer.close()
        buffer.close()
        os.close(fd)
    with pytest.raises(RuntimeError):
        writer.submit(buffer, fd, 0, 0, [], [])


def test_close_lets_a_queued_write_finish_and_it_is_still_collected(
    tmp_path: pathlib.Path,
) -> None:
    writer = raw_writer()
    payload = os.urandom(1 << 20)
    fd = os.open(tmp_path / "log", os.O_RDWR | os.O_CREAT)
    buffer = mmap.mmap(-1, 2 << 20)
    try:
        writer.submit(buffer, fd, 0, 2 << 20, [(0, b"", [payload, payload])], [])
        writer.close()
        assert writer.collect() == 0
        assert os.pread(fd, 2 << 20, 0) == payload * 2
        writer.close()  # idempotent
    finally:
        buffer.close()
        os.close(fd)


_FORKED = """
import mmap, os, sys
from storage_stub.bookie import _writer
writer = _writer.Writer()
buffer = mmap.mmap(-1, 4096)
pid = os.fork()
if pid == 0:  # the child has no thread: a write it took would never run
    try:
        writer.submit(buffer, 1, 0, 0, [], [])
    except RuntimeError as error:
        print("refused:", error, flush=True)
    writer.close()  # no thread of its own to join
    os._exit(0)
os.waitpid(pid, 0)
writer.close()
"""


def test_a_forked_child_is_refused_the_parents_thread() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _FORKED], capture_output=True, text=True, timeout=60, check=True
    )
    assert "refused: the writer's thread is in another process" in done.stdout


@pytest.mark.parametrize("isal", [True, False])
def test_its_crcs_are_zlibs_crc32_whichever_library_computes_them(
    tmp_path: pathlib.Path, isal: bool
) -> None:
    writer = raw_writer(isal)
    assert writer.crc == ("isa-l" if isal else "zlib")
    rng = random.Random(7)
    fd = os.open(tmp_path / "log", os.O_RDWR | os.O_CREAT)
    buffer = mmap.mmap(-1, 1 << 20)
    frames = []
    position = 0
    for size in (5, 64, 1000, 65_537, 300_001):
        frames.append((position, bytearray(4) + rng.randbytes(28), [rng.randbytes(size)]))
        position += 32 + size
    seals = [(start, start + 32 + len(entries[0])) for start, _, entries in frames]
    try:
        writer.submit(buffer, fd, 0, 0, frames, seals)
        assert wait_done(writer) == 0
        for start, end in seals:
            assert buffer[start : start + 4] == zlib.crc32(buffer[start + 4 : end]).to_bytes(
                4, "big"
            )
    finally:
        writer.close()
        buffer.close()
        os.close(fd)
    assert raw_writer_with_library("/nonexistent/libisal.so").crc == "zlib"


def raw_writer_with_library(path: str) -> Any:
    from storage_stub.bookie import _writer

    writer = _writer.Writer(isal_library=path)
    writer.close()
    return writer


@pytest.mark.parametrize("sync_mode", ["none", "batch"])
async def test_a_bookie_without_the_compiled_writer_writes_the_same_entries(
    open_store: OpenStorage, monkeypatch: pytest.MonkeyPatch, sync_mode: str
) -> None:
    """Where ``_writer`` is not built the loop copies and the writer thread seals and
    writes; the entries read back (and survive a reopen) as with the thread."""
    from storage_stub.bookie import disk

    monkeypatch.setattr(disk, "thread_writer_built", lambda: False)
    storage = await open_store(storageMode="disk", syncMode=sync_mode)
    assert storage._disk is not None and storage._disk._writer is None
    bookie = storage.bookie
    ledger = await bookie.create_ledger()
    payloads = [os.urandom(n) for n in (1, 4095, 4096, 70_000)]
    assert await bookie.add_entries(ledger, payloads[:2]) == 1
    assert await bookie.add_entries(ledger, payloads[2:]) == 3
    assert await bookie.read_entries(ledger, 0, 3) == payloads
    await storage.close()
    reopened = await open_store(storageMode="disk", syncMode=sync_mode)
    assert await reopened.bookie.read_entries(ledger, 0, 3) == payloads


async def test_the_writer_is_closed_with_its_bookie(open_store: OpenStorage) -> None:
    storage = await open_store(storageMode="disk", syncMode="none")
    assert storage._disk is not None
    writer = storage._disk._writer
    assert isinstance(writer, direct_writer.ThreadWriter)
    ledger = await storage.bookie.create_ledger()
    await storage.bookie.add_entries(ledger, [b"a"])
    await storage.close()
    with pytest.raises(OSError) as failure:
        await writer.write(None)  # type: ignore[arg-type]
    assert failure.value.errno == errno.EIO


async def test_the_sync_thread_is_closed_with_its_bookie(open_store: OpenStorage) -> None:
    storage = await open_store(storageMode="disk", syncMode="batch")
    assert storage._disk is not None
    syncer = storage._disk._syncer
    assert isinstance(syncer, direct_writer.ThreadWriter)
    assert syncer is not storage._disk._writer
    ledger = await storage.bookie.create_ledger()
    await storage.bookie.add_entries(ledger, [b"a"])
    await storage.close()
    with pytest.raises(OSError) as failure:
        await syncer.fsync([])
    assert failure.value.errno == errno.EIO


async def test_its_fsyncs_report_the_first_failure_and_it_goes_on(tmp_path: pathlib.Path) -> None:
    """syncMode=batch hands a group's fsyncs to a second writer: the same thread, fsync
    jobs instead of writes."""
    writer = ThreadWriter()
    fd = os.open(tmp_path / "file", os.O_CREAT | os.O_WRONLY, 0o644)
    directory = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.write(fd, b"durable")
        await asyncio.wait_for(writer.fsync([fd, directory]), DEADLINE_MS / 1000)
        await asyncio.wait_for(writer.fsync([]), DEADLINE_MS / 1000)
        with pytest.raises(OSError) as failed:
            # an fd no process has: EBADF, and the fsync after it is not tried
            await asyncio.wait_for(writer.fsync([fd, 1 << 20, fd]), DEADLINE_MS / 1000)
        assert failed.value.errno == errno.EBADF
        await asyncio.wait_for(writer.fsync([fd]), DEADLINE_MS / 1000)
        with pytest.raises(TypeError):
            writer._writer.submit_fsync(["not a descriptor"])  # type: ignore[list-item]
        with pytest.raises(ValueError):
            writer._writer.submit_fsync([-1])
        assert not writer._writer.busy  # a refused job queues nothing
    finally:
        await writer.close()
        os.close(fd)
        os.close(directory)
