"""Per-operation latency model: each storage call waits a delay drawn from a distribution.

Specs (``conf/storage.conf``): ``"0"`` (no delay), ``"fixed:<ms>"``,
``"uniform:<min_ms>:<max_ms>"``, ``"lognormal:<median_ms>:<sigma>"``.
"""

from __future__ import annotations

import asyncio
import math
import random
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Protocol, Self

from storage_stub.bookie.api import OPERATIONS

if TYPE_CHECKING:
    from storage_stub.config import StorageConfig

#: Which StorageConfig field drives which operations; the others never wait.
CONFIG_FIELD_OPERATIONS: dict[str, tuple[str, ...]] = {
    "addEntryLatency": ("addEntries",),
    "readEntryLatency": ("readEntries",),
    "getLastEntryLatency": ("getLastEntry",),
    "metadataLatency": ("metadataGet", "metadataPut", "metadataDelete"),
}


class LatencyDistribution(Protocol):
    def sample_ms(self, rng: random.Random) -> float:
        """One delay in milliseconds (>= 0)."""
        ...


class FixedLatency:
    __slots__ = ("ms",)

    def __init__(self, ms: float) -> None:
        self.ms = ms

    def sample_ms(self, rng: random.Random) -> float:
        return self.ms

    def __repr__(self) -> str:
        return f"fixed:{self.ms:g}"


class UniformLatency:
    __slots__ = ("max_ms", "min_ms")

    def __init__(self, min_ms: float, max_ms: float) -> None:
        self.min_ms = min_ms
        self.max_ms = max_ms

    def sample_ms(self, rng: random.Random) -> float:
        return rng.uniform(self.min_ms, self.max_ms)

    def __repr__(self) -> str:
        return f"uniform:{self.min_ms:g}:{self.max_ms:g}"


class LogNormalLatency:
    """Heavy right tail around a median: ``exp(N(ln(median), sigma))``."""

    __slots__ = ("_mu", "median_ms", "sigma")

    def __init__(self, median_ms: float, sigma: float) -> None:
        self.median_ms = median_ms
        self.sigma = sigma
        self._mu = math.log(median_ms)

    def sample_ms(self, rng: random.Random) -> float:
        return rng.lognormvariate(self._mu, self.sigma)

    def __repr__(self) -> str:
        return f"lognormal:{self.median_ms:g}:{self.sigma:g}"


def _number(spec: str, text: str, what: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"latency spec {spec!r}: {what} {text!r} is not a number") from None
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"latency spec {spec!r}: {what} must be a finite number >= 0")
    return value


def parse_latency_spec(spec: str) -> LatencyDistribution | None:
    """Parse a latency spec; None means "no delay". Raises ValueError naming the problem."""
    text = spec.strip()
    kind, _, rest = text.partition(":")
    args = rest.split(":") if rest else []
    if not rest and _is_zero(kind):
        return None
    forms = {
        "fixed": "fixed:<ms>",
        "uniform": "uniform:<min_ms>:<max_ms>",
        "lognormal": "lognormal:<median_ms>:<sigma>",
    }
    if kind not in forms:
        raise ValueError(
            f"latency spec {spec!r}: expected '0' or one of {', '.join(forms.values())}"
        )
    wanted = forms[kind].count(":")
    if len(args) != wanted:
        raise ValueError(
            f"latency spec {spec!r}: {kind} takes {wanted} value{'s' if wanted > 1 else ''}"
            f" ({forms[kind]}), got {len(args)}"
        )
    if kind == "fixed":
        ms = _number(spec, args[0], "delay")
        return FixedLatency(ms) if ms > 0 else None
    if kind == "uniform":
        low = _number(spec, args[0], "min_ms")
        high = _number(spec, args[1], "max_ms")
        if low > high:
            raise ValueError(f"latency spec {spec!r}: min_ms must not exceed max_ms")
        return UniformLatency(low, high) if high > 0 else None
    median = _number(spec, args[0], "median_ms")
    sigma = _number(spec, args[1], "sigma")
    if median <= 0:
        raise ValueError(f"latency spec {spec!r}: median_ms must be > 0")
    return LogNormalLatency(median, sigma)


def _is_zero(text: str) -> bool:
    try:
        return float(text) == 0.0
    except ValueError:
        return False


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
