"""The object store's async contract and the tiered store's errors.

An object store holds immutable objects (bytes) under keys the tiered store makes up
(never user input). Every call of the instrumented store goes through the object
latency model and fault injector and is counted; a failed call changes nothing.
"""

from __future__ import annotations

from typing import Protocol

from storage_stub.bookie.api import BookieError

#: Operation names of the object store's latency model, fault injector and counters.
OBJECT_OPERATIONS: tuple[str, ...] = ("objectGet", "objectPut", "objectDelete")


class TieredStorageError(BookieError):
    """Base of the tiered store's own failures (injected faults stay StorageFaultError)."""


class NoSuchObjectError(TieredStorageError):
    def __init__(self, key: str) -> None:
        super().__init__(f"object {key!r} does not exist")
        self.key = key


class CorruptObjectError(TieredStorageError):
    def __init__(self, key: str, detail: str) -> None:
        super().__init__(f"object {key!r} is corrupt: {detail}")
        self.key = key


class ObjectStore(Protocol):
    """Immutable objects by key (S3's model: whole puts, ranged gets)."""

    async def put(self, key: str, data: bytes) -> None:
        """Store ``data`` under ``key`` (replacing any object of that key)."""
        ...

    async def get(self, key: str) -> bytes:
        """The whole object. NoSuchObjectError if absent."""
        ...

    async def get_range(self, key: str, start: int, end: int) -> bytes:
        """Bytes ``start..end`` (end exclusive, clipped to the object's size)."""
        ...

    async def delete(self, key: str) -> None:
        """Remove the object (idempotent for absent keys)."""
        ...

    async def keys(self) -> list[str]:
        """Every key, sorted (tests and recovery; not counted as an operation)."""
        ...
