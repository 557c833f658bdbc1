"""An asyncio event loop on virtual time.

The loop is asyncio's own (``SelectorEventLoop``) with two things replaced: ``time()``
reads a virtual clock, and the selector never waits. When nothing is runnable the loop
asks its selector to wait until the next timer; the virtual selector moves the clock
there instead, so the next timer fires at once. Everything that reads the loop's time
(``asyncio.sleep``, ``call_later``, ``asyncio.timeout``) and everything reading a
:class:`VirtualClock` then runs on virtual time, in an order that depends only on what
the program does, never on how fast the machine is.

There is no I/O: the selector reports no events, ever. Work handed to an executor
(``run_in_executor``, ``asyncio.to_thread``) runs at once on the loop's thread, so no
thread races the loop. A program in which every task waits on something no timer will
ever bring (a deadlock) makes the loop raise :class:`Stalled` naming what each task
waits on, instead of hanging; with ``limit_s`` a program that keeps time moving but
never ends raises :class:`TimeLimitExceeded` once the virtual clock passes the limit.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import heapq
import itertools
import selectors
from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import Any, TypeVar, TypeVarTuple, Unpack

T = TypeVar("T")
Ts = TypeVarTuple("Ts")

#: the virtual wall clock at virtual time 0: 2023-11-14T22:13:20Z, fixed so that publish
#: times (and so seeks by time) are the same on every run
EPOCH_WALL_MS = 1_700_000_000_000


#: loop rounds at one instant that make time stand still: a run that builds a large
#: backlog at once takes some hundreds of thousands
MAX_ROUNDS_PER_INSTANT = 10_000_000


class Stalled(RuntimeError):
    """Nothing can run and no timer is pending (every task waits for something that
    will never come), or time stands still (the loop goes round at one instant,
    something rescheduling itself at once, for :data:`MAX_ROUNDS_PER_INSTANT` rounds)."""


class TimeStandsStill(Stalled):
    """The loop went round :data:`MAX_ROUNDS_PER_INSTANT` times at one instant."""


class TimeLimitExceeded(RuntimeError):
    """The virtual clock passed the loop's limit."""


class CallbackFailed(RuntimeError):
    """A callback on the loop raised (its traceback is this error's cause): the run it
    belonged to is stopped rather than left half-alive."""


class _VirtualSelector(selectors.BaseSelector):
    """Holds registrations (the loop's self-pipe) and reports no events; a wait moves
    the loop's virtual clock forward by the time it would have waited."""

    def __init__(self) -> None:
        self._keys: dict[Any, selectors.SelectorKey] = {}
        self.loop: VirtualEventLoop | None = None

    def register(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        key = selectors.SelectorKey(fileobj, _fd(fileobj), events, data)
        self._keys[fileobj] = key
        return key

    def unregister(self, fileobj: Any) -> selectors.SelectorKey:
        return self._keys.pop(fileobj)

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        loop = self.loop
        assert loop is not None
        if timeout is None:
            raise Stalled(loop.describe_stall())
        if timeout > 0:
            # to the nearest nanosecond: the loop fires what is due within its clock's
            # resolution (1 ns), so a timer is never late by a float's rounding
            loop.advance_ns(round(timeout * 1e9))
        else:
            loop.rounds_at_this_instant += 1
            if loop.rounds_at_this_instant > loop.max_rounds_per_instant:
                raise TimeStandsStill(loop.describe_frozen())
        return []

    def close(self) -> None:
        self._keys.clear()

    def get_map(self) -> Mapping[Any, selectors.SelectorKey]:
        return self._keys


class _OrderedTimer(asyncio.TimerHandle):
    """A timer ordered by its time, then by when it was scheduled."""

    __slots__ = ("_order",)

    def __init__(
        self,
        order: int,
        when: float,
        callback: Callable[..., object],
        args: Sequence[Any],
        loop: asyncio.AbstractEventLoop,
        context: contextvars.Context | None,
    ) -> None:
        super().__init__(when, callback, args, loop, context)
        self._order = order

    def __lt__(self, other: asyncio.TimerHandle) -> bool:
        if isinstance(other, _OrderedTimer):
            return (self.when(), self._order) < (other.when(), other._order)
        return super().__lt__(other)


def _fd(fileobj: Any) -> int:
    return fileobj if isinstance(fileobj, int) else int(fileobj.fileno())


class VirtualEventLoop(asyncio.SelectorEventLoop):
    """asyncio's loop on a virtual clock that starts at 0 and jumps to the next timer
    whenever nothing is runnable. ``limit_s``: raise :class:`TimeLimitExceeded` rather
    than move the clock past this many virtual seconds (None: no limit)."""

    def __init__(self, limit_s: float | None = None) -> None:
        self._now_ns = 0
        self._limit_ns = None if limit_s is None else int(limit_s * 1e9)
        #: how many times the clock jumped (the loop found nothing to run)
        self.jumps = 0
        #: loop rounds run since the clock last moved, and how many make time stand
        #: still (something rescheduling itself at once, forever)
        self.rounds_at_this_instant = 0
        self.max_rounds_per_instant = MAX_ROUNDS_PER_INSTANT
        self._timer_order = itertools.count()
        selector = _VirtualSelector()
        selector.loop = self
        super().__init__(selector)
        self._clock_resolution = 1e-9

    # ------------------------------------------------------------------ time

    def time(self) -> float:
        return self._now_ns / 1e9

    @property
    def now_ns(self) -> int:
        """Virtual nanoseconds since the loop was made."""
        return self._now_ns

    def advance_ns(self, delta_ns: int) -> None:
        """Move the clock forward (the selector does, when the loop would wait)."""
        target = self._now_ns + max(delta_ns, 1)
        if self._limit_ns is not None and target > self._limit_ns:
            raise TimeLimitExceeded(
                f"the virtual clock reached its limit of {self._limit_ns / 1e9:g} s "
                f"with work still pending:\n{self.describe_tasks()}"
            )
        self._now_ns = target
        self.jumps += 1
        self.rounds_at_this_instant = 0

    # ------------------------------------------------------------------ timers

    def call_at(
        self,
        when: float,
        callback: Callable[[Unpack[Ts]], object],
        *args: *Ts,
        context: contextvars.Context | None = None,
    ) -> asyncio.TimerHandle:
        """asyncio's ``call_at`` with a tie-break: timers due at the same instant fire in
        the order they were scheduled (asyncio's heap keeps no order among equal times,
        and on virtual time equal times are common)."""
        if self.is_closed():
            raise RuntimeError("Event loop is closed")
        timer = _OrderedTimer(next(self._timer_order), when, callback, args, self, context)
        # asyncio's own heap of timers, as its call_at fills it
        heapq.heappush(self._scheduled, timer)  # type: ignore[attr-defined]
        timer._scheduled = True  # type: ignore[attr-defined]
        return timer

    # ------------------------------------------------------------------ no threads

    def run_in_executor(  # type: ignore[override]
        self, executor: concurrent.futures.Executor | None, func: Callable[..., T], *args: Any
    ) -> asyncio.Future[T]:
        """Run ``func`` now, on this thread: virtual time has no parallel work, and a
        thread would race the clock."""
        future: asyncio.Future[T] = self.create_future()
        try:
            future.set_result(func(*args))
        except BaseException as error:  # handed to whoever awaits, as an executor does
            if isinstance(error, (KeyboardInterrupt, SystemExit)):
                raise
            future.set_exception(error)
        return future

    # ------------------------------------------------------------------ diagnosis

    def describe_tasks(self) -> str:
        """One line per unfinished task: its name and where it waits."""
        lines = []
        for task in sorted(asyncio.all_tasks(self), key=lambda t: t.get_name()):
            lines.append(f"  {task.get_name()}: {_waiting_at(task)}")
        return "\n".join(lines) or "  (no tasks)"

    def describe_frozen(self) -> str:
        return (
            f"virtual time stands still at {self.time():.3f} s: {self.rounds_at_this_instant:,} "
            "loop rounds ran without the clock moving (something reschedules itself at "
            "once, forever); the tasks and where they are:\n" + self.describe_tasks()
        )

    def describe_stall(self) -> str:
        return (
            f"virtual time stalled at {self.time():.3f} s: nothing can run and no timer "
            f"is pending; the tasks and what they wait on:\n{self.describe_tasks()}"
        )


def _waiting_at(task: asyncio.Task[Any]) -> str:
    """The innermost frame ``task`` is suspended in, as ``function (file:line)``."""
    coro: Any = task.get_coro()
    where = "not started"
    while coro is not None:
        frame = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None)
        if frame is not None:
            code = frame.f_code
            where = f"{code.co_name} ({code.co_filename.rsplit('/', 2)[-1]}:{frame.f_lineno})"
        coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None)
    return where


class VirtualClock:
    """The broker's :class:`~broker.clock.Clock` on a virtual loop: monotonic time is
    the loop's, the wall clock starts at :data:`EPOCH_WALL_MS`."""

    __slots__ = ("_loop", "epoch_wall_ms")

    def __init__(self, loop: VirtualEventLoop, epoch_wall_ms: int = EPOCH_WALL_MS) -> None:
        self._loop = loop
        self.epoch_wall_ms = epoch_wall_ms

    def monotonic_ns(self) -> int:
        return self._loop._now_ns

    def wall_ms(self) -> int:
        return self.epoch_wall_ms + self._loop._now_ns // 1_000_000


def run(
    main: Coroutine[Any, Any, T],
    *,
    limit_s: float | None = None,
    loop: VirtualEventLoop | None = None,
) -> T:
    """Run ``main`` to completion on a virtual loop (a new one unless given) and close
    it: tasks still pending are cancelled and awaited, as ``asyncio.run`` does.
    :class:`Stalled` or :class:`TimeLimitExceeded` if the program cannot end;
    :class:`CallbackFailed` if a callback on the loop raised (``main`` is cancelled
    then, so nothing runs on half-alive)."""
    if loop is not None and limit_s is not None:
        raise ValueError("give limit_s to the loop you pass, not to run")
    loop = loop or VirtualEventLoop(limit_s)
    context = contextvars.copy_context()
    failures: list[tuple[BaseException, str]] = []

    def stop_on_callback_error(loop: asyncio.AbstractEventLoop, details: dict[str, Any]) -> None:
        error = details.get("exception")
        if error is not None and "handle" in details:
            if not failures:
                failures.append((error, str(details["handle"])))
                task.cancel()
            return
        loop.default_exception_handler(details)

    task = loop.create_task(main, name="main", context=context)
    loop.set_exception_handler(stop_on_callback_error)
    frozen = False
    try:
        return loop.run_until_complete(task)
    except asyncio.CancelledError:
        if failures:
            error, handle = failures[0]
            raise CallbackFailed(f"a callback raised {error!r}: {handle}") from error
        raise
    except TimeStandsStill:
        # what spins would spin on through any clean-up: the tasks are left as they are
        frozen = True
        raise
    finally:
        try:
            if not frozen:
                _cancel_pending(loop)
                with contextlib.suppress(Stalled, TimeLimitExceeded):
                    loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            loop.close()


def _cancel_pending(loop: VirtualEventLoop) -> None:
    pending = [task for task in asyncio.all_tasks(loop) if not task.done()]
    if not pending:
        return
    for task in pending:
        task.cancel()
    # a task that waits on something a cancelled one would have brought can never end;
    # the run's own outcome is what the caller sees
    with contextlib.suppress(Stalled, TimeLimitExceeded):
        loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
