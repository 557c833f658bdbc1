"""A bookie killed with SIGKILL keeps every entry it acknowledged (syncMode=always)."""

from __future__ import annotations

import asyncio
import os
import pathlib
import signal
import sys

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

async def main(data):
    config = StorageConfig(syncMode="always", logSizeLimit=16 * 1024)
    storage = await open_storage(config, pathlib.Path(data))
    ledger = await storage.bookie.create_ledger()
    print(f"LEDGER {ledger}", flush=True)
    next_id = 0
    while True:
        batch = [payload(ledger, next_id + i) for i in range(1 + next_id % 4)]
        last = await storage.bookie.add_entries(ledger, batch)
        print(f"ACKED {last}", flush=True)
        next_id = last + 1

asyncio.run(main(sys.argv[1]))
"""


def payload(ledger_id: int, entry_id: int) -> bytes:
    head = f"L{ledger_id}:E{entry_id}|".encode()
    return head * (1 + entry_id % 40)


async def test_every_acknowledged_entry_survives_a_sigkill(tmp_path: pathlib.Path) -> None:
    data = tmp_path / "data"
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-c", CHILD, str(data), stdout=asyncio.subprocess.PIPE, env=env
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

    storage = await open_storage(StorageConfig(syncMode="always"), data)
    try:
        confirmed = await storage.bookie.last_add_confirmed(ledger)
        assert confirmed >= last_acked
        entries = await storage.bookie.read_entries(ledger, 0, confirmed)
        assert entries == [payload(ledger, e) for e in range(confirmed + 1)]
        assert await storage.bookie.recover_and_close(ledger) == confirmed
    finally:
        await storage.close()
