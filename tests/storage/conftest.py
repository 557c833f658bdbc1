from __future__ import annotations

import pathlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from storage_stub.bookie import Storage, open_storage
from storage_stub.config import StorageConfig

OpenStorage = Callable[..., Awaitable[Storage]]


@pytest.fixture
async def open_store(tmp_path: pathlib.Path) -> AsyncIterator[OpenStorage]:
    """Open storage on ``tmp_path / "data"`` (reopenable); closes whatever is left open."""
    opened: list[Storage] = []

    async def _open(**settings: Any) -> Storage:
        storage = await open_storage(StorageConfig(**settings), tmp_path / "data", seed=7)
        opened.append(storage)
        return storage

    yield _open
    for storage in opened:
        await storage.close()


STORAGE_KINDS: dict[str, dict[str, Any]] = {
    "memory": {"storageMode": "memory"},
    "disk-none": {"storageMode": "disk", "syncMode": "none"},
    "disk-always": {"storageMode": "disk", "syncMode": "always"},
    "disk-batch": {"storageMode": "disk", "syncMode": "batch", "journalMaxGroupWaitMSec": 1.0},
    # the entry logs through the page cache (the default writes them with O_DIRECT)
    "disk-none-buffered": {
        "storageMode": "disk",
        "syncMode": "none",
        "dbStorage_directIOEntryLogger": False,
    },
    "disk-batch-buffered": {
        "storageMode": "disk",
        "syncMode": "batch",
        "journalMaxGroupWaitMSec": 1.0,
        "dbStorage_directIOEntryLogger": False,
    },
}


@pytest.fixture(params=list(STORAGE_KINDS))
async def storage(request: pytest.FixtureRequest, open_store: OpenStorage) -> Storage:
    """Every implementation: in memory, and on disk in each sync mode."""
    return await open_store(**STORAGE_KINDS[request.param])


@pytest.fixture(params=["always", "batch", "none"])
def sync_mode(request: pytest.FixtureRequest) -> str:
    mode: str = request.param
    return mode
