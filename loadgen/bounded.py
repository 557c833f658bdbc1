"""Calls a run makes many of at once (set-up, admin events), bounded, and retries while
a broker is unreachable."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from loadgen.client import BrokerError, Unavailable
from loadgen.clock import LiveClock

#: concurrent admin or setup requests
ADMIN_CONCURRENCY = 64
#: waits between retries of a call to an unreachable broker, the last one repeated
BACKOFF_S = (0.05, 0.1, 0.2, 0.5, 1.0)


def backoff_s(failures: int) -> float:
    """The wait after ``failures`` failed attempts in a row."""
    return BACKOFF_S[min(failures, len(BACKOFF_S) - 1)]


async def bounded(
    calls: Sequence[Callable[[], Awaitable[None]]], limit: int = ADMIN_CONCURRENCY
) -> list[BaseException]:
    """Run the calls with at most ``limit`` at once; returns the errors."""
    errors: list[BaseException] = []
    iterator = iter(calls)

    async def worker() -> None:
        for call in iterator:
            try:
                await call()
            except BrokerError as error:
                errors.append(error)

    await asyncio.gather(*(worker() for _ in range(min(limit, len(calls)) or 1)))
    return errors


async def retry_while_unavailable(
    call: Callable[[], Awaitable[Any]], deadline_s: float = 60.0
) -> Any:
    """Retry while the broker is unreachable (restarting) until ``deadline_s`` (real
    time: a live broker starting)."""
    clock = LiveClock()
    stop = clock.now_ns() + deadline_s * 1e9
    failures = 0
    while True:
        try:
            return await call()
        except Unavailable:
            if clock.now_ns() >= stop:
                raise
            await asyncio.sleep(backoff_s(failures))
            failures += 1


def partial_call(
    function: Callable[..., Awaitable[None]], *args: Any
) -> Callable[[], Awaitable[None]]:
    async def call() -> None:
        await function(*args)

    return call
