"""A bookie killed with SIGKILL keeps every entry it acknowledged (syncMode=always, and
syncMode=none too: its entries are in the page cache, which a process kill leaves)."""

from __future__ import annotations

import asyncio
import os
import pathlib
import signal
import sys

import pytest

import storage_stub
from storage_stub.bookie import open_storage
from storage_stub.config import StorageConfig

REPO_ROOT = pathlib.Path(storage_stub.__file__).resolve().parent.parent

CHILD = """
import asyncio, pathlib, sys
from storage_stub.bookie import open_storage
from storage_stub.config import StorageConfig

def payload(ledger_id, entry_id):
    head = f"L{ledger_id}:E{entry_id}|".encode()
    return head * (1 + entry_id % 40)

async def main(data, sync_mode, log_size_limit):
    config = StorageConfig(syncMode=sync_mode, logSizeLimit=log_size_limit)
    storage = await open_storage(config, pathlib.Path(data))
    ledger = await storage.bookie.create_ledger()
    print(f"LEDGER {ledger}", flush=True)
    next_id = 0
    while True:
        batch = [payload(ledger, next_id + i) for i in range(1 + next_id % 4)]
        last = await storage.bookie.add_entries(ledger, batch)
        print(f"ACKED {last}", flush=True)
        next_id = last + 1

asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
"""


def payload(ledger_id: int, entry_id: int) -> bytes:
    head = f"L{ledger_id}:E{entry_id}|".encode()
    return head * (1 + entry_id % 40)


@pytest.mark.parametrize(
    ("sync_mode", "log_size_limit"),
    [
        pytest.param("always", 16 * 1024, id="always-small-logs"),
        # Big logs: the kill leaves a preallocated, zero-filled tail behind the last frame.
        pytest.param("none", 1 << 30, id="none-preallocated-log"),
    ],
)
async def test_every_acknowledged_entry_survives_a_sigkill(
    tmp_path: pathlib.Path, sync_mode: str, log_size_limit: int
) -> None:
    data = tmp_path / "data"
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        CHILD,
        str(data),
        sync_mode,
        str(log_size_limit),
        stdout=asyncio.subprocess.PIPE,
        env=env,
    )
    assert child.stdout is not None
    last_acked = -1
    acks = 0
    try:
        async with asyncio.timeout(60):  # a deadline against a hung child, not a wait
            words = (await child.stdout.readline()).split()
            assert words[0] == b"LEDGER", words
            ledger = int(words[1])
            while acks < 40:
                words = (await child.stdout.readline()).split()
                assert words[0] == b"ACKED", words
                last_acked = int(words[1])
                acks += 1
    finally:
        child.send_signal(signal.SIGKILL)
        await child.wait()
    assert child.returncode == -signal.SIGKILL

    newest_log = max((data / "entrylogs").glob("*.log"), key=lambda path: int(path.stem))
    size_at_kill = newest_log.stat().st_size
    storage = await open_storage(StorageConfig(syncMode=sync_mode), data)
    try:
        confirmed = await storage.bookie.last_add_confirmed(ledger)
        assert confirmed >= last_acked
        entries = await storage.bookie.read_entries(ledger, 0, confirmed)
        assert entries == [payload(ledger, e) for e in range(confirmed + 1)]
        assert await storage.bookie.recover_and_close(ledger) == confirmed
        assert await storage.bookie.add_entries(await storage.bookie.create_ledger(), [b"x"]) == 0
    finally:
        await storage.close()
    if sync_mode == "none":  # the zero-filled preallocation was there, and was cut off
        assert size_at_kill > newest_log.stat().st_size


CONCURRENT_CHILD = """
import asyncio, pathlib, sys
from storage_stub.bookie import open_storage
from storage_stub.config import StorageConfig

def payload(ledger_id, entry_id):
    head = f"L{ledger_id}:E{entry_id}|".encode()
    return head * (1 + entry_id % 40)

async def writer(bookie, ledger):
    next_id = 0
    while True:
        batch = [payload(ledger, next_id + i) for i in range(1 + next_id % 4)]
        last = await bookie.add_entries(ledger, batch)
        print(f"ACKED {ledger} {last}", flush=True)
        next_id = last + 1

async def main(data, sync_mode, log_size_limit, writers):
    config = StorageConfig(syncMode=sync_mode, logSizeLimit=log_size_limit)
    storage = await open_storage(config, pathlib.Path(data))
    ledgers = [await storage.bookie.create_ledger() for _ in range(writers)]
    print("LEDGERS " + " ".join(map(str, ledgers)), flush=True)
    await asyncio.gather(*(writer(storage.bookie, ledger) for ledger in ledgers))

asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])))
"""


@pytest.mark.parametrize("sync_mode", ["batch", "always"])
async def test_under_concurrent_adds_every_acknowledged_entry_survives_a_sigkill(
    tmp_path: pathlib.Path, sync_mode: str
) -> None:
    """Eight ledgers written at once (batch: groups pipelined, a group written while the
    one before it syncs), in 16 KiB logs that roll every few groups; killed mid-stream."""
    data = tmp_path / "data"
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        CONCURRENT_CHILD,
        str(data),
        sync_mode,
        str(16 * 1024),
        "8",
        stdout=asyncio.subprocess.PIPE,
        env=env,
    )
    assert child.stdout is not None
    acked: dict[int, int] = {}
    acks = 0
    try:
        async with asyncio.timeout(60):  # a deadline against a hung child, not a wait
            words = (await child.stdout.readline()).split()
            assert words[0] == b"LEDGERS", words
            acked = {int(word): -1 for word in words[1:]}
            while acks < 400:
                words = (await child.stdout.readline()).split()
                assert words[0] == b"ACKED", words
                ledger, last = int(words[1]), int(words[2])
                assert last > acked[ledger], "acknowledgements follow entry ids"
                acked[ledger] = last
                acks += 1
    finally:
        child.send_signal(signal.SIGKILL)
        await child.wait()
    assert child.returncode == -signal.SIGKILL
    assert len(list((data / "entrylogs").glob("*.log"))) > 2, "the logs rolled under load"

    storage = await open_storage(StorageConfig(syncMode=sync_mode), data)
    try:
        for ledger, last_acked in acked.items():
            confirmed = await storage.bookie.last_add_confirmed(ledger)
            assert confirmed >= last_acked
            entries = await storage.bookie.read_entries(ledger, 0, confirmed)
            assert entries == [payload(ledger, e) for e in range(confirmed + 1)]
            assert await storage.bookie.recover_and_close(ledger) == confirmed
    finally:
        await storage.close()
