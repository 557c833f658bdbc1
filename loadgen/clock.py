"""The clock a run reads: real time in a live run, the simulation's in a virtual one.

The runner never reads ``time`` itself: schedules, latencies, rates and event times all
come from the run's clock, so the same runner drives a real broker over sockets and a
simulated one on virtual time (``simulation``), where the clock is the event loop's.
"""

from __future__ import annotations

import time
from typing import Protocol


class RunClock(Protocol):
    #: "wall" or "virtual", as results.json's ``clock`` says
    kind: str

    def now_ns(self) -> int:
        """Monotonic nanoseconds: schedules, latencies, rates."""
        ...

    def wall_ms(self) -> float:
        """Epoch milliseconds, the scale of the broker's publish times (end-to-end
        latency, seeks by time)."""
        ...


class LiveClock:
    """Real time: ``perf_counter_ns`` (the finest monotonic clock) and ``time.time``."""

    __slots__ = ()

    kind = "wall"

    def now_ns(self) -> int:
        return time.perf_counter_ns()

    def wall_ms(self) -> float:
        return time.time() * 1000
