"""The live progress line of a run (rich): a bar, elapsed and remaining time, rates,
backlog, the broker's hit ratio and the p99 latencies of the last interval. Written to
stderr so ``--json``-style output on stdout stays clean.

The line fits the terminal as it is at each update: the bar, the elapsed time and the
time left stay down to some 50 columns; what gives way first is the statistics (full
figures, then compact ones, then fewer of them), then the bar's length, then the
scenario's name. Rich alone squeezed every column alike, so below 120 columns the bar,
the elapsed time and the time left were the first to go.
"""

from __future__ import annotations

from dataclasses import dataclass

from rich.console import Console
from rich.progress import BarColumn, Progress, TaskID, TextColumn

#: the bar's length when there is room, and the shortest it gets before the name is cut
BAR_WIDTH = 24
MIN_BAR_WIDTH = 8
#: a scenario name longer than this is cut when the line is short of room
MIN_NAME_WIDTH = 8
#: how many of the statistics' variants (fullest first) are tried with the whole name
#: before it is cut: down to the hit ratio with the p99s
KEEP_NAME_VARIANTS = 4


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f} ms"


def _short_ms(value: float | None) -> str:
    """``850us``, ``12ms``, ``3.4s``, ``125s``: three significant figures at most."""
    if value is None:
        return "-"
    if value < 1:
        return f"{value * 1000:.0f}us"
    if value < 1000:
        return f"{value:.3g}ms"
    seconds = value / 1000
    return f"{seconds:.3g}s" if seconds < 1000 else f"{seconds:.0f}s"


def _count(value: float) -> str:
    """``950``, ``12.3k``, ``1.23M``."""
    for limit, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= limit:
            return f"{value / limit:.3g}{suffix}"
    return f"{value:.0f}"


def _clock(seconds: float) -> str:
    """``0:07``, ``12:34``, ``1:02:03``."""
    whole = max(0, int(seconds))
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


@dataclass(frozen=True, slots=True)
class Stats:
    """What the line reports of the last interval."""

    publish_rate: float = 0.0
    consume_rate: float = 0.0
    backlog: int = 0
    hit_ratio: float | None = None
    publish_p99: float | None = None
    end_to_end_p99: float | None = None

    def variants(self) -> list[str]:
        """The statistics from the fullest to the shortest (the last one empty)."""
        hits = "-" if self.hit_ratio is None else f"{self.hit_ratio:.1%}"
        p99 = f"p99 {_short_ms(self.publish_p99)}/{_short_ms(self.end_to_end_p99)}"
        return [
            f"pub {self.publish_rate:,.0f}/s  cons {self.consume_rate:,.0f}/s  "
            f"backlog {self.backlog:,}  hit {hits}  p99 pub {_ms(self.publish_p99)} "
            f"e2e {_ms(self.end_to_end_p99)}",
            f"pub {_count(self.publish_rate)}/s cons {_count(self.consume_rate)}/s "
            f"backlog {_count(self.backlog)} hit {hits} {p99}",
            f"hit {hits} backlog {_count(self.backlog)} {p99}",
            f"hit {hits} {p99}",
            f"hit {hits}",
            "",
        ]


@dataclass(frozen=True, slots=True)
class Layout:
    """One progress line's parts, laid out for a width."""

    name: str
    bar_width: int
    times: str
    stats: str

    @property
    def width(self) -> int:
        """Columns taken: rich puts one space between columns."""
        parts = [len(self.name), self.bar_width, len(self.times)]
        if self.stats:
            parts.append(len(self.stats))
        return sum(parts) + len(parts) - 1


def _cut(name: str, width: int) -> str:
    """``name`` in at most ``width`` columns (never under MIN_NAME_WIDTH), cut with "…"."""
    width = max(MIN_NAME_WIDTH, width)
    return name if len(name) <= width else name[: width - 1] + "…"


def fit(width: int, name: str, duration_s: float, elapsed_s: float, variants: list[str]) -> Layout:
    """The line for a terminal ``width`` columns wide: elapsed and time left always;
    the first of the statistics' ``variants`` (fullest first) that leaves the bar at
    least MIN_BAR_WIDTH, with the whole name while the statistics keep the hit ratio and
    the p99s (KEEP_NAME_VARIANTS), else with the name cut; past them all, a shorter bar.
    O(variants)."""
    elapsed = min(max(elapsed_s, 0.0), duration_s)
    times = f"{_clock(elapsed)} left {_clock(duration_s - elapsed)}"
    candidates = [(name, text) for text in variants[:KEEP_NAME_VARIANTS]]
    for text in variants:
        # the name cut to what the line leaves it
        rest = Layout("", MIN_BAR_WIDTH, times, text).width
        candidates.append((_cut(name, width - rest - 1), text))
    for label, text in candidates:
        room = width - Layout(label, MIN_BAR_WIDTH, times, text).width
        if room >= 0:
            bar = MIN_BAR_WIDTH + min(room, BAR_WIDTH - MIN_BAR_WIDTH)
            return Layout(label, bar, times, text)
    # not even the times and a short bar fit: shorten the bar, keep the times
    label = _cut(name, MIN_NAME_WIDTH)
    over = Layout(label, MIN_BAR_WIDTH, times, "").width - width
    return Layout(label, max(1, MIN_BAR_WIDTH - over), times, "")


class ProgressDisplay:
    """One progress bar for the measured run, updated by the sampler every interval."""

    def __init__(self, name: str, duration_s: float, console: Console | None = None) -> None:
        self._duration = duration_s
        self._bar = BarColumn(bar_width=BAR_WIDTH)
        self._console = console or Console(stderr=True)
        self._progress = Progress(
            TextColumn("[bold]{task.description}"),
            self._bar,
            TextColumn("{task.fields[times]}"),
            TextColumn("{task.fields[stats]}"),
            console=self._console,
            transient=False,
        )
        self._task: TaskID | None = None
        self._name = name
        #: None until the first update
        self._stats: Stats | None = None
        self._elapsed = 0.0

    def start(self) -> None:
        self._progress.start()
        self._task = self._progress.add_task(
            self._name, total=self._duration, times="", stats="starting"
        )
        self._layout()

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
        self._elapsed = min(elapsed_s, self._duration)
        self._stats = Stats(
            publish_rate, consume_rate, backlog, hit_ratio, publish_p99, end_to_end_p99
        )
        self._layout()

    def _layout(self) -> None:
        """Lay the line out for the terminal's width now (it may have been resized)."""
        if self._task is None:
            return
        variants = ["starting"] if self._stats is None else self._stats.variants()
        layout = fit(self._console.width, self._name, self._duration, self._elapsed, variants)
        self._bar.bar_width = layout.bar_width
        self._progress.update(
            self._task,
            description=layout.name,
            completed=self._elapsed,
            times=layout.times,
            stats=layout.stats,
        )

    def stop(self) -> None:
        if self._task is not None:
            self._progress.stop()
            self._task = None
