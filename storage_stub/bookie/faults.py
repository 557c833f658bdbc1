"""Fault injector: tests and the admin API make storage operations slow or failing."""

from __future__ import annotations

import asyncio
import math

from storage_stub.bookie.api import OPERATIONS, StorageFaultError
from storage_stub.bookie.latency import operation_streams


class FaultRule:
    __slots__ = ("delay_ms", "error_rate", "injected_errors")

    def __init__(self, error_rate: float, delay_ms: float) -> None:
        self.error_rate = error_rate
        self.delay_ms = delay_ms
        self.injected_errors = 0


class FaultInjector:
    """Per-operation error rate and extra delay; each operation draws from its own
    seedable random stream.

    ``check`` costs one dict lookup for an operation without a rule.
    """

    __slots__ = ("_operations", "_rngs", "_rules")

    def __init__(
        self, *, seed: int | None = None, operations: tuple[str, ...] = OPERATIONS
    ) -> None:
        self._rngs = operation_streams(seed, type(self).__name__, operations)
        self._rules: dict[str, FaultRule] = {}
        #: the operation names rules may name (the bookie's, or the object store's)
        self._operations = operations

    def set(self, op: str, error_rate: float = 0.0, delay_ms: float = 0.0) -> None:
        """Make ``op`` fail with probability ``error_rate`` after waiting ``delay_ms``."""
        if op not in self._operations:
            raise ValueError(
                f"unknown storage operation {op!r}; expected one of {self._operations}"
            )
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

    def has_rule(self, op: str) -> bool:
        """Whether ``check(op)`` may wait or fail. O(1)."""
        return op in self._rules

    async def check(self, op: str) -> None:
        """Apply ``op``'s rule: wait its delay, then raise StorageFaultError at its rate."""
        rule = self._rules.get(op)
        if rule is None:
            return
        if rule.delay_ms > 0.0:
            await asyncio.sleep(rule.delay_ms / 1000.0)
        if rule.error_rate > 0.0 and self._rngs[op].random() < rule.error_rate:
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
