"""The progress line fits the terminal: down to 60 columns it keeps its bar, the elapsed
time and the time left, shortening the statistics instead (rich alone squeezed every
column, and below 120 columns the bar and both times were the first to go)."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from loadgen.progress import MIN_NAME_WIDTH, ProgressDisplay, Stats, fit

STATS = {
    "publish_rate": 12345.6,
    "consume_rate": 11000.0,
    "backlog": 1234567,
    "hit_ratio": 0.873,
    "publish_p99": 12.34,
    "end_to_end_p99": 34567.8,
}


def rendered(width: int, name: str = "catchup") -> str:
    """The progress line as a terminal ``width`` columns wide last shows it."""
    out = io.StringIO()
    console = Console(file=out, width=width, force_terminal=True, color_system=None)
    display = ProgressDisplay(name, 60.0, console)
    display.start()
    display.update(elapsed_s=20.0, **STATS)
    display.stop()
    frames = out.getvalue().replace("\x1b[2K", "").replace("\r", "\n").splitlines()
    lines = [line for line in frames if "left" in line]
    assert lines, out.getvalue()
    return lines[-1].rstrip()


@pytest.mark.parametrize("width", [60, 70, 80, 100, 119, 120, 160])
@pytest.mark.parametrize("name", ["catchup", "pr24623-rolling-restart"])
def test_bar_elapsed_and_time_left_stay_at_every_width(width: int, name: str) -> None:
    line = rendered(width, name)
    assert len(line) <= width, line
    assert "━" in line, line  # the bar
    assert "0:20 left 0:40" in line, line
    shown, rest = line.split(" ", 1)
    assert "…" not in rest, f"something was cut: {line}"
    # a long name is what gives way, cut but recognisable
    assert shown == name or (shown.endswith("…") and name.startswith(shown[:-1])), line
    assert len(shown) >= min(len(name), MIN_NAME_WIDTH)
    assert ("hit 87.3%" in line and "p99 12.3ms/34.6s" in line) or "p99 pub 12.3 ms" in line


def test_a_wide_terminal_shows_the_full_figures() -> None:
    line = rendered(160)
    assert "pub 12,346/s  cons 11,000/s  backlog 1,234,567" in line
    assert "p99 pub 12.3 ms e2e 34,567.8 ms" in line


def test_a_narrow_terminal_keeps_the_hit_ratio_and_the_p99s_in_short() -> None:
    assert rendered(80).endswith("hit 87.3% backlog 1.23M p99 12.3ms/34.6s")
    assert rendered(60).endswith("hit 87.3% p99 12.3ms/34.6s")


def test_below_any_statistics_the_times_still_stay_and_a_long_name_is_cut() -> None:
    layout = fit(40, "pr24623-rolling-restart", 3600.0, 65.0, Stats(**STATS).variants())
    assert layout.times == "1:05 left 58:55"
    assert layout.stats == ""
    assert layout.width <= 40
    assert layout.name.endswith("…") and layout.bar_width >= 1
