"""``brokerlab analyze``'s progress: a line on stderr per phase as it starts and ends,
with its share done, and in between, on a classic session, the share of its Spark
tasks done::

    analyze: sweep: 25 replays (design, size) ...
    analyze: sweep: 1/2 tasks
    analyze: sweep: 25/25 replays (design, size) in 41.2 s

Spark's own console bars (one unnamed bar per stage) are off for the analysis
(``pipeline.spark``); every phase's jobs are described (``jobs.described``: the UI, the
event log and the history server name them by phase). On a classic session a thread
polls the SparkContext's status tracker once a second for the phase's jobs (the job
group the phase sets) and prints a line when more of their tasks are done. A Spark
Connect session has no status tracker on the client: the lines as phases start and end
are printed all the same, from the driver.

Cost: one status-tracker call per job and stage of the phase per poll, on a daemon
thread; nothing while no phase runs.
"""

from __future__ import annotations

import contextlib
import itertools
import sys
import threading
import time
from collections.abc import Iterator
from typing import IO, TYPE_CHECKING, Any

from pipeline.jobs import described

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: seconds between two looks at the status tracker
POLL_S = 1.0
_groups = itertools.count(1)


class Progress:
    """Phase lines for one analysis on ``spark`` (``quiet``: none)."""

    __slots__ = ("_context", "_group", "_spark", "_stream", "quiet", "seconds")

    def __init__(self, spark: SparkSession, stream: IO[str] | None = None, quiet: bool = False):
        self._spark = spark
        self._stream = stream
        self.quiet = quiet
        #: each phase's wall time so far, by name (the analysis's breakdown)
        self.seconds: dict[str, float] = {}
        #: the job group of the phase in progress
        self._group: str | None = None
        try:
            self._context: Any = spark.sparkContext
        except Exception:  # a Connect session has no SparkContext: it raises
            self._context = None

    def say(self, text: str) -> None:
        if not self.quiet:
            stream = self._stream if self._stream is not None else sys.stderr
            print(f"analyze: {text}", file=stream, flush=True)

    @contextlib.contextmanager
    def phase(self, name: str, total: int | None = None, unit: str = "") -> Iterator[None]:
        """The block is phase ``name`` (``total`` ``unit`` of work, if counted): its
        Spark jobs are in a job group of their own, described as the phase."""
        what = f"{total} {unit}".strip() if total is not None else ""
        self.say(f"{name}: {what} ..." if what else f"{name} ...")
        started = time.monotonic()
        group = f"brokerlab-analyze-{next(_groups)}"
        stop = threading.Event()
        watcher = None
        context = self._context
        if context is not None:
            before = context.getLocalProperty("spark.jobGroup.id")
            context.setLocalProperty("spark.jobGroup.id", group)
            self._group = group
            if not self.quiet:
                watcher = threading.Thread(
                    target=self._watch, args=(group, name, stop), daemon=True,
                    name=f"progress {name}",
                )  # fmt: skip
                watcher.start()
        try:
            with described(self._spark, name):
                yield
        finally:
            stop.set()
            if watcher is not None:
                watcher.join()
            if context is not None:
                context.setLocalProperty("spark.jobGroup.id", before)
                self._group = None
        seconds = time.monotonic() - started
        self.seconds[name] = self.seconds.get(name, 0.0) + seconds
        done = f"{total}/{total} {unit}".strip() + " " if total is not None else ""
        self.say(f"{name}: {done}done in {seconds:.1f} s")

    def _watch(self, group: str, name: str, stop: threading.Event) -> None:
        """Lines of the tasks done in ``group``'s jobs, as they change, until ``stop``."""
        shown = None
        while not stop.wait(POLL_S):
            try:
                done, total = self._tasks(group)
            except Exception:  # the context stopped, or the gateway is busy closing
                return
            if total and (done, total) != shown:
                shown = (done, total)
                self.say(f"{name}: {done}/{total} tasks")

    def tasks(self) -> tuple[int, int]:
        """The phase in progress: its Spark tasks done and in all so far ((0, 0) on
        Connect, or outside a phase)."""
        if self._group is None or self._context is None:
            return 0, 0
        return self._tasks(self._group)

    def _tasks(self, group: str) -> tuple[int, int]:
        """Tasks done and in all, of the stages of ``group``'s jobs so far."""
        tracker = self._context.statusTracker()
        done = total = 0
        for job in tracker.getJobIdsForGroup(group):
            info = tracker.getJobInfo(job)
            if info is None:
                continue
            for stage in info.stageIds:
                stage_info = tracker.getStageInfo(stage)
                if stage_info is not None:
                    done += stage_info.numCompletedTasks
                    total += stage_info.numTasks
        return done, total
