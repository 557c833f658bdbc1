"""Key distributors, as the OpenMessaging Benchmark names them, over a fixed key space.

- ``NO_KEY``: messages carry no key.
- ``KEY_ROUND_ROBIN``: key 0, 1, ..., keys-1, 0, ... per producer.
- ``RANDOM``: uniform over the key space (OMB's RANDOM_NANO, but seeded and bounded).
- ``ZIPF``: rank r (1-based) with probability proportional to r^-exponent.

Each producer has its own distributor seeded from the scenario's seed and its index, so a
scenario with the same seed sends the same key sequence. ``next()`` is O(1) except ZIPF,
O(log keys) (a bisect on the precomputed CDF).
"""

from __future__ import annotations

import bisect
import itertools
import random


class KeyDistributor:
    """Draws key indexes in ``[0, keys)``; ``None`` for ``NO_KEY``."""

    __slots__ = ("_cdf", "_counter", "_keys", "_kind", "_rng")

    def __init__(self, kind: str, keys: int, exponent: float, seed: int) -> None:
        if keys < 1:
            raise ValueError("keys must be at least 1")
        self._kind = kind
        self._keys = keys
        self._rng = random.Random(seed)
        self._counter = 0
        self._cdf: list[float] = []
        if kind == "ZIPF":
            weights = [rank**-exponent for rank in range(1, keys + 1)]
            total = sum(weights)
            self._cdf = [running / total for running in itertools.accumulate(weights)]
        elif kind not in ("NO_KEY", "KEY_ROUND_ROBIN", "RANDOM"):
            raise ValueError(f"unknown key distributor {kind!r}")

    @property
    def keyed(self) -> bool:
        return self._kind != "NO_KEY"

    def next(self) -> int | None:
        kind = self._kind
        if kind == "NO_KEY":
            return None
        if kind == "KEY_ROUND_ROBIN":
            key = self._counter % self._keys
            self._counter += 1
            return key
        if kind == "RANDOM":
            return self._rng.randrange(self._keys)
        index = bisect.bisect_left(self._cdf, self._rng.random())
        return min(index, self._keys - 1)


def key_name(index: int) -> str:
    return f"key-{index}"


class DelayedMessages:
    """Which of a producer's messages are delayed (the scenario's ``delayedRatio``):
    each with that probability, drawn from its own generator seeded from the producer's
    seed, so the key sequence is the same with or without delayed messages. O(1)."""

    __slots__ = ("_ratio", "_rng")

    def __init__(self, ratio: float, seed: int) -> None:
        self._ratio = ratio
        self._rng = random.Random(f"delayed-{seed}")

    def next(self) -> bool:
        ratio = self._ratio
        if ratio <= 0:
            return False
        return ratio >= 1 or self._rng.random() < ratio
