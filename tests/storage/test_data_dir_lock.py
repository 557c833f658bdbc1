"""One storage at a time on a data directory: a second open is refused naming the
holder's pid, and the directory is free again once the holder lets go."""

from __future__ import annotations

import os
import pathlib

import pytest

from storage_stub.bookie.data_dir_lock import DataDirInUseError, DataDirLock
from storage_stub.bookie.storage import open_storage
from storage_stub.config import StorageConfig


def test_a_second_lock_names_the_holder_and_the_first_release_frees_it(
    tmp_path: pathlib.Path,
) -> None:
    first = DataDirLock.acquire(tmp_path / "data")
    with pytest.raises(DataDirInUseError) as refused:
        DataDirLock.acquire(tmp_path / "data")
    assert refused.value.pid == os.getpid()
    assert refused.value.data_dir == tmp_path / "data"
    first.release()
    DataDirLock.acquire(tmp_path / "data").release()


async def test_open_storage_holds_the_directory_until_it_closes(tmp_path: pathlib.Path) -> None:
    config = StorageConfig(storageMode="disk")
    storage = await open_storage(config, tmp_path)
    with pytest.raises(DataDirInUseError):
        await open_storage(config, tmp_path)
    await storage.close()
    again = await open_storage(config, tmp_path)
    await again.close()
