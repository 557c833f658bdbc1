"""Per-operation counters of the storage stub, cheap enough to bump on every call."""

from __future__ import annotations

from storage_stub.bookie.api import OPERATIONS


class OpCounter:
    """Counts for one operation: calls, failed calls, entries and bytes moved by successes."""

    __slots__ = ("bytes", "calls", "entries", "errors")

    def __init__(self) -> None:
        self.calls = 0
        self.errors = 0
        self.entries = 0
        self.bytes = 0

    def snapshot(self) -> dict[str, int]:
        return {
            "calls": self.calls,
            "errors": self.errors,
            "entries": self.entries,
            "bytes": self.bytes,
        }


class OpCounters:
    """One OpCounter per operation of ``api.OPERATIONS``, as attributes named after it.

    Hot paths keep a reference to their OpCounter and bump plain int slots: O(1), no
    allocation. ``getFloor`` is not an operation: it counts the floor seeks the bookie
    made on its location index (``getLastEntry`` calls and ledger recoveries).
    """

    __slots__ = (
        "addEntries",
        "closeLedger",
        "createLedger",
        "deleteLedger",
        "getFloor",
        "getLastEntry",
        "metadataDelete",
        "metadataGet",
        "metadataPut",
        "readEntries",
    )

    createLedger: OpCounter
    addEntries: OpCounter
    readEntries: OpCounter
    getLastEntry: OpCounter
    closeLedger: OpCounter
    deleteLedger: OpCounter
    metadataGet: OpCounter
    metadataPut: OpCounter
    metadataDelete: OpCounter
    getFloor: OpCounter

    def __init__(self) -> None:
        for name in self.__slots__:
            setattr(self, name, OpCounter())

    def of(self, op: str) -> OpCounter:
        """The counter of ``op`` (an operation name or ``getFloor``)."""
        if op not in self.__slots__:
            raise KeyError(op)
        counter: OpCounter = getattr(self, op)
        return counter

    def snapshot(self) -> dict[str, dict[str, int]]:
        """``{operation: {"calls", "errors", "entries", "bytes"}}``, operations in API order."""
        return {op: self.of(op).snapshot() for op in (*OPERATIONS, "getFloor")}
