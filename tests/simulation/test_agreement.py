"""Virtual time agrees with real time where real time keeps up: a preset run against a
live broker (``brokerlab serve`` over HTTP) and on virtual time, and every counter of the
workload and the cache from the virtual run lies within an edge of the live run's.

The edge is a share of the counter (at least :data:`EDGE_MIN`): the measured window of a
live run opens and closes on its sampler's ticks, a few milliseconds off the scenario's,
so a message or an eviction at the edge falls in one run's window and not in another's
(1%: one produce request of 100 messages in 5 s of tailing-fanout), and live runs
vary between themselves (by up to 3% on a shared machine: one live run, the suite's
budget, has the spread of the three the test once ran added to its edge: 3%). Key_Shared
with a slow consumer is paced by the broker's dispatch after each ack, which a live
broker does in its own time: the live runs deliver 1-4% less than the virtual one (whose
broker takes no time), and vary that much between themselves, so its edge is 8%.
Counters of the transport are not compared: the live driver sends ``messagesPerRequest``
messages per HTTP request and acks per poll, the simulated clients send one message at a
time and group acks as Pulsar's client does, so add calls and cursor writes differ by
design (README: Virtual time). Presets whose outcome depends on this machine's speed
(unthrottled producers or catch-up readers, thousands of topics set up and reconnected)
are not compared.

Both presets run in slow motion, at a quarter of their producer rates, messages per
request and consumers' rate limits (:data:`SLOW_MOTION`), so the workload keeps its shape (the slow
Key_Shared consumer stays ten times slower than its share): at full speed a live broker
keeps up only on an idle machine (on two cores shared with the rest of the suite and
other work, tailing-fanout's consumers once read 41% of what they should have), and the
comparison is about what the broker does, not how fast this machine is. A live run on a
loaded machine may still publish a few percent fewer messages than its rate asks: every
other counter of a live run is scaled to the virtual run's published messages before it
is compared (they grow with the workload), and published messages themselves are
compared with :data:`PACE_EDGE`, the live producer's pace on a busy machine."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import loadgen.broker_process
from loadgen.runner import RunOptions, run_scenario
from loadgen.scenario import Scenario, load_scenario
from simulation.run import run_virtual
from tests.loadgen.forked import EXEC_BROKERS, LazyForkServer

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def forked_brokers(lazy_fork_server: LazyForkServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """The live runs' brokers forked from a warm interpreter (tests/loadgen/forked.py):
    the test process's one fork server (tests/conftest.py), not one of the module's own,
    which cost a second interpreter's imports on each worker running these tests."""
    if not EXEC_BROKERS:
        monkeypatch.setattr(loadgen.broker_process, "launcher", lazy_fork_server.launch)


#: live runs per preset; one more when the virtual run falls outside the first's spread
LIVE_RUNS = 1
DURATION_S = 5.0
#: the share of each preset's rates the runs use (so a live run keeps up)
SLOW_MOTION = 0.25
#: the spread's edge per preset, a share of the counter
EDGES = {"tailing-fanout": 0.03, "keyshared-slow-consumer": 0.08}
EDGE_MIN = 20
#: how far a live run's published messages may fall from the virtual run's
PACE_EDGE = 0.10
PUBLISHED = ("totals", "publishedMessages")

#: the counters that describe the workload and what the cache did with it
COMPARED = (
    ("totals", "publishedMessages"),
    ("totals", "consumedMessages"),
    ("totals", "ackedMessages"),
    ("totals", "redeliveredMessages"),
    ("totals", "publishErrors"),
    ("cache", "hits"),
    ("cache", "misses"),
    ("cache", "inserted"),
    ("cache", "evicted", "ttl"),
    ("cache", "evicted", "size"),
    ("cache", "evicted", "invalidated"),
    ("storage", "bookie", "entriesAdded"),
    ("storage", "bookie", "entriesRead"),
)


def _value(results: dict[str, Any], path: tuple[str, ...]) -> float:
    value: Any = results
    for key in path:
        value = value.get(key, 0) if isinstance(value, dict) else 0
    return float(value or 0)


def _outside_the_spread(
    live: list[dict[str, Any]], virtual: dict[str, Any], share: float = 0.01
) -> list[str]:
    problems = []
    published = _value(virtual, PUBLISHED)
    for path in COMPARED:
        if path == PUBLISHED:
            values = [_value(run, path) for run in live]
            edge = max(PACE_EDGE * max(values), EDGE_MIN)
        else:
            values = [_value(run, path) * _scale(run, published) for run in live]
            edge = max(share * max(values), EDGE_MIN)
        low, high = min(values) - edge, max(values) + edge
        ours = _value(virtual, path)
        if not low <= ours <= high:
            problems.append(f"{'.'.join(path)}: virtual {ours:g}, live {values}")
    return problems


def _scale(run: dict[str, Any], published: float) -> float:
    """What makes a live run's counters those of a run that published ``published``."""
    ours = _value(run, PUBLISHED)
    return published / ours if ours and published else 1.0


def _slow_motion(scenario: Scenario, share: float) -> Scenario:
    """``scenario`` with its producers' rate, their messages per HTTP request and its
    consumers' rate limit times ``share``: the same workload, slower, with a request
    as long in time as before (a request is the live window's grain at its edges)."""
    consumers = scenario.consumers.model_copy(
        update={"rateLimit": scenario.consumers.rateLimit * share}
    )
    return scenario.model_copy(
        update={
            "producerRate": scenario.producerRate * share,
            "messagesPerRequest": max(round(scenario.messagesPerRequest * share), 1),
            "consumers": consumers,
        }
    )


@pytest.mark.parametrize("preset", list(EDGES))
def test_a_virtual_run_lies_within_the_spread_of_live_runs(preset: str) -> None:
    scenario = _slow_motion(load_scenario(preset), SLOW_MOTION)
    options = RunOptions(duration_s=DURATION_S)
    live = [asyncio.run(run_scenario(scenario, options)) for _ in range(LIVE_RUNS)]
    virtual = run_virtual(scenario, options)
    assert virtual["clock"] == "virtual"
    assert _value(virtual, ("totals", "consumedMessages")) > 0
    if _outside_the_spread(live, virtual, EDGES[preset]):
        # live runs vary between themselves; one more widens the spread to two runs'
        live.append(asyncio.run(run_scenario(scenario, options)))
    assert _outside_the_spread(live, virtual, EDGES[preset]) == []


def test_the_comparison_catches_a_virtual_run_that_differs() -> None:
    live = [{"totals": {"publishedMessages": n}, "cache": {"hits": n / 10}} for n in (9990, 10000)]
    agreeing = {"totals": {"publishedMessages": 10000}, "cache": {"hits": 1005}}
    missing_half = {"totals": {"publishedMessages": 5000}, "cache": {"hits": 500}}
    hitting_more = {"totals": {"publishedMessages": 10000}, "cache": {"hits": 1100}}
    assert _outside_the_spread(live, agreeing) == []
    assert _outside_the_spread(live, missing_half) == [
        "totals.publishedMessages: virtual 5000, live [9990.0, 10000.0]"
    ]
    # a live run that published 5% less is compared as if it published the virtual run's
    slower = [{"totals": {"publishedMessages": 9500}, "cache": {"hits": 950}}]
    assert _outside_the_spread(slower, agreeing) == []
    assert _outside_the_spread(slower, hitting_more) == ["cache.hits: virtual 1100, live [1000.0]"]
