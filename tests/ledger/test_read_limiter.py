"""managedLedgerMaxReadsInFlightSizeInMB, as Pulsar's InflightReadsLimiter: reads take
permits estimated before they start, wait in one first-come queue, fail when the queue
is full or the wait outlasts the timeout, and a managed ledger's reads go through it.
Timed parts run on virtual time."""

from __future__ import annotations

import asyncio

import pytest

from broker.cache import CacheConfig, create_stream
from broker.clock import ManualClock
from broker.ledger.managed_ledger import ManagedLedger, ManagedLedgerConfig, ReadsThrottled
from broker.ledger.read_limiter import ReadLimiter, TooManyReads, estimated_read_size
from simulation.loop import run
from storage_stub.bookie.memory import InMemoryBookie, InMemoryMetadataStore


def test_a_read_is_estimated_at_the_ledgers_mean_entry_plus_64_bytes() -> None:
    assert estimated_read_size(10, ledger_bytes=5_000, ledger_entries=50) == 10 * (100 + 64)
    # nothing written yet: Pulsar's 10 KiB guess
    assert estimated_read_size(3, ledger_bytes=0, ledger_entries=0) == 3 * (10 * 1024 + 64)


def test_off_at_zero_as_pulsar_41s_default() -> None:
    async def main() -> int:
        return await ReadLimiter(0).acquire(10**9)

    assert run(main()) == 0


def test_the_queue_is_first_come_first_served_so_a_small_read_waits_behind_a_large_one() -> None:
    async def main() -> list[str]:
        limiter = ReadLimiter(100)
        order: list[str] = []

        async def read(name: str, size: int, hold_s: float) -> None:
            taken = await limiter.acquire(size)
            order.append(name)
            await asyncio.sleep(hold_s)
            limiter.release(taken)

        first = asyncio.create_task(read("first 60", 60, 1.0))
        await asyncio.sleep(0)
        large = asyncio.create_task(read("large 50", 50, 1.0))
        await asyncio.sleep(0)
        small = asyncio.create_task(read("small 10", 10, 1.0))  # 40 are free, yet it waits
        await asyncio.sleep(0.5)
        assert order == ["first 60"] and limiter.waiting == 2
        await asyncio.gather(first, large, small)
        assert limiter.available == 100
        return order

    assert run(main()) == ["first 60", "large 50", "small 10"]


def test_a_read_larger_than_the_limit_takes_the_whole_limit() -> None:
    async def main() -> int:
        return await ReadLimiter(100).acquire(10_000)

    assert run(main()) == 100


def test_a_full_queue_or_a_wait_past_the_timeout_fails_the_read() -> None:
    async def main() -> None:
        limiter = ReadLimiter(100, timeout_ms=2_000, queue_size=1)
        held = await limiter.acquire(100)
        waiting = asyncio.create_task(limiter.acquire(10))
        await asyncio.sleep(0)
        with pytest.raises(TooManyReads, match="already wait"):
            await limiter.acquire(10)
        with pytest.raises(TooManyReads, match="within 2 s"):
            await waiting
        assert limiter.waiting == 0
        limiter.release(held)
        assert limiter.available == 100, "the failed wait took nothing"

    run(main())


class GatedReadBookie(InMemoryBookie):
    """Storage reads wait on a gate; each records that it started."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = asyncio.Event()
        self.started: list[tuple[int, int]] = []

    async def read_entries(self, ledger_id: int, first: int, last: int) -> list[bytes]:
        self.started.append((first, last))
        await self.gate.wait()
        return await super().read_entries(ledger_id, first, last)


def test_a_ledgers_read_waits_for_permits_before_it_reaches_cache_or_storage() -> None:
    """Two readers of 10-byte entries under a limit of one read's estimate (10 x 74
    bytes): the second read does not start until the first has returned its entries."""

    async def main() -> None:
        bookie = GatedReadBookie()
        clock = ManualClock()
        events = create_stream("pip430", CacheConfig(max_size_bytes=0), clock).load_topic("t")
        ledger = ManagedLedger(
            "t", bookie, InMemoryMetadataStore(), events, ManagedLedgerConfig(), clock
        )
        await ledger.open()
        ledger_id = (await ledger.add_entries([b"x" * 10] * 20)).ledger_id
        ledger.read_limiter = ReadLimiter(10 * (10 + 64), timeout_ms=60_000)
        first = asyncio.create_task(ledger._read_range(ledger_id, 0, 9, "a", False))
        second = asyncio.create_task(ledger._read_range(ledger_id, 10, 19, "b", False))
        await asyncio.sleep(1)
        assert bookie.started == [(0, 9)], "the second read waits for permits"
        bookie.gate.set()
        assert len(await first) == 10 and len(await second) == 10
        assert bookie.started == [(0, 9), (10, 19)]
        assert ledger.read_limiter.available == 10 * 74
        # a read that cannot get permits in time fails as the ledger's error, retried by
        # its dispatcher
        ledger.read_limiter = ReadLimiter(74, timeout_ms=1_000, queue_size=0)
        held = await ledger.read_limiter.acquire(74)
        with pytest.raises(ReadsThrottled):
            await ledger._read_range(ledger_id, 0, 0, "a", False)
        ledger.read_limiter.release(held)
        await ledger.close()

    run(main())
