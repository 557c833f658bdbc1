"""The results of one run: a JSON document shaped like the OpenMessaging Benchmark's,
plus what the broker's cache and storage did during the run.

Shape (``version`` 1):

- ``scenario`` (the scenario as run, after ``--duration`` scaling, with its ``driver``),
  ``broker`` (its HTTP ``url``, ``null`` when reached over the binary protocol only; the
  pulsar driver's ``serviceUrl``; ``statsUnavailable``, why there are no brokerlab cache
  and storage stats, ``null`` when there are; whether the load generator started it, the
  cache design, the overrides, restarts);
- ``startedAtMs``, ``durationSeconds`` (measured), ``sampleIntervalSeconds``;
- series, one value per sample interval, all of the same length: ``time`` (seconds
  since the measured start, at the interval's end), ``publishRate``, ``consumeRate``
  (messages/s), ``backlog`` (messages, client side: published x subscriptions minus
  first deliveries), ``hitRatio`` (the broker's, over the interval; ``null`` without
  reads), and for ``publishLatency`` and ``endToEndLatency`` the suffixes ``Avg``,
  ``50pct``, ``75pct``, ``95pct``, ``99pct``, ``999pct``, ``Max`` (milliseconds; ``null``
  in an interval with no messages);
- ``shadowHitRatio``: for each shadow design, its hit ratio over each interval, as long
  as ``time`` (``null`` without reads, or before the shadow appeared); empty without
  shadows (absent from results written before it was recorded);
- aggregates over the whole run: ``aggregatedPublishLatency*`` and
  ``aggregatedEndToEndLatency*`` with the same suffixes;
- ``totals``: messages and bytes published and consumed, errors, redeliveries, messages
  acknowledged and negatively acknowledged, average rates, the backlog at the end;
- ``cache``: the growth of the broker's cache counters during the run (``hits``,
  ``misses``, ``hitBytes``, ``missBytes``, ``inserted``, ``evicted`` by reason,
  ``evictionRuns``, ``evictionCpuSeconds``, ``joined``: entries a reader waited for
  from another reader's storage read, ``requested``: entries asked for), ``hitRatio``
  (hits / (hits + misses), as Pulsar's metrics), ``readHitRatio`` (1 - misses /
  requested: joined entries count as asked for and not read) and ``byteHitRatio``, and
  the same for each shadow design; ``consumedHitRatio``, the metric of Pulsar's public
  PIP-430 comparison: (messages consumed - entries read from storage) / messages
  consumed, redeliveries counted as consumed (``null`` with nothing consumed);
- ``storage``: the growth of the bookie's and the tiered store's counters during the
  run (``bookie.readRequests``, ``bookie.entriesRead``, ``bookie.bytesRead``, ...);
- ``brokerAtEnd``: the raw ``broker-stats/cache`` and ``broker-stats/storage`` answers
  at the end;
- ``events``: each scheduled event with when it ran, whether it worked and what it did;
- ``trace``: the broker's access trace stats at the end (``{"enabled": false}`` unless
  ``--trace``; the files are complete once the broker has stopped);
- ``drain`` (only with ``--drain``): after the measured run, how long the consumers took
  to catch up and whether they did (``caughtUp``, ``backlog``), with the run's lifetime
  ``publishedMessages``, ``firstDeliveries`` and ``ackedMessages``, and how many
  negatively acknowledged messages were still to come back (``awaitingRedelivery``);
  ``distinctDeliveries``, the (message, subscription) pairs delivered at least once,
  each counted once however often it came and only for messages acknowledged on
  publish, and ``missing``, the pairs of such messages never delivered (published x
  subscriptions minus ``distinctDeliveries``): ``firstDeliveries`` counts deliveries
  with redelivery count 0, which a broker restart repeats for acks it had not stored,
  so a repeat can make ``backlog`` 0 with a message lost; ``missing`` cannot be made up
  that way, and ``caughtUp`` is false while it is above 0 (see loadgen.deliveries);
  ``endToEndLatencyMaxMs``, the largest end-to-end latency of the run and the drain
  together (a delayed message due after the run is delivered in the drain).
"""

from __future__ import annotations

import json
import math
import pathlib
from typing import Any

from loadgen.recorder import PERCENTILES
from loadgen.scenario import Scenario

VERSION = 1
LATENCY_SUFFIXES = ("Avg", *(suffix for suffix, _ in PERCENTILES), "Max")
LATENCY_PREFIXES = ("publishLatency", "endToEndLatency")
SERIES = (
    "time",
    "publishRate",
    "consumeRate",
    "backlog",
    "hitRatio",
    *(prefix + suffix for prefix in LATENCY_PREFIXES for suffix in LATENCY_SUFFIXES),
)
CACHE_COUNTERS = (
    "hits",
    "misses",
    "hitBytes",
    "missBytes",
    "joined",
    "requested",
    "inserted",
    "evictionRuns",
    "evictionCpuSeconds",
)
EVICTION_REASONS = ("ttl", "size", "invalidated")


def _ratio(part: float, whole: float) -> float | None:
    return round(part / whole, 4) if whole else None


def _cache_growth(delta: dict[str, float], prefix: str = "") -> dict[str, Any]:
    growth: dict[str, Any] = {
        name: delta.get(prefix + name, 0) for name in CACHE_COUNTERS if prefix + name in delta
    }
    for name in ("hits", "misses", "hitBytes", "missBytes"):
        growth.setdefault(name, delta.get(prefix + name, 0))
    growth["evicted"] = {
        reason: delta.get(f"{prefix}evicted.{reason}", 0) for reason in EVICTION_REASONS
    }
    growth["hitRatio"] = _ratio(growth["hits"], growth["hits"] + growth["misses"])
    # every entry asked for counts, joined ones too: 1 - storage reads / entries asked
    requested = growth.get("requested")
    growth["readHitRatio"] = (
        _ratio(requested - growth["misses"], requested) if requested is not None else None
    )
    growth["byteHitRatio"] = _ratio(growth["hitBytes"], growth["hitBytes"] + growth["missBytes"])
    return growth


def _storage_growth(delta: dict[str, float]) -> dict[str, dict[str, float]]:
    result: dict[str, dict[str, float]] = {"bookie": {}, "tiered": {}}
    for key, value in delta.items():
        tier, _, name = key.partition(".")
        if tier in result and name:
            result[tier][name] = value
    return result


def build_results(
    *,
    scenario: Scenario,
    url: str | None,
    started_broker: bool,
    started_at_ms: int,
    measured_s: float,
    interval_s: float,
    series: dict[str, list[Any]],
    publish: dict[str, float | None],
    end_to_end: dict[str, float | None],
    counters: dict[str, Any],
    backlog_at_end: int,
    events: list[dict[str, Any]],
    cache_delta: dict[str, float],
    storage_delta: dict[str, float],
    cache_at_end: dict[str, Any],
    storage_at_end: dict[str, Any],
    broker_restarts: int,
    overrides: dict[str, Any],
    service_url: str | None = None,
    stats_error: str | None = None,
    shadow_series: dict[str, list[float | None]] | None = None,
) -> dict[str, Any]:
    results: dict[str, Any] = {
        "version": VERSION,
        "scenario": scenario.model_dump(mode="json"),
        "broker": {
            "url": url,
            "serviceUrl": service_url,
            "statsUnavailable": stats_error,
            "startedByLoadgen": started_broker,
            "implementation": cache_at_end.get("implementation"),
            "cacheMaxSizeBytes": cache_at_end.get("maxSizeBytes"),
            "overrides": overrides,
            "restarts": broker_restarts,
        },
        "startedAtMs": started_at_ms,
        "durationSeconds": round(measured_s, 3),
        "sampleIntervalSeconds": interval_s,
    }
    for name in SERIES:
        results[name] = list(series.get(name, []))
    results["shadowHitRatio"] = {
        name: list(values) for name, values in (shadow_series or {}).items()
    }
    for prefix, summary in (("PublishLatency", publish), ("EndToEndLatency", end_to_end)):
        for suffix in LATENCY_SUFFIXES:
            results[f"aggregated{prefix}{suffix}"] = summary[suffix[0].lower() + suffix[1:]]
    seconds = max(measured_s, 1e-9)
    results["totals"] = {
        **counters,
        "publishRateAvg": round(counters["publishedMessages"] / seconds, 1),
        "consumeRateAvg": round(counters["consumedMessages"] / seconds, 1),
        "backlogAtEnd": backlog_at_end,
    }
    cache = _cache_growth(cache_delta)
    shadows = {}
    for name in cache_at_end.get("shadows", {}):
        shadows[name] = _cache_growth(cache_delta, prefix=f"shadows.{name}.")
    cache["shadows"] = shadows
    results["cache"] = cache
    storage = _storage_growth(storage_delta)
    results["storage"] = storage
    consumed = counters["consumedMessages"]
    read = storage["bookie"].get("entriesRead", 0) + storage["tiered"].get("entriesRead", 0)
    cache["consumedHitRatio"] = _ratio(consumed - read, consumed)
    results["brokerAtEnd"] = {"cache": cache_at_end, "storage": storage_at_end}
    results["events"] = events
    return results


def validate_results(results: dict[str, Any]) -> list[str]:
    """Problems with a results document (empty when it is well formed and consistent):
    every field present, every series as long as ``time``, numbers where numbers belong,
    percentiles in order, and the rates adding up to the totals."""
    problems: list[str] = []
    required = (
        "version",
        "scenario",
        "broker",
        "startedAtMs",
        "durationSeconds",
        "sampleIntervalSeconds",
        *SERIES,
        *(
            f"aggregated{p[0].upper()}{p[1:]}{s}"
            for p in LATENCY_PREFIXES
            for s in LATENCY_SUFFIXES
        ),
        "totals",
        "cache",
        "storage",
        "brokerAtEnd",
        "events",
    )
    for name in required:
        if name not in results:
            problems.append(f"missing {name}")
    if problems:
        return problems
    length = len(results["time"])
    if length == 0:
        problems.append("no samples")
    for name in SERIES:
        if len(results[name]) != length:
            problems.append(f"{name} has {len(results[name])} values, time has {length}")
    if results["time"] != sorted(results["time"]):
        problems.append("time is not increasing")
    for name in ("publishRate", "consumeRate", "backlog"):
        if any(not _number(value) or value < 0 for value in results[name]):
            problems.append(f"{name} has a value that is not a non-negative number")
    if any(value is not None and not 0 <= value <= 1 for value in results["hitRatio"]):
        problems.append("hitRatio has a value outside [0, 1]")
    for name, values in (results.get("shadowHitRatio") or {}).items():
        if len(values) != length:
            problems.append(f"shadowHitRatio.{name} has {len(values)} values, time has {length}")
        if any(value is not None and not 0 <= value <= 1 for value in values):
            problems.append(f"shadowHitRatio.{name} has a value outside [0, 1]")
    for prefix in ("aggregatedPublishLatency", "aggregatedEndToEndLatency"):
        values = [results[prefix + suffix] for suffix in LATENCY_SUFFIXES[1:]]
        present = [value for value in values if value is not None]
        if present and (len(present) != len(values) or present != sorted(present)):
            problems.append(f"{prefix} percentiles are not in order: {values}")
    totals = results["totals"]
    # each rate covers the time since the previous sample (an overloaded client samples
    # late, and the rate is still per second of what it covered)
    times = results["time"]
    spans = [after - before for before, after in zip([0.0, *times], times, strict=False)]
    pairs = (("publishRate", "publishedMessages"), ("consumeRate", "consumedMessages"))
    for series, total in pairs:
        counted = totals.get(total, -1)
        approx = sum(rate * span for rate, span in zip(results[series], spans, strict=False))
        if counted < 0:
            problems.append(f"totals.{total} missing")
        elif not math.isclose(approx, counted, rel_tol=0.01, abs_tol=10):
            problems.append(f"sum of {series} over time is {approx:.0f}, totals.{total} {counted}")
    cache = results["cache"]
    for name in ("hits", "misses", "hitBytes", "missBytes"):
        if not _number(cache.get(name)) or cache[name] < 0:
            problems.append(f"cache.{name} is not a non-negative number")
    if "bookie" not in results["storage"]:
        problems.append("storage.bookie missing")
    for event in results["events"]:
        for key in ("at", "type", "ok", "detail"):
            if key not in event:
                problems.append(f"event {event} has no {key}")
    if "drain" in results:
        problems += _drain_problems(results["drain"])
    return problems


def _drain_problems(drain: dict[str, Any]) -> list[str]:
    """A drain's counts are non-negative integers, and it did not catch up while a
    message was missing (``distinctDeliveries`` and ``missing`` are absent from results
    written before they were recorded)."""
    problems = []
    for name in ("publishedMessages", "firstDeliveries", "ackedMessages", "backlog"):
        if not isinstance(drain.get(name), int) or drain[name] < 0:
            problems.append(f"drain.{name} is not a non-negative integer")
    for name in ("distinctDeliveries", "missing"):
        if name in drain and (not isinstance(drain[name], int) or drain[name] < 0):
            problems.append(f"drain.{name} is not a non-negative integer")
    if drain.get("caughtUp") and (drain.get("missing") or drain.get("backlog")):
        problems.append(f"drain caught up with messages undelivered: {drain}")
    return problems


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def write_results(
    results: dict[str, Any], out_dir: pathlib.Path, plots: bool = True
) -> pathlib.Path:
    """``results.json`` and (unless ``plots`` is false) the plots in ``out_dir``; returns
    the JSON's path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "results.json"
    path.write_text(json.dumps(results, indent=2, sort_keys=False) + "\n")
    if plots:
        from loadgen.plots import plot_run

        plot_run(results, out_dir)
    return path
