"""Latency model, fault injector and counters of the object store's operations.

The bookie's LatencyModel and FaultInjector accept only the bookie's operations, so the
object store has its own two, built from the same parts: latency specs parsed by
``parse_latency_spec``, rules kept as ``FaultRule``, failures raised as StorageFaultError.
"""

from __future__ import annotations

import asyncio
import random
from typing import TYPE_CHECKING

from storage_stub.bookie.faults import FaultInjector
from storage_stub.bookie.latency import LatencyDistribution, parse_latency_spec
from storage_stub.tiered.api import OBJECT_OPERATIONS

if TYPE_CHECKING:
    from storage_stub.config import StorageConfig

#: Which StorageConfig field drives which object operations.
OBJECT_LATENCY_FIELDS: dict[str, tuple[str, ...]] = {
    "objectGetLatency": ("objectGet",),
    "objectPutLatency": ("objectPut", "objectDelete"),
}


def _check_operation(op: str) -> None:
    if op not in OBJECT_OPERATIONS:
        raise ValueError(f"unknown object operation {op!r}; expected one of {OBJECT_OPERATIONS}")


class ObjectLatencyModel:
    """A delay per object operation. ``delay`` costs one dict lookup when it has none."""

    __slots__ = ("_distributions", "_rng")

    def __init__(self, specs: dict[str, str] | None = None, *, seed: int | None = None) -> None:
        self._rng = random.Random(seed)
        self._distributions: dict[str, LatencyDistribution] = {}
        for op, spec in (specs or {}).items():
            _check_operation(op)
            distribution = parse_latency_spec(spec)
            if distribution is not None:
                self._distributions[op] = distribution

    @classmethod
    def from_config(cls, config: StorageConfig, *, seed: int | None = None) -> ObjectLatencyModel:
        specs = {
            op: str(getattr(config, field))
            for field, ops in OBJECT_LATENCY_FIELDS.items()
            for op in ops
        }
        return cls(specs, seed=seed)

    async def delay(self, op: str) -> None:
        """Wait the next drawn delay of ``op``; returns without suspending when it is zero."""
        distribution = self._distributions.get(op)
        if distribution is None:
            return
        ms = distribution.sample_ms(self._rng)
        if ms > 0:
            await asyncio.sleep(ms / 1000.0)

    def snapshot(self) -> dict[str, str]:
        """``{operation: spec}`` for operations with a delay."""
        return {op: repr(d) for op, d in self._distributions.items()}


class ObjectFaultInjector(FaultInjector):
    """The bookie's fault injector over the object store's operations
    (``OBJECT_OPERATIONS``): per-operation error rate and extra delay, seedable."""

    __slots__ = ()

    def __init__(self, *, seed: int | None = None) -> None:
        super().__init__(seed=seed, operations=OBJECT_OPERATIONS)


class ObjectStoreCounters:
    """Counts of the object store's calls; plain int slots, bumped in O(1)."""

    __slots__ = (
        "bytesRead",
        "bytesWritten",
        "objectDeleteErrors",
        "objectDeletes",
        "objectGetErrors",
        "objectGets",
        "objectPutErrors",
        "objectPuts",
    )

    def __init__(self) -> None:
        self.objectGets = 0
        self.objectGetErrors = 0
        self.bytesRead = 0
        self.objectPuts = 0
        self.objectPutErrors = 0
        self.bytesWritten = 0
        self.objectDeletes = 0
        self.objectDeleteErrors = 0

    def snapshot(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in sorted(self.__slots__)}
