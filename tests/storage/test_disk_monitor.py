"""The disk usage monitor alone, on a probe the test sets: thresholds, hysteresis, the
warning, the preallocation budget, readOnlyModeEnabled, and the configuration's checks.
(The bookie on a real full file system: test_disk_full.py.)"""

from __future__ import annotations

import asyncio
import logging

import pytest
from pydantic import ValidationError

from storage_stub.bookie import BookieError, BookieReadOnlyError, StorageFaultError
from storage_stub.bookie.disk_monitor import DiskUsageMonitor
from storage_stub.config import StorageConfig
from tests.harness import eventually_async

TOTAL = 1_000_000


class Disk:
    """A probe reporting whatever usage the test sets, and a recovery the test can fail."""

    def __init__(self) -> None:
        self.usage = 0.5
        self.probes = 0
        self.recoveries = 0
        self.recovery_error: BookieError | None = None
        self.budgets: list[int] = []

    def probe(self) -> tuple[int, int]:
        self.probes += 1
        return int(self.usage * TOTAL), TOTAL

    async def recover(self) -> None:
        self.recoveries += 1
        if self.recovery_error is not None:
            raise self.recovery_error

    def monitor(self, **settings: object) -> DiskUsageMonitor:
        return DiskUsageMonitor(
            self.probe,
            StorageConfig(**settings),  # type: ignore[arg-type]
            recover=self.recover,
            set_budget=self.budgets.append,
        )


async def test_the_threshold_turns_read_only_and_only_the_low_water_mark_turns_writable() -> None:
    disk = Disk()
    monitor = disk.monitor(diskUsageThreshold=0.95, diskUsageLwmThreshold=0.9)

    await monitor.check(periodic=True)
    assert not monitor.read_only

    disk.usage = 0.96
    await monitor.check(periodic=True)
    assert monitor.read_only
    assert monitor.read_only_reason is not None
    assert "96.0%" in monitor.read_only_reason and "diskUsageThreshold 0.95" in (
        monitor.read_only_reason
    )
    refusal = monitor.refusal("addEntries")
    assert isinstance(refusal, BookieReadOnlyError)
    assert "read-only" in str(refusal) and "96.0%" in str(refusal)

    disk.usage = 0.93  # under the threshold, over the low-water mark: hysteresis
    await monitor.check(periodic=True)
    assert monitor.read_only and disk.recoveries == 0

    disk.usage = 0.89
    await monitor.check(periodic=True)
    assert not monitor.read_only
    assert disk.recoveries == 1


async def test_a_check_after_a_failed_write_turns_read_only_but_never_writable() -> None:
    disk = Disk()
    monitor = disk.monitor()
    disk.usage = 0.2  # statvfs shows room, yet a write found none (a quota, say)

    monitor.turn_read_only("addEntries failed: No space left on device")
    await monitor.check(periodic=False)
    assert monitor.read_only_reason == "addEntries failed: No space left on device"

    await monitor.check(periodic=True)
    assert not monitor.read_only


async def test_a_failed_recovery_keeps_the_bookie_read_only_and_says_why() -> None:
    disk = Disk()
    monitor = disk.monitor()
    monitor.turn_read_only("the index failed a write")
    disk.recovery_error = StorageFaultError("open", "cannot open the location index")

    await monitor.check(periodic=True)

    assert monitor.read_only_reason is not None
    assert "cannot open the location index" in monitor.read_only_reason
    disk.recovery_error = None
    await monitor.check(periodic=True)
    assert not monitor.read_only


async def test_the_warning_is_logged_once_per_crossing(caplog: pytest.LogCaptureFixture) -> None:
    disk = Disk()
    monitor = disk.monitor(diskUsageWarnThreshold=0.9)
    caplog.set_level(logging.WARNING, logger="storage_stub.bookie.disk_monitor")

    for usage in (0.91, 0.92, 0.5, 0.93):
        disk.usage = usage
        monitor.measure()

    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2
    assert "91.0%" in warnings[0] and "diskUsageWarnThreshold 0.9" in warnings[0]
    assert "93.0%" in warnings[1]


async def test_preallocation_gets_half_the_room_below_the_threshold_and_none_past_warn() -> None:
    disk = Disk()
    monitor = disk.monitor(diskUsageThreshold=0.95, diskUsageWarnThreshold=0.9)

    disk.usage = 0.5
    monitor.measure()
    disk.usage = 0.9
    monitor.measure()

    assert disk.budgets == [(950_000 - 500_000) // 2, 0]


async def test_without_read_only_mode_a_full_disk_refuses_writes_until_a_restart() -> None:
    disk = Disk()
    monitor = disk.monitor(readOnlyModeEnabled=False)
    disk.usage = 0.99
    await monitor.check(periodic=True)

    refusal = monitor.refusal("addEntries")
    assert type(refusal) is StorageFaultError
    assert "readOnlyModeEnabled=false" in str(refusal)

    disk.usage = 0.1
    await monitor.check(periodic=True)
    assert monitor.read_only and disk.recoveries == 0


async def test_the_monitor_task_checks_every_interval_and_stops_when_told() -> None:
    disk = Disk()
    monitor = disk.monitor(diskCheckInterval=5)
    monitor.start()
    try:
        await eventually_async(lambda: disk.probes >= 3, "three periodic checks", 10)
    finally:
        await monitor.stop()
    probes = disk.probes
    monitor.check_soon()
    await asyncio.sleep(0)
    assert disk.probes == probes  # stopped: nobody checks any more


@pytest.mark.parametrize(
    "settings",
    [
        {"diskUsageThreshold": 0},
        {"diskUsageThreshold": 1.01},
        {"diskUsageThreshold": 0.8},  # below the warn and low-water defaults
        {"diskUsageWarnThreshold": 0.96},
        {"diskUsageLwmThreshold": 0.97},
        {"diskUsageLwmThreshold": 0},
        {"diskCheckInterval": 0},
    ],
)
def test_disk_thresholds_out_of_range_are_refused(settings: dict[str, float]) -> None:
    with pytest.raises(ValidationError):
        StorageConfig(**settings)  # type: ignore[arg-type]


def test_a_threshold_of_one_means_a_completely_full_disk() -> None:
    config = StorageConfig(diskUsageThreshold=1, diskUsageWarnThreshold=1, diskUsageLwmThreshold=1)
    assert config.diskUsageThreshold == 1
