"""Latency specs, the latency model, the fault injector and the counters."""

from __future__ import annotations

import statistics
from collections.abc import Coroutine
from typing import Any

import pydantic
import pytest

from storage_stub.bookie import OPERATIONS, FaultInjector, LatencyModel, OpCounters
from storage_stub.bookie import faults as faults_module
from storage_stub.bookie import latency as latency_module
from storage_stub.bookie.api import StorageFaultError
from storage_stub.config import StorageConfig
from storage_stub.latency_spec import (
    FixedLatency,
    LogNormalLatency,
    UniformLatency,
    parse_latency_spec,
)


def completes_without_suspending(coroutine: Coroutine[Any, Any, Any]) -> bool:
    try:
        coroutine.send(None)
    except StopIteration:
        return True
    coroutine.close()
    return False


@pytest.mark.parametrize("spec", ["0", "0.0", " 0 ", "fixed:0", "uniform:0:0"])
def test_zero_specs_mean_no_delay(spec: str) -> None:
    assert parse_latency_spec(spec) is None


def test_valid_specs_parse_to_their_distribution() -> None:
    fixed = parse_latency_spec("fixed:2.5")
    assert isinstance(fixed, FixedLatency) and fixed.ms == 2.5
    uniform = parse_latency_spec("uniform:1:3")
    assert isinstance(uniform, UniformLatency) and (uniform.min_ms, uniform.max_ms) == (1, 3)
    lognormal = parse_latency_spec("lognormal:4:0.5")
    assert isinstance(lognormal, LogNormalLatency)
    assert (lognormal.median_ms, lognormal.sigma) == (4, 0.5)


@pytest.mark.parametrize(
    ("spec", "complaint"),
    [
        ("", "expected '0'"),
        ("5", "expected '0'"),
        ("gauss:1:2", "expected '0'"),
        ("fixed", "fixed takes 1 value"),
        ("fixed:1:2", "fixed takes 1 value"),
        ("fixed:abc", "'abc' is not a number"),
        ("fixed:-1", ">= 0"),
        ("fixed:nan", ">= 0"),
        ("uniform:5", "uniform takes 2 values"),
        ("uniform:5:1", "min_ms must not exceed max_ms"),
        ("lognormal:0:1", "median_ms must be > 0"),
        ("lognormal:1:-0.5", ">= 0"),
        ("lognormal:1:inf", ">= 0"),
    ],
)
def test_bad_specs_are_rejected_with_a_clear_message(spec: str, complaint: str) -> None:
    with pytest.raises(ValueError, match="latency spec") as rejected:
        parse_latency_spec(spec)
    assert complaint in str(rejected.value)


def test_storage_config_rejects_a_bad_latency_spec_naming_the_key() -> None:
    with pytest.raises(pydantic.ValidationError) as rejected:
        StorageConfig(readEntryLatency="uniform:9:1")
    assert "readEntryLatency" in str(rejected.value)
    assert StorageConfig(readEntryLatency="lognormal:2:0.3").readEntryLatency == "lognormal:2:0.3"


def test_config_latencies_apply_to_their_operations_only() -> None:
    model = LatencyModel.from_config(
        StorageConfig(
            addEntryLatency="fixed:1",
            readEntryLatency="fixed:2",
            getLastEntryLatency="fixed:3",
            metadataLatency="fixed:4",
        )
    )
    assert {op: model.draw_ms(op) for op in OPERATIONS} == {
        "createLedger": 0.0,
        "addEntries": 1.0,
        "readEntries": 2.0,
        "getLastEntry": 3.0,
        "closeLedger": 0.0,
        "deleteLedger": 0.0,
        "metadataGet": 4.0,
        "metadataPut": 4.0,
        "metadataDelete": 4.0,
    }


def test_seeded_models_draw_the_same_delays_within_their_bounds() -> None:
    specs = {"addEntries": "uniform:1:3", "readEntries": "lognormal:5:0.4"}
    first = LatencyModel.from_specs(specs, seed=11)
    second = LatencyModel.from_specs(specs, seed=11)
    draws = [first.draw_ms("addEntries") for _ in range(500)]
    assert draws == [second.draw_ms("addEntries") for _ in range(500)]
    assert all(1.0 <= d <= 3.0 for d in draws)
    tail = [first.draw_ms("readEntries") for _ in range(2001)]
    assert 4.0 < statistics.median(tail) < 6.0
    assert max(tail) > 2 * statistics.median(tail)


async def test_a_zero_delay_never_suspends() -> None:
    model = LatencyModel.from_specs({"addEntries": "0"})
    assert completes_without_suspending(model.delay("addEntries"))
    assert completes_without_suspending(model.delay("readEntries"))


async def test_a_delay_sleeps_the_drawn_time(monkeypatch: pytest.MonkeyPatch) -> None:
    slept: list[float] = []

    async def fake_sleep(seconds: float) -> None:
        slept.append(seconds)

    monkeypatch.setattr(latency_module.asyncio, "sleep", fake_sleep)
    model = LatencyModel.from_specs({"readEntries": "fixed:250"})
    await model.delay("readEntries")
    assert slept == [0.25]


def test_unknown_operations_are_rejected() -> None:
    with pytest.raises(ValueError, match="unknown storage operation"):
        LatencyModel.from_specs({"addEntry": "fixed:1"})
    with pytest.raises(ValueError, match="unknown storage operation"):
        FaultInjector().set("readEntry", error_rate=1.0)


async def test_error_rate_one_always_fails_and_zero_never_does() -> None:
    faults = FaultInjector(seed=3)
    faults.set("readEntries", error_rate=1.0)
    for _ in range(200):
        with pytest.raises(StorageFaultError) as failure:
            await faults.check("readEntries")
        assert failure.value.operation == "readEntries"
    faults.set("readEntries", error_rate=0.0, delay_ms=0.0)
    for _ in range(200):
        await faults.check("readEntries")
    assert faults.snapshot() == {}


async def test_a_seeded_partial_error_rate_fails_reproducibly() -> None:
    async def outcomes(seed: int) -> list[bool]:
        faults = FaultInjector(seed=seed)
        faults.set("addEntries", error_rate=0.3)
        failed = []
        for _ in range(300):
            try:
                await faults.check("addEntries")
                failed.append(False)
            except StorageFaultError:
                failed.append(True)
        return failed

    first = await outcomes(5)
    assert first == await outcomes(5)
    assert 40 < sum(first) < 140


async def test_fault_delay_waits_before_the_call_proceeds(monkeypatch: pytest.MonkeyPatch) -> None:
    slept: list[float] = []

    async def fake_sleep(seconds: float) -> None:
        slept.append(seconds)

    monkeypatch.setattr(faults_module.asyncio, "sleep", fake_sleep)
    faults = FaultInjector()
    faults.set("metadataPut", delay_ms=40)
    await faults.check("metadataPut")
    assert slept == [0.04]
    assert faults.snapshot() == {
        "metadataPut": {"errorRate": 0.0, "delayMs": 40.0, "injectedErrors": 0}
    }


def test_fault_settings_are_validated_and_cleared() -> None:
    faults = FaultInjector()
    for bad in [{"error_rate": 1.5}, {"error_rate": -0.1}, {"delay_ms": -1.0}]:
        with pytest.raises(ValueError):
            faults.set("addEntries", **bad)
    faults.set("addEntries", error_rate=0.5)
    faults.set("readEntries", delay_ms=1.0)
    faults.clear("addEntries")
    assert list(faults.snapshot()) == ["readEntries"]
    faults.clear()
    assert faults.snapshot() == {}
    assert completes_without_suspending(faults.check("readEntries"))


def test_counters_cover_every_operation_and_the_floor_seeks() -> None:
    counters = OpCounters()
    counters.addEntries.calls += 2
    counters.addEntries.entries += 10
    counters.of("getFloor").calls += 1
    snapshot = counters.snapshot()
    assert list(snapshot) == [*OPERATIONS, "getFloor"]
    assert snapshot["addEntries"] == {"calls": 2, "errors": 0, "entries": 10, "bytes": 0}
    assert snapshot["getFloor"]["calls"] == 1
    with pytest.raises(KeyError):
        counters.of("nope")
    with pytest.raises(AttributeError):
        counters.extra = 1  # type: ignore[attr-defined]
