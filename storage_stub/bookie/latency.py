"""Per-operation latency model: each storage call waits a delay drawn from a distribution.

Specs (``conf/storage.conf``) and their distributions are ``storage_stub.latency_spec``'s,
which the config validates them with.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Self

from storage_stub.bookie.api import OPERATIONS
from storage_stub.latency_spec import LatencyDistribution, parse_latency_spec

if TYPE_CHECKING:
    from storage_stub.config import StorageConfig

#: Which StorageConfig field drives which operations; the others never wait.
CONFIG_FIELD_OPERATIONS: dict[str, tuple[str, ...]] = {
    "addEntryLatency": ("addEntries",),
    "readEntryLatency": ("readEntries",),
    "getLastEntryLatency": ("getLastEntry",),
    "metadataLatency": ("metadataGet", "metadataPut", "metadataDelete"),
}


def operation_streams(
    seed: int | None, owner: str, operations: Iterable[str]
) -> dict[str, random.Random]:
    """One random stream per operation: seeded from ``seed``, ``owner`` and the
    operation's name (a string seed is hashed by SHA-512, whatever PYTHONHASHSEED is),
    or from the system's entropy when ``seed`` is None."""
    return {
        op: random.Random(None if seed is None else f"{seed}:{owner}:{op}") for op in operations
    }


class LatencyModel:
    """Delays for each operation of ``api.OPERATIONS``; operations without a model never wait.

    ``delay`` costs one dict lookup when the operation has no delay (no sleep, no RNG draw).
    Each operation draws from its own random stream (seeded from ``seed`` and its name):
    a change in how often one operation runs leaves the others' delays as they were.
    """

    __slots__ = ("_distributions", "_rngs")

    def __init__(
        self,
        distributions: Mapping[str, LatencyDistribution | None] | None = None,
        *,
        seed: int | None = None,
        operations: tuple[str, ...] = OPERATIONS,
    ) -> None:
        self._distributions: dict[str, LatencyDistribution] = {}
        for op, distribution in (distributions or {}).items():
            if op not in operations:
                raise ValueError(f"unknown storage operation {op!r}; expected one of {operations}")
            if distribution is not None:
                self._distributions[op] = distribution
        self._rngs = operation_streams(seed, type(self).__name__, self._distributions)

    @classmethod
    def from_specs(cls, specs: Mapping[str, str], *, seed: int | None = None) -> Self:
        """Build from ``{operation: spec}``."""
        return cls({op: parse_latency_spec(spec) for op, spec in specs.items()}, seed=seed)

    @classmethod
    def from_config(cls, config: StorageConfig, *, seed: int | None = None) -> LatencyModel:
        specs: dict[str, str] = {}
        for field, ops in CONFIG_FIELD_OPERATIONS.items():
            for op in ops:
                specs[op] = getattr(config, field)
        return cls.from_specs(specs, seed=seed)

    def draw_ms(self, op: str) -> float:
        """The next delay for ``op`` in milliseconds (0.0 without a model)."""
        distribution = self._distributions.get(op)
        return 0.0 if distribution is None else distribution.sample_ms(self._rngs[op])

    def has_model(self, op: str) -> bool:
        """Whether ``delay(op)`` may wait. O(1)."""
        return op in self._distributions

    async def delay(self, op: str) -> None:
        """Wait the next drawn delay of ``op``; returns without suspending when it is zero."""
        distribution = self._distributions.get(op)
        if distribution is None:
            return
        ms = distribution.sample_ms(self._rngs[op])
        if ms > 0:
            await asyncio.sleep(ms / 1000.0)

    def snapshot(self) -> dict[str, str]:
        """``{operation: spec}`` for operations with a delay."""
        return {op: repr(d) for op, d in self._distributions.items()}
