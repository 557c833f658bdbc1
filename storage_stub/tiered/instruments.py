"""Latency model, fault injector and counters of the object store's operations.

The bookie's LatencyModel and FaultInjector accept only the bookie's operations, so the
object store has its own two, built from the same parts: latency specs parsed by
``parse_latency_spec``, rules kept as ``FaultRule``, failures raised as StorageFaultError.
"""

from __future__ import annotations

import asyncio
import math
import random
from typing import TYPE_CHECKING

from storage_stub.bookie.api import StorageFaultError
from storage_stub.bookie.faults import FaultRule
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


class ObjectFaultInjector:
    """Per object operation: an error rate and an extra delay, with a seedable RNG.

    ``check`` costs one dict lookup for an operation without a rule.
    """

    __slots__ = ("_rng", "_rules")

    def __init__(self, *, seed: int | None = None) -> None:
        self._rng = random.Random(seed)
        self._rules: dict[str, FaultRule] = {}

    def set(self, op: str, error_rate: float = 0.0, delay_ms: float = 0.0) -> None:
        """Make ``op`` fail with probability ``error_rate`` after waiting ``delay_ms``."""
        _check_operation(op)
        if not (0.0 <= error_rate <= 1.0):
            raise ValueError(f"error_rate must be within 0.0..1.0, got {error_rate}")
        if not (math.isfinite(delay_ms) and delay_ms >= 0.0):
            raise ValueError(f"delay_ms must be a finite number >= 0, got {delay_ms}")
        if error_rate == 0.0 and delay_ms == 0.0:
            self._rules.pop(op, None)
        else:
            self._rules[op] = FaultRule(error_rate, delay_ms)

    def clear(self, op: str | None = None) -> None:
        """Remove the rule of ``op``, or every rule."""
        if op is None:
            self._rules.clear()
        else:
            self._rules.pop(op, None)

    async def check(self, op: str) -> None:
        """Apply ``op``'s rule: wait its delay, then raise StorageFaultError at its rate."""
        rule = self._rules.get(op)
        if rule is None:
            return
        if rule.delay_ms > 0.0:
            await asyncio.sleep(rule.delay_ms / 1000.0)
        if rule.error_rate > 0.0 and self._rng.random() < rule.error_rate:
            rule.injected_errors += 1
            raise StorageFaultError(op)

    def snapshot(self) -> dict[str, dict[str, float]]:
        """``{operation: {"errorRate", "delayMs", "injectedErrors"}}`` for every rule."""
        return {
            op: {
                "errorRate": rule.error_rate,
                "delayMs": rule.delay_ms,
                "injectedErrors": rule.injected_errors,
            }
            for op, rule in self._rules.items()
        }


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
