"""The entry log writer process: the logs it writes hold exactly the bytes the page-cache
path writes, whatever the groups (buffer growth, rolls, reopens); a write it fails is
reported with its errno and cut back, and it goes on writing; a writer that dies fails
the bookie's adds and says so, and ``brokerlab serve`` stops on it; Ctrl-C does not reach
it, the broker stops it."""

from __future__ import annotations

import asyncio
import errno
import os
import pathlib
import signal
import socket
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from broker.bench.http import child_pids
from storage_stub.bookie import StorageFaultError
from storage_stub.bookie.direct_writer import DirectWriter, _Requests
from storage_stub.bookie.entry_log import EntryLogger, Frame, FrameLocation
from tests.conftest import BrokerProcessFactory, child_processes
from tests.storage.conftest import OpenStorage
from tests.storage.test_bookie_entry_log_direct import frames_of, groups, log_bytes, read_back

TOPIC = "public/default/t"
WRITER_COMMAND = "storage_stub.bookie.direct_writer"
DEADLINE_S = 10.0


async def write_plan(directory: pathlib.Path, size_limit: int, plan: list[Any]) -> None:
    """Write ``plan`` (groups of frames of entry sizes, or "reopen") as the bookie does:
    frames copied on the loop, each planned write run by a writer process."""
    logger = EntryLogger(directory, size_limit, direct_io=True)
    writer = DirectWriter(logger.buffer_fd)
    await writer.start()
    written: list[tuple[FrameLocation, Frame]] = []
    next_entry = 0
    try:
        for step in plan:
            if step == "reopen":
                await writer.close()
                logger.close()
                logger = EntryLogger(directory, size_limit, direct_io=True)
                writer = DirectWriter(logger.buffer_fd)
                await writer.start()
                continue
            frames = frames_of(step, next_entry)
            next_entry += sum(map(len, step))
            locations = await logger.write_direct_group(frames, writer.write)
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
def test_the_writer_process_writes_the_bytes_the_page_cache_path_writes(
    tmp_path_factory: pytest.TempPathFactory, plan: list[Any]
) -> None:
    root = tmp_path_factory.mktemp("logs")
    size_limit = 9_000  # several rolls in most plans
    asyncio.run(write_plan(root / "process", size_limit, plan))
    buffered = EntryLogger(root / "buffered", size_limit, direct_io=False)
    next_entry = 0
    for step in plan:
        if step == "reopen":
            buffered.close()
            buffered = EntryLogger(root / "buffered", size_limit, direct_io=False)
            continue
        buffered.write_group(frames_of(step, next_entry))
        next_entry += sum(map(len, step))
    buffered.close()
    assert log_bytes(root / "process") == log_bytes(root / "buffered")


async def test_a_write_the_process_fails_is_reported_and_the_next_one_goes_through(
    tmp_path: pathlib.Path,
) -> None:
    logger = EntryLogger(tmp_path, 1 << 20, direct_io=True)
    writer = DirectWriter(logger.buffer_fd)
    await writer.start()
    try:
        kept = Frame(1, 0, [b"k" * 700])
        await logger.write_direct_group([kept], writer.write)
        offset = logger.write_offset
        lost = Frame(1, 1, [b"x" * 9000])
        write = logger.plan_direct([lost])
        write.path = str(tmp_path / "missing" / "0.log")  # the process cannot open it
        with pytest.raises(OSError) as failure:
            await writer.write(write)
        assert failure.value.errno == errno.ENOENT
        with pytest.raises(StorageFaultError):
            logger.abandon_direct(write, failure.value)
        assert logger.write_offset == offset
        again = Frame(1, 1, [b"y" * 300])
        [location] = await logger.write_direct_group([again], writer.write)
        assert location == FrameLocation(0, offset)
        assert read_back(logger, FrameLocation(0, 0), kept) == [b"k" * 700]
        assert read_back(logger, location, again) == [b"y" * 300]
    finally:
        await writer.close()
        logger.close()


async def test_a_dead_writer_process_fails_the_adds_and_is_reported(
    open_store: OpenStorage,
) -> None:
    storage = await open_store(storageMode="disk", syncMode="none")
    bookie = storage.bookie
    ledger = await bookie.create_ledger()
    assert await bookie.add_entries(ledger, [b"a", b"b"]) == 1
    (writer,) = child_processes(os.getpid(), WRITER_COMMAND)
    os.kill(writer, signal.SIGKILL)
    assert storage.died is not None
    reason = await asyncio.wait_for(storage.died, 30)
    assert f"entry log writer process {writer} exited" in reason
    with pytest.raises(StorageFaultError):
        await bookie.add_entries(ledger, [b"c"])
    assert await bookie.read_entries(ledger, 0, 1) == [b"a", b"b"]


@pytest.mark.slow
async def test_brokerlab_serve_stops_when_its_writer_process_dies(
    broker_process: BrokerProcessFactory,
) -> None:
    broker = broker_process()
    client = await broker.start()
    assert broker.process is not None
    status, body = await client.request(
        "POST", f"/topics/persistent/{TOPIC}", json={"messages": [{"payload": "QQ=="}]}
    )
    assert status == 200, body
    assert await broker.exit_code_after_killing(WRITER_COMMAND) == 1
    assert any("entry log writer" in line and "shutting down" in line for line in broker.output)


@pytest.mark.slow
async def test_ctrl_c_reaching_the_writer_process_leaves_the_broker_to_stop_it(
    broker_process: BrokerProcessFactory,
) -> None:
    """Ctrl-C signals the terminal's foreground process group: the writer is in a group
    of its own and ignores SIGINT and SIGTERM anyway; it writes on, and stops once the
    broker has committed what is pending and closed its socket."""
    broker = broker_process()
    client = await broker.start()
    assert broker.process is not None
    (writer,) = child_processes(broker.process.pid, WRITER_COMMAND)
    assert os.getpgid(writer) != os.getpgid(broker.process.pid)
    for payload in ("QQ==", "Qg=="):
        status, body = await client.request(
            "POST", f"/topics/persistent/{TOPIC}", json={"messages": [{"payload": payload}]}
        )
        assert status == 200, body
        # the process has written (it answered): now the signals find it running
        os.kill(writer, signal.SIGINT)
        os.kill(writer, signal.SIGTERM)
    assert await broker.stop() == 0
    assert not any("entry log writer" in line for line in broker.output), broker.output
    assert writer not in child_pids(broker.process.pid)
    with pytest.raises(ProcessLookupError):
        os.kill(writer, 0)


def test_the_process_reads_requests_whole_however_they_arrive() -> None:
    """Requests split across reads, and several in one read, come out whole and in
    order; the end of the input gives a short read. (Reads run on a thread so that one
    which waits for bytes already sent fails the test instead of hanging it.)"""
    ours, theirs = socket.socketpair()
    pool = ThreadPoolExecutor(1)
    try:
        requests = _Requests(theirs)

        def read(size: int) -> bytes:
            return pool.submit(requests.read, size).result(timeout=DEADLINE_S)

        ours.sendall(b"abc" + b"defgh")  # two requests in one write
        assert read(3) == b"abc"
        assert read(5) == b"defgh"
        ours.sendall(b"ij")  # one request in two writes
        ours.sendall(b"klm")
        assert read(5) == b"ijklm"
        ours.sendall(b"no")
        ours.shutdown(socket.SHUT_WR)
        assert read(4) == b"no"
        assert read(4) == b""
    finally:
        ours.close()  # the end of the input for a read still waiting
        pool.shutdown()
        theirs.close()
