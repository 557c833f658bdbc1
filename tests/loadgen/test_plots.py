"""Charts and the comparison table drawn from synthetic results documents."""

from __future__ import annotations

import math
import pathlib
import struct
from typing import Any

import matplotlib.pyplot as plt
import pytest
from matplotlib.figure import Figure

from loadgen.plots import comparison_table, human_bytes, plot_comparison, plot_run

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
SUFFIXES = ("Avg", "50pct", "75pct", "95pct", "99pct", "999pct", "Max")
RUN_PIXELS = {"rates.png": (1000, 500), "latency.png": (1000, 800), "hit-ratio.png": (1000, 400)}


def make_results(
    samples: int,
    *,
    implementation: str = "lru",
    hit_ratio: float | None = 0.9843,
    all_none: bool = False,
) -> dict[str, Any]:
    """A results document with ``samples`` one-second intervals, a gap (None) in the
    third interval, and one event half way through."""

    def value(i: int, base: float) -> float | None:
        if all_none or i == 2:
            return None
        return base * (1 + 0.5 * math.sin(i / 3))

    results: dict[str, Any] = {
        "scenario": {"name": "tailing-fanout"},
        "broker": {"implementation": implementation},
        "time": [float(i + 1) for i in range(samples)],
        "publishRate": [0.0 if all_none else 1000.0 + 10 * i for i in range(samples)],
        "consumeRate": [0.0 if all_none else 990.0 + 10 * i for i in range(samples)],
        "backlog": [0 if all_none else 5 * i for i in range(samples)],
        "hitRatio": [value(i, 0.6) for i in range(samples)],
        "cache": {
            "hitRatio": hit_ratio,
            "byteHitRatio": None if hit_ratio is None else hit_ratio - 0.01,
            "hits": 9843,
            "misses": 157,
            "evictionCpuSeconds": 0.01234,
            "shadows": {"lfu": {"hitRatio": 0.5}},
        },
        "storage": {
            "bookie": {"readRequests": 12, "entriesRead": 340, "bytesRead": 1536},
            "tiered": {"objectGets": 7, "bytesRead": 3 * 2**30},
        },
        "aggregatedPublishLatency99pct": 4.5,
        "aggregatedEndToEndLatency99pct": None if all_none else 12.25,
        "events": [{"at": samples / 2, "type": "restart-broker", "ok": True}],
    }
    for prefix, base in (("publishLatency", 2.0), ("endToEndLatency", 8.0)):
        for rank, suffix in enumerate(SUFFIXES):
            results[prefix + suffix] = [value(i, base * (rank + 1)) for i in range(samples)]
    return results


def png_size(path: pathlib.Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE
    assert data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def assert_run_charts(paths: list[pathlib.Path], out_dir: pathlib.Path) -> None:
    assert [path.name for path in paths] == list(RUN_PIXELS)
    for path in paths:
        assert path.parent == out_dir and path.is_file()
        assert path.stat().st_size > 5_000
        assert png_size(path) == RUN_PIXELS[path.name]


def test_plot_run_writes_three_charts_of_the_chosen_size(tmp_path: pathlib.Path) -> None:
    figures_before = plt.get_fignums()
    paths = plot_run(make_results(60), tmp_path)
    assert_run_charts(paths, tmp_path)
    assert plt.get_fignums() == figures_before


@pytest.mark.parametrize(
    "results",
    [
        make_results(30, all_none=True),
        make_results(0),
        make_results(1),
        {"scenario": {}, "broker": {}, "time": [1.0, 2.0], "events": [{"type": "no-time"}]},
    ],
    ids=["all-none", "empty", "single-sample", "bare"],
)
def test_plot_run_survives_degenerate_series(
    results: dict[str, Any], tmp_path: pathlib.Path
) -> None:
    out_dir = tmp_path / "charts"
    assert_run_charts(plot_run(results, out_dir), out_dir)


@pytest.fixture
def saved(monkeypatch: pytest.MonkeyPatch) -> dict[str, Figure]:
    """Every figure plot_run saves, by file name, to look at what it drew; not rendered
    (a second or more per chart on a loaded machine): the tests above render charts and
    check the PNGs."""
    figures: dict[str, Figure] = {}

    def record(fig: Figure, path: Any, **kwargs: Any) -> None:
        figures[pathlib.Path(path).name] = fig

    monkeypatch.setattr(Figure, "savefig", record)
    return figures


def test_latency_uses_a_log_scale_only_for_positive_values(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, saved: dict[str, Figure]
) -> None:
    scales: list[str] = []
    original = plt.Axes.set_yscale

    def record(ax: Any, value: str, **kwargs: Any) -> None:
        scales.append(value)
        original(ax, value, **kwargs)

    monkeypatch.setattr(plt.Axes, "set_yscale", record)
    results = make_results(10)
    plot_run(results, tmp_path)
    assert scales == ["log", "log"]
    scales.clear()
    results["endToEndLatency50pct"][0] = 0.0
    plot_run(results, tmp_path)
    assert scales == ["log"]


def test_plot_comparison_writes_compare_png(tmp_path: pathlib.Path) -> None:
    runs = [make_results(20, implementation=name) for name in ("lru", "s3fifo", "tinylfu")]
    runs[1]["cache"].pop("evictionCpuSeconds")
    runs[2]["storage"] = {"bookie": {}}
    figures_before = plt.get_fignums()
    path = plot_comparison(runs, tmp_path)
    assert path == tmp_path / "compare.png"
    assert path.stat().st_size > 5_000
    assert png_size(path) == (1600, 450)
    assert plt.get_fignums() == figures_before


def test_comparison_table_has_one_row_per_run_in_order() -> None:
    runs = [
        make_results(5, implementation="s3fifo", hit_ratio=0.9843),
        make_results(5, implementation="lru", hit_ratio=None),
    ]
    runs[1]["cache"].pop("evictionCpuSeconds")
    runs[1]["storage"] = {"tiered": {"objectGets": 3}}
    # the public comparison's metric and the work done, beside the hit ratio
    runs[0]["cache"]["consumedHitRatio"] = 0.9668
    runs[0]["totals"] = {"publishedMessages": 1200, "consumedMessages": 12000}
    lines = comparison_table(runs).splitlines()
    assert len(lines) == 2 + len(runs)
    cells = [[cell.strip() for cell in line.strip("|").split("|")] for line in lines]
    assert cells[0][:6] == [
        "implementation",
        "hit ratio",
        "consumed hit ratio",
        "published",
        "consumed",
        "byte hit ratio",
    ]
    assert set(cells[1]) == {"---"} and len(cells[1]) == len(cells[0])
    assert all(len(row) == len(cells[0]) for row in cells)
    assert cells[2] == [
        "s3fifo",
        "98.4%",
        "96.7%",
        "1,200",
        "12,000",
        "97.4%",
        "12",
        "340",
        "1.5 KiB",
        "7",
        "3.0 GiB",
        "0.012",
        "4.50",
        "12.25",
    ]
    assert cells[3][:7] == ["lru", "n/a", "n/a", "n/a", "n/a", "n/a", "0"]
    assert cells[3][8:12] == ["0 B", "3", "0 B", "n/a"]


@pytest.mark.parametrize(
    ("count", "text"),
    [
        (0, "0 B"),
        (1023, "1023 B"),
        (1536, "1.5 KiB"),
        (5 * 2**20, "5.0 MiB"),
        (3 * 2**30, "3.0 GiB"),
    ],
)
def test_human_bytes(count: float, text: str) -> None:
    assert human_bytes(count) == text


def lines_by_label(fig: Figure) -> dict[str, list[float]]:
    (ax,) = fig.axes
    return {
        str(line.get_label()): [float(y) for y in line.get_ydata()]
        for line in ax.get_lines()
        if not str(line.get_label()).startswith("_")
    }


def test_hit_ratio_shows_100_percent_and_every_shadow_over_time(
    tmp_path: pathlib.Path, saved: dict[str, Figure]
) -> None:
    results = make_results(6)
    results["hitRatio"] = [1.0] * 6
    results["cache"]["shadows"] = {"legacy": {"hitRatio": 0.5}, "segmented": {"hitRatio": 0.7}}
    results["shadowHitRatio"] = {
        "legacy": [None, 0.25, 0.5, 0.5, 0.75, 1.0],
        "segmented": [0.7] * 6,
    }
    plot_run(results, tmp_path)
    fig = saved["hit-ratio.png"]
    lines = lines_by_label(fig)
    assert lines["lru (live)"] == [100.0] * 6
    assert lines["legacy (shadow)"][1:] == [25.0, 50.0, 50.0, 75.0, 100.0]
    assert math.isnan(lines["legacy (shadow)"][0])
    assert lines["segmented (shadow)"] == [70.0] * 6
    assert set(lines) == {"lru (live)", "legacy (shadow)", "segmented (shadow)"}
    (ax,) = fig.axes
    # a line at 100% is inside the frame, and the ticks still read 0 to 100
    low, high = ax.get_ylim()
    assert high > 100 and low < 0
    assert list(ax.get_yticks()) == [0, 20, 40, 60, 80, 100]
    # two shadows at the same ratio would hide one another in one line style
    shadows = [line for line in ax.get_lines() if "(shadow)" in str(line.get_label())]
    assert len({str(line.get_linestyle()) for line in shadows}) == 2
    legend = ax.get_legend()
    assert legend is not None
    assert [text.get_text() for text in legend.get_texts()] == list(lines)


def test_hit_ratio_draws_a_shadows_whole_run_ratio_from_older_results(
    tmp_path: pathlib.Path, saved: dict[str, Figure]
) -> None:
    """Results written before per-interval shadow ratios were recorded carry only each
    shadow's totals: its ratio over the whole run is drawn across the run."""
    results = make_results(4)
    results.pop("shadowHitRatio", None)
    plot_run(results, tmp_path)
    lines = lines_by_label(saved["hit-ratio.png"])
    assert lines["lfu (shadow, whole run)"] == [50.0, 50.0]
