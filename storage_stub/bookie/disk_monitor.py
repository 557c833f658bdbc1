"""The disk bookie's disk usage monitor, after BookKeeper's LedgerDirsMonitor.

Usage is what BookKeeper's DiskChecker computes: ``1 - available / total`` of the file
system holding the data directory (``os.statvfs``: ``f_bavail`` and ``f_blocks``, so
blocks reserved for root count as used). The monitor checks it every
``diskCheckInterval`` ms, and at once when the bookie reports a write that found no
space, and holds the bookie's read-only state:

- usage >= ``diskUsageThreshold``, or a write that found no space (ENOSPC), or a
  database that failed a write or could only be opened read-only: the bookie turns
  read-only (``read_only_reason`` says why);
- at a periodic check with usage < ``diskUsageLwmThreshold``: the bookie's ``recover``
  runs (it reopens what failed) and, if it succeeds, the bookie is writable again. A check
  triggered by a failed write only ever turns the bookie read-only, so a file system that
  refuses writes while statvfs shows room does not flip the bookie at every add;
- with ``readOnlyModeEnabled=false`` BookKeeper shuts the bookie down instead of turning
  it read-only: here the bookie stays refusing adds (StorageFaultError) until a restart;
- usage >= ``diskUsageWarnThreshold``: a warning, logged once per crossing.

It also sets the entry log's preallocation budget after each check: nothing above the
warn threshold, else half of the space left below the threshold, so preallocation alone
never brings the disk to the threshold (preallocated blocks count as used).
"""

from __future__ import annotations

import asyncio
import logging
import os
import pathlib
from collections.abc import Awaitable, Callable

from storage_stub.bookie.api import BookieError, BookieReadOnlyError, StorageFaultError
from storage_stub.config import StorageConfig

log = logging.getLogger(__name__)

#: Returns ``(used bytes, total bytes)`` of the file system holding the data directory.
UsageProbe = Callable[[], tuple[int, int]]


def statvfs_probe(path: pathlib.Path) -> UsageProbe:
    """The probe of the file system holding ``path``: one statvfs call."""

    def probe() -> tuple[int, int]:
        stats = os.statvfs(path)
        total = stats.f_blocks * stats.f_frsize
        return total - stats.f_bavail * stats.f_frsize, total

    return probe


class DiskUsageMonitor:
    """Read-only state of one bookie and the owned task that checks its disk.

    ``measure``: one probe call (a statvfs). ``read_only_reason``: an attribute, what the
    bookie's add path checks.
    """

    __slots__ = (
        "_failures",
        "_interval_s",
        "_probe",
        "_recover",
        "_set_budget",
        "_stopped",
        "_task",
        "_wake",
        "_warned",
        "lwm_threshold",
        "read_only_mode",
        "read_only_reason",
        "threshold",
        "total",
        "usage",
        "used",
        "warn_threshold",
    )

    def __init__(
        self,
        probe: UsageProbe,
        config: StorageConfig,
        *,
        recover: Callable[[], Awaitable[None]],
        set_budget: Callable[[int], None],
    ) -> None:
        """``recover`` makes the bookie's parts writable again (raises BookieError if it
        cannot); ``set_budget`` receives the entry log's preallocation budget in bytes
        after every measure."""
        self._probe = probe
        self._recover = recover
        self._set_budget = set_budget
        self.threshold = config.diskUsageThreshold
        self.warn_threshold = config.diskUsageWarnThreshold
        self.lwm_threshold = config.diskUsageLwmThreshold
        #: false: a full disk stops adds until a restart (BookKeeper shuts down)
        self.read_only_mode = config.readOnlyModeEnabled
        self._interval_s = config.diskCheckInterval / 1000.0
        #: why the bookie is read-only; None while it is writable
        self.read_only_reason: str | None = None
        self.used = 0
        self.total = 0
        #: the last measured usage, 0..1
        self.usage = 0.0
        self._warned = False
        #: failures reported so far: a recovery that ran meanwhile does not clear them
        self._failures = 0
        self._stopped = False
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    @property
    def read_only(self) -> bool:
        return self.read_only_reason is not None

    def measure(self) -> float:
        """Probe the disk; update ``used``, ``total``, ``usage`` and the preallocation
        budget; warn on crossing the warn threshold. A failed probe keeps the last values."""
        try:
            used, total = self._probe()
        except OSError as error:
            log.error("disk check: cannot read the disk usage: %s", error)
            return self.usage
        self.used = used
        self.total = total
        usage = self.usage = used / total if total > 0 else 1.0
        if usage >= self.warn_threshold:
            if not self._warned:
                self._warned = True
                log.warning(
                    "disk usage %.1f%% reached diskUsageWarnThreshold %g",
                    usage * 100,
                    self.warn_threshold,
                )
        else:
            self._warned = False
        self._set_budget(self.preallocation_budget())
        return usage

    def preallocation_budget(self) -> int:
        """Bytes the entry log may preallocate until the next check: none at or above the
        warn threshold, else half of what is left below the threshold."""
        if self.usage >= self.warn_threshold:
            return 0
        return max(0, int(self.threshold * self.total) - self.used) // 2

    def usage_reason(self) -> str:
        return (
            f"disk usage {self.usage * 100:.1f}% reached diskUsageThreshold {self.threshold:g}"
            f" ({self.total - self.used} of {self.total} bytes available)"
        )

    def turn_read_only(self, reason: str) -> None:
        """Make the bookie read-only for ``reason`` (kept if it already is) and check the
        disk at once. Event loop only."""
        self._failures += 1
        self._enter_read_only(reason)
        self.check_soon()

    def _enter_read_only(self, reason: str) -> None:
        if self.read_only_reason is not None:
            return
        self.read_only_reason = reason
        if self.read_only_mode:
            log.error("bookie turns read-only: %s", reason)
        else:
            log.error(
                "bookie refuses writes until restarted (readOnlyModeEnabled=false): %s", reason
            )

    def refusal(self, operation: str) -> BookieError:
        """The error a refused write raises while read-only."""
        reason = self.read_only_reason or "not read-only"
        if self.read_only_mode:
            return BookieReadOnlyError(operation, reason)
        return StorageFaultError(
            operation,
            f"the disk is full and readOnlyModeEnabled=false ({reason}): a BookKeeper "
            "bookie shuts down here; writes resume after a restart",
        )

    async def check(self, periodic: bool) -> None:
        """Measure, then turn read-only on a full disk; at a periodic check, turn
        writable again once usage is below the low-water mark and ``recover`` succeeds."""
        usage = self.measure()
        if self.read_only_reason is None:
            if usage >= self.threshold:
                self._enter_read_only(self.usage_reason())
            return
        if not periodic or not self.read_only_mode or usage >= self.lwm_threshold:
            return
        failures = self._failures
        try:
            await self._recover()
        except BookieError as error:
            self.read_only_reason = f"space is back but recovery failed: {error}"
            log.error("bookie stays read-only: %s", self.read_only_reason)
            return
        if self._failures != failures:
            return  # a write failed while recovering: try again at the next check
        log.info(
            "bookie is writable again: disk usage %.1f%% is below diskUsageLwmThreshold %g",
            usage * 100,
            self.lwm_threshold,
        )
        self.read_only_reason = None

    def check_soon(self) -> None:
        """Run a (non-periodic) check as soon as the loop gets to it."""
        self._wake.set()

    def start(self) -> None:
        """Start the checking task on the running loop; ``stop`` cancels and awaits it."""
        if self._task is None and not self._stopped:
            self._task = asyncio.get_running_loop().create_task(
                self._run(), name="bookie-disk-monitor"
            )

    async def stop(self) -> None:
        self._stopped = True
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        next_periodic = loop.time() + self._interval_s
        while True:
            periodic = False
            try:
                async with asyncio.timeout_at(next_periodic):
                    await self._wake.wait()
            except TimeoutError:
                periodic = True
                next_periodic = loop.time() + self._interval_s
            self._wake.clear()
            try:
                await self.check(periodic)
            except Exception:
                # A broken check must not end the monitoring: log and check again later.
                log.exception("disk check failed")
