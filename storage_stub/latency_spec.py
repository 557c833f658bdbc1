"""Latency specs and the distributions they name, as ``conf/storage.conf`` writes them.

Specs: ``"0"`` (no delay), ``"fixed:<ms>"``, ``"uniform:<min_ms>:<max_ms>"``,
``"lognormal:<median_ms>:<sigma>"``. Below both the config (which validates specs with
:func:`parse_latency_spec`) and the bookie's LatencyModel (which draws from them).
"""

from __future__ import annotations

import math
import random
from typing import Protocol


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
