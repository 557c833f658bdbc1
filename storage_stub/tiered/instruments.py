"""Latency model, fault injector and counters of the object store's operations.

The bookie's LatencyModel and FaultInjector, told the object store's operations:
latency specs parsed by ``parse_latency_spec``, rules kept as ``FaultRule``, failures
raised as StorageFaultError.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from storage_stub.bookie.faults import FaultInjector
from storage_stub.bookie.latency import LatencyModel
from storage_stub.latency_spec import LatencyDistribution
from storage_stub.tiered.api import OBJECT_OPERATIONS

if TYPE_CHECKING:
    from storage_stub.config import StorageConfig

#: Which StorageConfig field drives which object operations.
OBJECT_LATENCY_FIELDS: dict[str, tuple[str, ...]] = {
    "objectGetLatency": ("objectGet",),
    "objectPutLatency": ("objectPut", "objectDelete"),
}


class ObjectLatencyModel(LatencyModel):
    """The bookie's latency model over the object store's operations
    (``OBJECT_OPERATIONS``): a delay per operation, seedable."""

    __slots__ = ()

    def __init__(
        self,
        distributions: Mapping[str, LatencyDistribution | None] | None = None,
        *,
        seed: int | None = None,
    ) -> None:
        super().__init__(distributions, seed=seed, operations=OBJECT_OPERATIONS)

    @classmethod
    def from_config(cls, config: StorageConfig, *, seed: int | None = None) -> ObjectLatencyModel:
        specs = {
            op: str(getattr(config, field))
            for field, ops in OBJECT_LATENCY_FIELDS.items()
            for op in ops
        }
        return cls.from_specs(specs, seed=seed)


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
