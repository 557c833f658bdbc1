"""Clocks injected into everything that reads time, so tests and replays can drive it."""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def monotonic_ns(self) -> int:
        """Monotonic nanoseconds, for ages and timeouts."""
        ...

    def wall_ms(self) -> int:
        """Epoch milliseconds, for publish times and ledger creation times."""
        ...


class SystemClock:
    """The real clock."""

    __slots__ = ()

    def monotonic_ns(self) -> int:
        return time.monotonic_ns()

    def wall_ms(self) -> int:
        return time.time_ns() // 1_000_000


class ManualClock:
    """A clock that moves only when told to (tests, replays)."""

    __slots__ = ("_mono_ns", "_wall_ms")

    def __init__(self, wall_ms: int = 1_700_000_000_000) -> None:
        self._mono_ns = 0
        self._wall_ms = wall_ms

    def monotonic_ns(self) -> int:
        return self._mono_ns

    def wall_ms(self) -> int:
        return self._wall_ms

    def advance_ms(self, ms: float) -> None:
        self._mono_ns += int(ms * 1_000_000)
        self._wall_ms += int(ms)

    def advance_to_ns(self, monotonic_ns: int) -> None:
        """Move forward to an exact monotonic time (replays of recorded traces); never
        back."""
        if monotonic_ns > self._mono_ns:
            self._wall_ms += (monotonic_ns - self._mono_ns) // 1_000_000
            self._mono_ns = monotonic_ns


class EventClock:
    """The time of the cache event being handled. The event stream sets it once per
    event (from the broker's clock, or from a trace's ``ts_ns`` in a replay), so every
    design reads the same instant for the same event, live, as a shadow or replayed."""

    __slots__ = ("now_ns",)

    def __init__(self, now_ns: int = 0) -> None:
        self.now_ns = now_ns

    def monotonic_ns(self) -> int:
        return self.now_ns

    def wall_ms(self) -> int:
        """Not a wall clock: the designs only measure ages."""
        return self.now_ns // 1_000_000
