"""The virtual-time event loop: time jumps instead of passing, timers fire at their exact
virtual instants and in a reproducible order, executors run inline, and a program that
cannot end (a deadlock, or time moving forever) raises instead of hanging.

Nothing here sleeps in real time: every ``asyncio.sleep`` below runs on the virtual
clock. The tests whose failure mode would be a hang run the loop under a watchdog thread.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from simulation import loop as sim
from simulation.loop import (
    EPOCH_WALL_MS,
    Stalled,
    TimeLimitExceeded,
    VirtualClock,
    VirtualEventLoop,
)

S = 1_000_000_000  # nanoseconds per second
#: how long a run that should end at once may take in real time before we call it hung
WATCHDOG_S = 20.0


def running() -> VirtualEventLoop:
    loop = asyncio.get_running_loop()
    assert isinstance(loop, VirtualEventLoop)
    return loop


def run_guarded(make_main: Callable[[], Coroutine[Any, Any, Any]], **kwargs: Any) -> Any:
    """``sim.run(make_main(), **kwargs)`` on a daemon thread: its value, or the exception
    it raised re-raised here; a run still going after WATCHDOG_S fails the test rather
    than hanging the session."""
    outcome: dict[str, Any] = {}

    def target() -> None:
        try:
            outcome["value"] = sim.run(make_main(), **kwargs)
        except BaseException as error:  # handed back to the test thread
            outcome["error"] = error

    thread = threading.Thread(target=target, name="virtual-loop", daemon=True)
    thread.start()
    thread.join(WATCHDOG_S)
    if thread.is_alive():
        pytest.fail(f"the virtual loop did not end within {WATCHDOG_S} s of real time")
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


# ---------------------------------------------------------------------- virtual time


def test_a_thousand_virtual_seconds_take_no_real_time() -> None:
    async def main() -> tuple[float, int, int]:
        loop = running()
        for _ in range(1000):
            await asyncio.sleep(1)
        return loop.time(), loop.now_ns, loop.jumps

    started = time.perf_counter()
    now, now_ns, jumps = sim.run(main())
    elapsed = time.perf_counter() - started

    assert now == 1000.0
    assert now_ns == 1000 * S
    assert jumps == 1000  # one jump per sleep: nothing in between moved the clock
    assert elapsed < 5.0  # generous: this takes milliseconds


def test_timers_fire_in_when_order_at_their_instants() -> None:
    """Timers scheduled out of order, by call_at, call_later and sleeping tasks, fire
    sorted by their instant, each with the clock reading exactly that instant."""

    async def main() -> list[tuple[int, str]]:
        loop = running()
        fired: list[tuple[int, str]] = []

        def mark(label: str) -> None:
            fired.append((loop.now_ns, label))

        async def sleeper(seconds: float, label: str) -> None:
            await asyncio.sleep(seconds)
            mark(label)

        loop.call_at(7, mark, "at 7")
        loop.call_later(3, mark, "later 3")
        tasks = [asyncio.create_task(sleeper(s, f"sleep {s}")) for s in (9, 1, 5)]
        loop.call_at(2, mark, "at 2")
        loop.call_later(0.5, mark, "later 0.5")
        await asyncio.gather(*tasks)
        return fired

    assert sim.run(main()) == [
        (S // 2, "later 0.5"),
        (1 * S, "sleep 1"),
        (2 * S, "at 2"),
        (3 * S, "later 3"),
        (5 * S, "sleep 5"),
        (7 * S, "at 7"),
        (9 * S, "sleep 9"),
    ]


def test_equal_when_timers_fire_in_scheduling_order() -> None:
    async def main() -> tuple[list[int], list[int]]:
        loop = running()
        by_call_at: list[int] = []
        for i in range(10):
            loop.call_at(5, by_call_at.append, i)

        by_sleep: list[int] = []

        async def sleeper(i: int) -> None:
            await asyncio.sleep(1)
            by_sleep.append(i)

        await asyncio.gather(*(sleeper(i) for i in range(10)))
        await asyncio.sleep(5)
        return by_call_at, by_sleep

    assert sim.run(main()) == (list(range(10)), list(range(10)))


def test_call_later_and_call_at_fire_at_exactly_their_instants() -> None:
    """Instants that are exact in binary floating point, early and after 1000 s (where
    a float's spacing is far coarser than at 0): the clock reads them to the nanosecond."""

    async def main() -> list[tuple[str, int]]:
        loop = running()
        fired: list[tuple[str, int]] = []

        def mark(label: str) -> None:
            fired.append((label, loop.now_ns))

        for base in (0, 1000):
            if base:
                await asyncio.sleep(base - loop.time())
            assert loop.now_ns == base * S
            loop.call_later(0.125, mark, f"{base}+0.125")
            loop.call_later(2, mark, f"{base}+2")
            loop.call_at(base + 3.25, mark, f"at {base}+3.25")
            loop.call_at(base + 0.5, mark, f"at {base}+0.5")
            await asyncio.sleep(4)
        return fired

    assert sim.run(main()) == [
        ("0+0.125", S // 8),
        ("at 0+0.5", S // 2),
        ("0+2", 2 * S),
        ("at 0+3.25", 3 * S + S // 4),
        ("1000+0.125", 1000 * S + S // 8),
        ("at 1000+0.5", 1000 * S + S // 2),
        ("1000+2", 1002 * S),
        ("at 1000+3.25", 1003 * S + S // 4),
    ]


def test_decimal_timers_fire_at_exactly_their_instants() -> None:
    async def main() -> tuple[int, int]:
        loop = running()
        for _ in range(10_000):
            await asyncio.sleep(0.001)
        after_sleeps = loop.now_ns
        fired: list[int] = []
        loop.call_later(0.003, lambda: fired.append(loop.now_ns))
        await asyncio.sleep(1)
        return after_sleeps, fired[0] - after_sleeps

    assert sim.run(main()) == (10 * S, 3_000_000)


def test_asyncio_timeout_expires_at_its_virtual_deadline() -> None:
    async def main() -> list[tuple[str, int]]:
        loop = running()
        seen: list[tuple[str, int]] = []
        never = asyncio.Event()
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(5):
                await never.wait()
        seen.append(("timeout", loop.now_ns))
        with pytest.raises(TimeoutError):
            async with asyncio.timeout_at(loop.time() + 2.5):
                await asyncio.sleep(3600)
        seen.append(("timeout_at", loop.now_ns))
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(never.wait(), 0.25)
        seen.append(("wait_for", loop.now_ns))
        async with asyncio.timeout(10):  # not reached: the body ends first
            await asyncio.sleep(3)
        seen.append(("in time", loop.now_ns))
        return seen

    assert sim.run(main()) == [
        ("timeout", 5 * S),
        ("timeout_at", 7 * S + S // 2),
        ("wait_for", 7 * S + S // 2 + S // 4),
        ("in time", 10 * S + S // 2 + S // 4),
    ]


# ---------------------------------------------------------------------- the clock


def test_virtual_clock_reads_the_loop() -> None:
    async def main() -> list[tuple[int, int, int, int]]:
        loop = running()
        clock = VirtualClock(loop)
        other_epoch = VirtualClock(loop, epoch_wall_ms=42)
        readings = []
        for step in (0, 1.5, 0.25, 1000, 0.0078125):  # the last leaves sub-ms nanoseconds
            if step:
                await asyncio.sleep(step)
            readings.append(
                (loop.now_ns, clock.monotonic_ns(), clock.wall_ms(), other_epoch.wall_ms())
            )
        return readings

    readings = sim.run(main())
    for now_ns, monotonic, wall, other in readings:
        assert monotonic == now_ns
        assert wall == EPOCH_WALL_MS + now_ns // 1_000_000
        assert other == 42 + now_ns // 1_000_000
    assert readings[0][2] == EPOCH_WALL_MS
    assert readings[2][2] == EPOCH_WALL_MS + 1750
    last_ns = readings[-1][0]
    assert last_ns % 1_000_000 != 0  # the floor below was exercised
    assert readings[-1][2] == EPOCH_WALL_MS + 1_001_757


def test_virtual_clock_wall_time_floors_to_the_millisecond() -> None:
    loop = VirtualEventLoop()
    try:
        clock = VirtualClock(loop)
        loop.advance_ns(999_999)
        assert (clock.monotonic_ns(), clock.wall_ms()) == (999_999, EPOCH_WALL_MS)
        loop.advance_ns(1)
        assert (clock.monotonic_ns(), clock.wall_ms()) == (1_000_000, EPOCH_WALL_MS + 1)
    finally:
        loop.close()


# ---------------------------------------------------------------------- no threads


def test_run_in_executor_runs_inline_and_returns_its_value() -> None:
    async def main() -> tuple[int, int, int, int, int]:
        loop = running()
        calls: list[int] = []

        def work(a: int, b: int) -> int:
            calls.append(threading.get_ident())
            return a * b

        before = loop.now_ns
        future = loop.run_in_executor(None, work, 6, 7)
        assert calls, "the function ran before anything was awaited"
        value = await future
        return threading.get_ident(), calls[0], value, before, loop.now_ns

    loop_thread, work_thread, value, before, after = sim.run(main())
    assert work_thread == loop_thread
    assert value == 42
    assert after == before  # running it took no virtual time


def test_run_in_executor_hands_the_exception_to_the_awaiter() -> None:
    class Boom(Exception):
        pass

    async def main() -> str:
        loop = running()

        def fail() -> None:
            raise Boom("from the executor")

        future = loop.run_in_executor(None, fail)  # the caller does not see it...
        with pytest.raises(Boom, match="from the executor"):
            await future  # ...whoever awaits does
        return "survived"

    assert sim.run(main()) == "survived"


def test_to_thread_runs_on_the_loops_thread() -> None:
    class Boom(Exception):
        pass

    async def main() -> tuple[int, int, str]:
        where: list[int] = []

        def work(word: str) -> str:
            where.append(threading.get_ident())
            return word.upper()

        def fail() -> None:
            raise Boom("from to_thread")

        value = await asyncio.to_thread(work, "inline")
        with pytest.raises(Boom, match="from to_thread"):
            await asyncio.to_thread(fail)
        return threading.get_ident(), where[0], value

    loop_thread, work_thread, value = sim.run(main())
    assert work_thread == loop_thread
    assert value == "INLINE"


# ---------------------------------------------------------------------- programs that cannot end


async def hold_forever(future: asyncio.Future[None]) -> None:
    await future


def test_a_deadlock_raises_stalled_naming_the_waiting_tasks() -> None:
    finished: list[str] = []

    async def wait_for_go(go: asyncio.Event) -> None:
        try:
            await go.wait()
        finally:
            finished.append("waiter")

    async def main() -> None:
        loop = running()
        go = asyncio.Event()  # nobody will set it
        waiter = asyncio.create_task(wait_for_go(go), name="waiter-for-go")
        holder = asyncio.create_task(hold_forever(loop.create_future()), name="future-holder")
        await asyncio.sleep(3)  # time moves while there is a timer...
        await asyncio.gather(waiter, holder)  # ...then nothing can run, nothing is scheduled

    with pytest.raises(Stalled) as caught:
        run_guarded(main)

    message = str(caught.value)
    assert "stalled at 3.000 s" in message
    # each waiting task by its name, with the function it is suspended in
    assert "waiter-for-go: wait (locks.py:" in message  # Event.wait
    assert "future-holder: hold_forever (test_loop.py:" in message
    assert "main: main (test_loop.py:" in message
    # and run still cleaned up: the stuck task was cancelled and its finally ran
    assert finished == ["waiter"]


def test_a_program_that_never_ends_hits_the_time_limit() -> None:
    seen_s: list[float] = []
    ticks_s: list[float] = []
    cleanup_s: list[float] = []

    async def ticker() -> None:
        try:
            while True:
                await asyncio.sleep(0.25)
                ticks_s.append(running().time())
        finally:
            cleanup_s.append(running().time())

    async def main() -> str:
        loop = running()
        background = asyncio.create_task(ticker(), name="ticker")
        while True:
            await asyncio.sleep(1)
            seen_s.append(loop.time())
            if loop.time() > 1000:  # only if the limit did not hold: fail, do not hang
                background.cancel()
                return "ran past the limit"

    loop = VirtualEventLoop(limit_s=100)
    with pytest.raises(TimeLimitExceeded, match="limit of 100 s") as caught:
        run_guarded(main, loop=loop)

    assert loop.now_ns <= 100 * S
    assert max(seen_s) == 100.0
    assert max(ticks_s) == 100.0
    assert cleanup_s and max(cleanup_s) <= 100.0
    assert "main: " in str(caught.value) and "ticker: " in str(caught.value)


def test_limit_s_given_to_run_applies() -> None:
    async def main() -> str:
        while True:
            await asyncio.sleep(7)
            if running().time() > 1000:
                return "ran past the limit"

    with pytest.raises(TimeLimitExceeded):
        run_guarded(main, limit_s=50)


def test_a_program_that_ends_before_the_limit_is_not_stopped() -> None:
    async def main() -> float:
        await asyncio.sleep(100)
        return running().time()

    assert run_guarded(main, limit_s=100) == 100.0


# ---------------------------------------------------------------------- determinism


async def busy_program() -> list[tuple[int, str]]:
    """Timers, gathers, queues, events, cancellation and inline executor work, with no
    randomness: what it records depends only on the loop."""
    loop = running()
    events: list[tuple[int, str]] = []

    def log(label: str) -> None:
        events.append((loop.now_ns, label))

    queue: asyncio.Queue[int] = asyncio.Queue(maxsize=2)
    ready = asyncio.Event()

    async def producer(name: str, period: float, count: int) -> None:
        for i in range(count):
            await asyncio.sleep(period)
            await queue.put(i)
            log(f"{name} put {i}")
        ready.set()

    async def consumer() -> None:
        while True:
            item = await queue.get()
            await asyncio.sleep(0.125 * (item % 3))
            log(f"got {item}")
            queue.task_done()

    async def watcher(name: str) -> None:
        await ready.wait()
        log(f"{name} saw ready")
        await asyncio.sleep(0)
        log(f"{name} after yield")

    async def slow() -> None:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            log("slow cancelled")
            raise

    for i in range(5):
        loop.call_later(0.5 * (5 - i), log, f"timer {i}")
    consumers = [asyncio.create_task(consumer()) for _ in range(2)]
    slow_task = asyncio.create_task(slow())
    await asyncio.gather(
        producer("p1", 0.25, 6),
        producer("p2", 0.375, 4),
        watcher("w1"),
        watcher("w2"),
        loop.run_in_executor(None, log, "executor"),
    )
    await queue.join()
    slow_task.cancel()
    await asyncio.gather(slow_task, return_exceptions=True)
    for task in consumers:
        task.cancel()
    await asyncio.sleep(1)
    log("end")
    return events


def test_the_same_program_runs_the_same_way_twice() -> None:
    first = sim.run(busy_program())
    second = sim.run(busy_program())
    assert first == second
    assert len(first) > 25
    assert len({ns for ns, _ in first}) > 10  # time really moved, many times
    assert first[-1][1] == "end"
    assert [ns for ns, _ in first] == sorted(ns for ns, _ in first)


# ---------------------------------------------------------------------- shutdown


def test_run_cancels_tasks_still_pending_when_main_returns() -> None:
    log: list[str] = []

    async def background(name: str) -> None:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            log.append(f"{name} cancelled at {running().time()}")
            raise
        finally:
            await asyncio.sleep(0)  # cleanup may still await, as under asyncio.run
            log.append(f"{name} finally")

    async def main() -> str:
        left = [asyncio.create_task(background(name), name=name) for name in ("a", "b")]
        await asyncio.sleep(2)
        assert not any(task.done() for task in left)
        return "done"

    assert sim.run(main()) == "done"
    assert sorted(log) == ["a cancelled at 2.0", "a finally", "b cancelled at 2.0", "b finally"]


def test_a_callback_that_reschedules_itself_at_once_forever_is_stopped() -> None:
    from simulation.loop import Stalled, VirtualEventLoop
    from simulation.loop import run as run_virtual_loop

    async def spin() -> None:
        loop = asyncio.get_running_loop()

        def again() -> None:
            loop.call_soon(again)

        loop.call_soon(again)
        await asyncio.sleep(1)  # never reached: time stands still

    loop = VirtualEventLoop()
    loop.max_rounds_per_instant = 1000
    with pytest.raises(Stalled, match=r"stands still at 0\.000 s"):
        run_virtual_loop(spin(), loop=loop)


def test_a_callback_that_raises_stops_the_run_with_its_error() -> None:
    from simulation.loop import CallbackFailed
    from simulation.loop import run as run_virtual_loop

    async def main() -> None:
        loop = asyncio.get_running_loop()

        def broken() -> None:
            raise KeyError("half-alive")

        loop.call_later(1, broken)
        await asyncio.sleep(10)

    with pytest.raises(CallbackFailed, match="half-alive") as raised:
        run_virtual_loop(main())
    assert isinstance(raised.value.__cause__, KeyError)
