"""The dashboard's history (broker/dashboard.py): the whole run from its first sample, in
bounded memory, every recent sample kept and older ones thinned; sampled on the broker's
clock, so a virtual-time run of hours has its history from its virtual start."""

from __future__ import annotations

import asyncio
import itertools
from array import array

import pytest

from broker.cluster import Cluster
from broker.dashboard import SeriesHistory
from broker.dispatch.names import TopicName
from broker.ledger.entry import encode_message
from simulation import loop as sim
from simulation.loop import EPOCH_WALL_MS, VirtualClock, VirtualEventLoop
from tests.conftest import LiveBroker
from tests.harness import eventually_async, make_settings


def row(time_ms: int, value: int = 0) -> array[int]:
    return array("q", (time_ms, value))


def test_every_recent_row_is_kept_and_older_ones_thinned_within_the_bound() -> None:
    history = SeriesHistory(recent_ms=60_000, max_older=20, older_step_ms=10_000)
    for second in range(20_000):  # 5.5 hours at one row per second
        history.add(row(second * 1000, second))
        assert len(history) <= 61 + 20
    rows = history.rows()
    times = [r[0] for r in rows]
    assert times[0] == 0, "the run's first row stays"
    assert times == sorted(times) and len(set(times)) == len(times)
    assert times[-61:] == list(range((20_000 - 61) * 1000, 20_000 * 1000, 1000)), (
        "every row of the last minute is kept"
    )
    older = times[:-61]
    gaps = [b - a for a, b in itertools.pairwise(older)]
    # 20,000 s before the recent minute in at most 20 rows: the step doubled from 10 s
    # to at least 20,000 / 20 = 1,000 s
    assert history.step_ms >= 1_000_000
    assert min(gaps) >= history.step_ms
    assert len(older) >= 20 // 2 - 1, "thinning keeps about half of the bound"


def test_rows_since_a_time_are_the_rows_after_it_in_order() -> None:
    history = SeriesHistory(recent_ms=5_000, max_older=10, older_step_ms=2_000)
    for second in range(40):
        history.add(row(second * 1000, second))
    everything = [r.tolist() for r in history.rows()]
    for since in (-1, 0, 3_500, 20_000, 34_000, 36_000, 39_000):
        assert [r.tolist() for r in history.rows(since)] == [r for r in everything if r[0] > since]
    assert history.first_time_ms() == 0


def test_an_empty_history_has_no_start() -> None:
    history = SeriesHistory(recent_ms=0, max_older=4)
    assert history.rows() == [] and history.first_time_ms() is None
    history.add(row(5))
    assert history.first_time_ms() == 5 and len(history) == 1
    with pytest.raises(ValueError):
        SeriesHistory(recent_ms=0, max_older=3)


TOPIC = TopicName.of("public", "default", "history")


def test_a_virtual_run_of_hours_has_its_history_from_its_virtual_start() -> None:
    """Two virtual hours, a message every 10 s, a graceful restart half way: the history
    starts at the run's start on the virtual clock, stays within its bound, and its
    produced column only grows and ends at every message produced."""
    settings = make_settings(
        None,
        brokerlabDashboardSampleIntervalMs=1000,
        brokerlabDashboardHistoryMinutes=1,
        brokerlabDashboardHistoryOlderSamples=40,
        # the broker's own timers at a pace that keeps two virtual hours quick to run
        managedLedgerCacheEvictionIntervalMs=5000,
    )

    async def main() -> tuple[list[list[int]], list[str], int, int]:
        loop = asyncio.get_running_loop()
        assert isinstance(loop, VirtualEventLoop)
        clock = VirtualClock(loop)
        cluster = Cluster(settings, clock, threads=False)
        await cluster.open()
        try:
            await cluster.start()
            start_ms = clock.wall_ms()
            node = cluster.nodes[0]
            produced = 0
            for step in range(720):
                if step == 360:
                    await cluster.restart(0, "graceful", 5.0)
                topic = await cluster.service_for(TOPIC).get_topic(TOPIC, create=True)
                await topic.publish([encode_message(b"x", clock.wall_ms())])
                produced += 1
                await asyncio.sleep(10)
            await asyncio.sleep(2)  # two more samples after the last message
            rows = [r.tolist() for r in node.history.rows()]
            return rows, node.sampler.columns(), start_ms, produced
        finally:
            await cluster.close()

    rows, columns, start_ms, produced = sim.run(main(), limit_s=86_400)
    times = [r[0] for r in rows]
    assert start_ms == EPOCH_WALL_MS
    assert times[0] == start_ms, "the first sample is the run's start"
    assert times[-1] >= start_ms + 7_200_000, "and the last is the run's end, on virtual time"
    assert len(rows) <= 61 + 40
    assert times == sorted(times)
    column = columns.index("produced")
    counts = [r[column] for r in rows]
    assert counts == sorted(counts), "the totals go on across the restart"
    assert counts[-1] == produced


async def test_the_history_route_answers_the_rows_after_a_time_and_refuses_a_bad_one(
    live_broker: LiveBroker,
) -> None:
    client = await live_broker(
        brokerlabDashboardSampleIntervalMs=100, brokerlabShadowCacheImplementations="legacy"
    )

    async def rows() -> list[list[int]]:
        status, body = await client.request("GET", "/dashboard/history")
        assert status == 200, body
        return list(body["rows"]) if len(body["rows"]) >= 4 else []

    everything = await eventually_async(rows, "four samples")
    since = everything[1][0]
    status, body = await client.request("GET", "/dashboard/history", sinceMs=since)
    assert status == 200, body
    assert body["rows"] and all(row[0] > since for row in body["rows"])
    assert body["rows"][: len(everything) - 2] == everything[2:]
    assert body["shadows"] == ["legacy"] and body["columns"][-2:] == [
        "shadow.legacy.hits",
        "shadow.legacy.misses",
    ]
    for bad in ("x", "-1", "1.5"):
        status, body = await client.request("GET", "/dashboard/history", sinceMs=bad)
        assert status == 400 and body["code"] == "invalid-request", (bad, body)


class SteppedClock:
    """A clock whose wall time can be set anywhere (an NTP step), apart from its
    monotonic time."""

    def __init__(self) -> None:
        self.wall = 1_800_000_000_000
        self.mono_ns = 0

    def monotonic_ns(self) -> int:
        return self.mono_ns

    def wall_ms(self) -> int:
        return self.wall


async def test_samples_stay_in_order_if_the_wall_clock_steps_and_bounded_if_time_stops() -> None:
    clock = SteppedClock()
    cluster = Cluster(
        make_settings(
            None, brokerlabDashboardHistoryMinutes=1, brokerlabDashboardSampleIntervalMs=1000
        ),
        clock,
    )
    await cluster.open()
    node = cluster.nodes[0]
    try:
        await node.start()  # the broker alone: the test takes the samples
        node.sampler.sample()
        clock.wall -= 3_600_000  # the wall clock steps back an hour
        clock.mono_ns += 1_000_000_000
        node.sampler.sample()
        times = [row[0] for row in node.history.rows()]
        assert times == [1_800_000_000_000, 1_800_000_001_000]
        for _ in range(10_000):  # a clock that never moves (a test's manual clock)
            node.sampler.sample()
        assert len(node.history) <= 60 + 2 + 1
    finally:
        await cluster.close()
