"""Property: any sequence of bookie calls answers the same in memory and on disk, even when
the disk bookie is closed and reopened between calls."""

from __future__ import annotations

import asyncio
import pathlib
import tempfile
from typing import Any, Literal

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from storage_stub.bookie import Storage, open_storage
from storage_stub.config import StorageConfig

LEDGER_SLOTS = 4

operation = st.one_of(
    st.tuples(st.just("create")),
    st.tuples(
        st.just("add"),
        st.integers(0, LEDGER_SLOTS - 1),
        st.lists(st.binary(max_size=64), min_size=1, max_size=6),
    ),
    st.tuples(
        st.just("read"), st.integers(0, LEDGER_SLOTS - 1), st.integers(-1, 12), st.integers(0, 4)
    ),
    st.tuples(st.just("floor"), st.integers(0, LEDGER_SLOTS - 1)),
    st.tuples(st.just("close"), st.integers(0, LEDGER_SLOTS - 1)),
    st.tuples(st.just("recover"), st.integers(0, LEDGER_SLOTS - 1)),
    st.tuples(st.just("delete"), st.integers(0, LEDGER_SLOTS - 1)),
    st.tuples(st.just("metadata"), st.integers(0, LEDGER_SLOTS - 1)),
    st.tuples(st.just("reopen")),
)


async def apply(storage: Storage, ledgers: list[int], op: tuple[Any, ...]) -> object:
    """Run one call; the answer is its result or the name of the error it raised."""
    bookie = storage.bookie
    kind = op[0]
    try:
        if kind == "create":
            ledgers.append(await bookie.create_ledger())
            return "created"
        ledger = ledgers[op[1] % len(ledgers)] if ledgers else 999
        if kind == "add":
            return await bookie.add_entries(ledger, op[2])
        if kind == "read":
            return await bookie.read_entries(ledger, op[2], op[2] + op[3])
        if kind == "floor":
            return await bookie.get_last_entry_in_ledger(ledger)
        if kind == "close":
            return await bookie.close_ledger(ledger)
        if kind == "recover":
            return await bookie.recover_and_close(ledger)
        if kind == "delete":
            await bookie.delete_ledger(ledger)
            return None
        if kind == "metadata":
            metadata = await bookie.ledger_metadata(ledger)
            return (metadata.closed, metadata.last_entry_id, metadata.length)
    except Exception as error:
        return type(error).__name__
    raise AssertionError(kind)


SyncMode = Literal["always", "batch", "none"]


async def run_both(
    operations: list[tuple[Any, ...]], data: pathlib.Path, sync_mode: SyncMode
) -> None:
    config = StorageConfig(syncMode=sync_mode, journalMaxGroupWaitMSec=0, logSizeLimit=2048)
    memory = await open_storage(StorageConfig(storageMode="memory"), None)
    disk = await open_storage(config, data)
    memory_ledgers: list[int] = []
    disk_ledgers: list[int] = []
    try:
        for op in operations:
            if op[0] == "reopen":
                await disk.close()
                disk = await open_storage(config, data)
                continue
            expected = await apply(memory, memory_ledgers, op)
            assert await apply(disk, disk_ledgers, op) == expected, op
    finally:
        await disk.close()
        await memory.close()


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    operations=st.lists(operation, min_size=1, max_size=30),
    sync_mode=st.sampled_from(["always", "batch", "none"]),
)
def test_memory_and_disk_bookies_answer_every_call_alike(
    operations: list[tuple[Any, ...]], sync_mode: SyncMode
) -> None:
    with tempfile.TemporaryDirectory() as data:
        asyncio.run(run_both(operations, pathlib.Path(data), sync_mode))
