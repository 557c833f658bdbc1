"""Object stores: in memory (tests) or one file per object under a directory, and the
instrumented wrapper every tiered-store call goes through."""

from __future__ import annotations

import asyncio
import contextlib
import os
import pathlib
import re
from typing import TYPE_CHECKING

from storage_stub.bookie.api import os_fault
from storage_stub.tiered.api import NoSuchObjectError, ObjectStore
from storage_stub.tiered.instruments import (
    ObjectFaultInjector,
    ObjectLatencyModel,
    ObjectStoreCounters,
)

if TYPE_CHECKING:
    from storage_stub.config import StorageConfig

#: Keys are made by the tiered store; this only guards the file system against a bug.
_KEY = re.compile(r"^[a-z0-9][a-z0-9._-]{0,127}$")


def _checked(key: str) -> str:
    if not _KEY.match(key):
        raise ValueError(f"invalid object key {key!r}")
    return key


class InMemoryObjectStore:
    """Objects in a dict. Every call O(1) plus the bytes copied by a ranged get."""

    __slots__ = ("_objects",)

    def __init__(self) -> None:
        self._objects: dict[str, bytes] = {}

    async def put(self, key: str, data: bytes) -> None:
        self._objects[_checked(key)] = bytes(data)

    async def get(self, key: str) -> bytes:
        try:
            return self._objects[key]
        except KeyError:
            raise NoSuchObjectError(key) from None

    async def get_range(self, key: str, start: int, end: int) -> bytes:
        data = await self.get(key)
        return data[max(0, start) : max(0, end)]

    async def delete(self, key: str) -> None:
        self._objects.pop(key, None)

    async def keys(self) -> list[str]:
        return sorted(self._objects)


class DiskObjectStore:
    """One file per object under ``directory``, written to a temporary name, fsynced and
    renamed into place (a crash leaves the old object or the new one, never half of one).
    File I/O runs in a worker thread. A failed file operation raises StorageFaultError
    (NoSpaceError on a full disk; a failed put removes its temporary file)."""

    __slots__ = ("_directory",)

    def __init__(self, directory: pathlib.Path) -> None:
        self._directory = directory
        directory.mkdir(parents=True, exist_ok=True)

    @property
    def directory(self) -> pathlib.Path:
        return self._directory

    def _path(self, key: str) -> pathlib.Path:
        return self._directory / _checked(key)

    async def put(self, key: str, data: bytes) -> None:
        await asyncio.to_thread(self._put, self._path(key), bytes(data))

    @staticmethod
    def _put(path: pathlib.Path, data: bytes) -> None:
        temporary = path.with_name(path.name + ".tmp")
        try:
            with open(temporary, "wb") as file:
                file.write(data)
                file.flush()
                os.fsync(file.fileno())
            os.replace(temporary, path)
        except OSError as error:
            with contextlib.suppress(OSError):
                temporary.unlink(missing_ok=True)
            raise os_fault("objectPut", f"writing object {path.name}", error) from None

    async def get(self, key: str) -> bytes:
        return await asyncio.to_thread(self._read, self._path(key), key, 0, None)

    async def get_range(self, key: str, start: int, end: int) -> bytes:
        return await asyncio.to_thread(self._read, self._path(key), key, start, end)

    @staticmethod
    def _read(path: pathlib.Path, key: str, start: int, end: int | None) -> bytes:
        start = max(0, start)
        try:
            with open(path, "rb") as file:
                file.seek(start)
                return file.read() if end is None else file.read(max(0, end - start))
        except FileNotFoundError:
            raise NoSuchObjectError(key) from None
        except OSError as error:
            raise os_fault("objectGet", f"reading object {key}", error) from None

    async def delete(self, key: str) -> None:
        try:
            await asyncio.to_thread(self._path(key).unlink, True)
        except OSError as error:
            raise os_fault("objectDelete", f"deleting object {key}", error) from None

    async def keys(self) -> list[str]:
        return await asyncio.to_thread(self._keys, self._directory)

    @staticmethod
    def _keys(directory: pathlib.Path) -> list[str]:
        try:
            names = [path.name for path in directory.iterdir()]
        except OSError as error:
            raise os_fault("objectGet", f"listing {directory}", error) from None
        return sorted(name for name in names if not name.endswith(".tmp"))


class InstrumentedObjectStore:
    """An ObjectStore whose calls are checked for faults, delayed and counted.

    The fault check and the delay come before the call reaches the store, so an injected
    failure changes nothing. Cost per call: two dict lookups, a few int bumps.
    """

    __slots__ = ("_inner", "counters", "faults", "latency")

    def __init__(
        self,
        inner: ObjectStore,
        *,
        faults: ObjectFaultInjector | None = None,
        latency: ObjectLatencyModel | None = None,
        counters: ObjectStoreCounters | None = None,
    ) -> None:
        self._inner = inner
        self.faults = faults if faults is not None else ObjectFaultInjector()
        self.latency = latency if latency is not None else ObjectLatencyModel()
        self.counters = counters if counters is not None else ObjectStoreCounters()

    @property
    def inner(self) -> ObjectStore:
        return self._inner

    async def put(self, key: str, data: bytes) -> None:
        counters = self.counters
        counters.objectPuts += 1
        try:
            await self.faults.check("objectPut")
            await self.latency.delay("objectPut")
            await self._inner.put(key, data)
        except Exception:
            counters.objectPutErrors += 1
            raise
        counters.bytesWritten += len(data)

    async def get(self, key: str) -> bytes:
        counters = self.counters
        counters.objectGets += 1
        try:
            await self.faults.check("objectGet")
            await self.latency.delay("objectGet")
            data = await self._inner.get(key)
        except Exception:
            counters.objectGetErrors += 1
            raise
        counters.bytesRead += len(data)
        return data

    async def get_range(self, key: str, start: int, end: int) -> bytes:
        counters = self.counters
        counters.objectGets += 1
        try:
            await self.faults.check("objectGet")
            await self.latency.delay("objectGet")
            data = await self._inner.get_range(key, start, end)
        except Exception:
            counters.objectGetErrors += 1
            raise
        counters.bytesRead += len(data)
        return data

    async def delete(self, key: str) -> None:
        counters = self.counters
        counters.objectDeletes += 1
        try:
            await self.faults.check("objectDelete")
            await self.latency.delay("objectDelete")
            await self._inner.delete(key)
        except Exception:
            counters.objectDeleteErrors += 1
            raise

    async def keys(self) -> list[str]:
        return await self._inner.keys()


def open_object_store(
    config: StorageConfig, directory: pathlib.Path | None, *, seed: int | None = None
) -> InstrumentedObjectStore:
    """The object store ``config`` describes, instrumented: files under ``directory``
    for ``storageMode=disk`` (created if missing), a dict for ``memory``. ``seed`` makes
    the latency and fault draws reproducible."""
    inner: ObjectStore
    if config.storageMode == "memory":
        inner = InMemoryObjectStore()
    else:
        if directory is None:
            raise ValueError("storageMode=disk needs a directory for the object store")
        inner = DiskObjectStore(directory)
    return InstrumentedObjectStore(
        inner,
        faults=ObjectFaultInjector(seed=seed),
        latency=ObjectLatencyModel.from_config(config, seed=seed),
    )
