"""Waits many tasks share (``broker.tasks.join``, ``FifoLock``): same outcomes as
``asyncio.shield`` and ``asyncio.Lock``, but a waiter joins and leaves in O(1), so a
flood of requests cancelled at once (a client hanging up) never holds the loop."""

from __future__ import annotations

import asyncio
from asyncio.futures import _PyFuture  # type: ignore[attr-defined]  # callbacks visible

import pytest

from broker.cache import DEFAULT_DESIGN, CacheConfig, create_stream
from broker.clock import ManualClock
from broker.dispatch.names import TopicName
from broker.dispatch.service import BrokerService, ServiceConfig
from broker.tasks import FifoLock, FifoSemaphore, _fanouts, join
from storage_stub.bookie.memory import InMemoryBookie, InMemoryMetadataStore


async def test_every_waiter_gets_the_result_and_leaving_cancels_nothing() -> None:
    inner: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    waiters = [asyncio.ensure_future(join(inner)) for _ in range(10)]
    await asyncio.sleep(0)
    for waiter in waiters[:5]:
        waiter.cancel()
    await asyncio.wait(waiters[:5])
    assert not inner.done()
    inner.set_result(7)
    assert await asyncio.gather(*waiters[5:]) == [7] * 5
    assert all(w.cancelled() for w in waiters[:5])
    assert await join(inner) == 7  # done already
    assert inner not in _fanouts


async def test_a_failure_or_cancellation_reaches_every_waiter() -> None:
    loop = asyncio.get_running_loop()
    failing: asyncio.Future[int] = loop.create_future()
    waiters = [asyncio.ensure_future(join(failing)) for _ in range(3)]
    await asyncio.sleep(0)
    failing.set_exception(KeyError("gone"))
    for outcome in await asyncio.gather(*waiters, return_exceptions=True):
        assert isinstance(outcome, KeyError)
    cancelled: asyncio.Future[int] = loop.create_future()
    waiter = asyncio.ensure_future(join(cancelled))
    await asyncio.sleep(0)
    cancelled.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter


async def test_the_shared_future_carries_one_callback_whatever_the_number_of_waiters() -> None:
    """What made the PRODUCER flood quadratic: shield adds a callback per waiter, and
    each cancelled waiter scans them all to remove its own."""
    inner = _PyFuture(loop=asyncio.get_running_loop())
    waiters = [asyncio.ensure_future(join(inner)) for _ in range(1000)]
    await asyncio.sleep(0)
    assert len(inner._callbacks) == 1
    for waiter in waiters:
        waiter.cancel()
    await asyncio.gather(*waiters, return_exceptions=True)
    assert inner._callbacks == [] and inner not in _fanouts  # the last one out cleans up
    assert not inner.done()


async def test_the_lock_is_first_come_first_served_and_skips_who_left() -> None:
    lock = FifoLock()
    order: list[int] = []

    async def take(i: int) -> None:
        async with lock:
            order.append(i)
            await asyncio.sleep(0)

    await lock.acquire()
    tasks = [asyncio.ensure_future(take(i)) for i in range(6)]
    await asyncio.sleep(0)
    tasks[1].cancel()
    tasks[4].cancel()
    lock.release()
    await asyncio.gather(*tasks, return_exceptions=True)
    assert order == [0, 2, 3, 5]
    assert not lock.locked()


async def test_a_waiter_cancelled_after_the_lock_was_handed_to_it_passes_it_on() -> None:
    lock = FifoLock()
    await lock.acquire()
    first = asyncio.ensure_future(lock.acquire())
    second = asyncio.ensure_future(lock.acquire())
    await asyncio.sleep(0)
    lock.release()  # handed to ``first``, which has not run yet
    first.cancel()
    await second  # ``first`` passed it on
    assert lock.locked()
    lock.release()
    assert not lock.locked()


class GatedMetadata(InMemoryMetadataStore):
    """Reads wait on a gate: a topic's load stays under way."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = asyncio.Event()
        #: reads waiting at the gate
        self.waiting = 0

    async def get(self, key: str) -> bytes | None:
        self.waiting += 1
        try:
            await self.gate.wait()
        finally:
            self.waiting -= 1
        return await super().get(key)


#: requests that join one topic's load. The flood that held the loop (32k, each leaving
#: in O(n)) is not what fails here: that the waiters join through one fan-out (O(1) to
#: leave, whatever their number) is asserted, so a size that shows it is enough (20,000
#: took 3 s of CPU to create and cancel)
FLOOD = 2_000


async def test_cancelled_topic_waiters_leave_the_load_alone() -> None:
    """A flood of requests joins a topic's load through one fan-out (``join``, not a
    callback each as ``asyncio.shield`` adds), all are cancelled (their connection went)
    and the last one out takes it away; the load completes and the topic serves."""
    metadata = GatedMetadata()
    cache = create_stream(DEFAULT_DESIGN, CacheConfig(max_size_bytes=0), ManualClock())
    service = BrokerService(ServiceConfig(), InMemoryBookie(), metadata, cache, ManualClock())
    name = TopicName.parse("persistent://public/default/flooded")
    loader = asyncio.ensure_future(service.get_topic(name, create=True))
    await asyncio.sleep(0)
    waiters = [asyncio.ensure_future(service.get_topic(name, create=True)) for _ in range(FLOOD)]
    await asyncio.sleep(0)
    assert [len(fanout.waiters) for fanout in _fanouts.values()] == [FLOOD]
    for waiter in waiters:
        waiter.cancel()
    await asyncio.gather(*waiters, return_exceptions=True)
    assert not _fanouts and not loader.done()
    metadata.gate.set()
    topic = await loader
    assert service.topics[name] is topic
    assert await service.get_topic(name, create=False) is topic
    await service.close()


async def test_a_semaphore_hands_its_slots_out_in_order_past_who_left() -> None:
    slots = FifoSemaphore(2)
    await slots.acquire()
    await slots.acquire()
    assert slots.locked()
    waiters = [asyncio.ensure_future(slots.acquire()) for _ in range(3)]
    await asyncio.sleep(0)
    waiters[0].cancel()
    slots.release()
    await asyncio.sleep(0)
    assert [w.done() and not w.cancelled() for w in waiters] == [False, True, False]
    slots.release()
    await waiters[2]
    slots.release()
    slots.release()
    assert not slots.locked()


async def test_topic_loads_past_max_concurrent_topic_load_request_wait_their_turn() -> None:
    """maxConcurrentTopicLoadRequest=2: of three topics loading, two read storage at
    once; the third waits for a slot, and all three load."""
    metadata = GatedMetadata()
    cache = create_stream(DEFAULT_DESIGN, CacheConfig(max_size_bytes=0), ManualClock())
    config = ServiceConfig(max_concurrent_topic_loads=2)
    service = BrokerService(config, InMemoryBookie(), metadata, cache, ManualClock())
    names = [TopicName.parse(f"persistent://public/default/slot-{i}") for i in range(3)]
    loads = [asyncio.ensure_future(service.get_topic(name, create=True)) for name in names]
    for _ in range(20):
        await asyncio.sleep(0)
    assert metadata.waiting == 2
    metadata.gate.set()
    topics = await asyncio.gather(*loads)
    assert [topic.name for topic in topics] == names
    await service.close()
