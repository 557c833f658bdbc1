"""The live progress line of a run (rich): elapsed and remaining time, rates, backlog,
the broker's hit ratio and the p99 latencies of the last interval. Written to stderr so
``--json``-style output on stdout stays clean."""

from __future__ import annotations

from rich.console import Console
from rich.progress import (
    BarColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f} ms"


class ProgressDisplay:
    """One progress bar for the measured run, updated by the sampler every interval."""

    def __init__(self, name: str, duration_s: float, console: Console | None = None) -> None:
        self._duration = duration_s
        self._progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(bar_width=24),
            TimeElapsedColumn(),
            TextColumn("left"),
            TimeRemainingColumn(compact=True),
            TextColumn("{task.fields[stats]}"),
            console=console or Console(stderr=True),
            transient=False,
        )
        self._task: TaskID | None = None
        self._name = name

    def start(self) -> None:
        self._progress.start()
        self._task = self._progress.add_task(self._name, total=self._duration, stats="starting")

    def update(
        self,
        *,
        elapsed_s: float,
        publish_rate: float,
        consume_rate: float,
        backlog: int,
        hit_ratio: float | None,
        publish_p99: float | None,
        end_to_end_p99: float | None,
    ) -> None:
        if self._task is None:
            return
        hits = "-" if hit_ratio is None else f"{hit_ratio:.1%}"
        stats = (
            f"pub {publish_rate:,.0f}/s  cons {consume_rate:,.0f}/s  backlog {backlog:,}  "
            f"hit {hits}  p99 pub {_ms(publish_p99)} e2e {_ms(end_to_end_p99)}"
        )
        self._progress.update(self._task, completed=min(elapsed_s, self._duration), stats=stats)

    def stop(self) -> None:
        if self._task is not None:
            self._progress.stop()
            self._task = None
