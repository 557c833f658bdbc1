"""``report.html`` from a summary: what it says about statistics it does not list whole."""

from __future__ import annotations

import json
import re
from typing import Any

import matplotlib.pyplot as plt
import pytest

from pipeline.report import (
    figure,
    miss_ratio_chart,
    render_report,
    reuse_chart,
    working_set_chart,
)


def _summary(patterns: int, shown: int) -> dict[str, Any]:
    row = {"design": "pip430", "size_bytes": 1 << 20, "live": False, "hits": 1, "misses": 1,
           "hit_ratio": 0.5, "byte_hit_ratio": 0.5}  # fmt: skip
    return {
        "trace": "file:///t", "events": 10, "workingSetBytes": 1 << 20, "brokers": 1,
        "live": {"design": "pip430", "sizeBytes": 1 << 20}, "sweep": [row],
        "bound": [{**row, "design": "belady"}], "references": [],
        "ranking": [{"design": "pip430", "meanHitRatio": 0.5}], "sweepSeconds": 1.0,
        "workingSetWindowSeconds": 11, "patternRows": patterns,
        "statistics": {
            "patterns": [{"topic": f"t{i}", "subscription": "s", "pattern": "tailing",
                          "reads": 1, "hits": 1, "bytes": 1} for i in range(shown)],
            "patterns_by_kind": [{"pattern": "tailing", "rows": patterns, "reads": patterns,
                                  "hits": patterns}],
            "reuse": [],
            "working_set": [{"second": 11 * i, "entries": 1, "bytes": 1 << 20,
                             "window_seconds": 11} for i in range(982)],
        },
    }  # fmt: skip


SIZES = (1 << 18, 1 << 20, 1 << 22)


def _result(design: str, size: int, hit_ratio: float, byte_hit_ratio: float) -> dict[str, Any]:
    return {"design": design, "size_bytes": size, "live": False, "hits": round(hit_ratio * 100),
            "misses": round((1 - hit_ratio) * 100), "hit_ratio": hit_ratio,
            "byte_hit_ratio": byte_hit_ratio}  # fmt: skip


def _analysis() -> dict[str, Any]:
    """Three designs, four libcachesim references and the bound at three sizes; the
    broker ran pip430 at 1 MiB; reuse distances in four buckets."""
    summary = _summary(patterns=3, shown=3)
    designs = {"pip430": 0.5, "legacy": 0.4, "segmented": 0.45}
    summary["sweep"] = [
        _result(design, size, base + 0.1 * step, base + 0.05 * step)
        for design, base in designs.items()
        for step, size in enumerate(SIZES)
    ] + [{**_result("pip430", 1 << 20, 0.6, 0.55), "live": True}]
    summary["references"] = [
        _result(policy, size, 0.3 + 0.02 * number + 0.1 * step, 0.3 + 0.1 * step)
        for number, policy in enumerate(("ARC", "LRU", "S3FIFO", "WTinyLFU"))
        for step, size in enumerate(SIZES)
    ]
    summary["bound"] = [_result("belady", size, 0.8 + 0.05 * step, 0.7 + 0.1 * step)
                        for step, size in enumerate(SIZES)]  # fmt: skip
    summary["statistics"]["reuse"] = [
        {"events_bucket": 1 << i, "reads": 100 * (4 - i), "mean_seconds": 0.5 * i} for i in range(4)
    ]
    return summary


#: the module's tests on one xdist worker, which makes its rendered page (a module fixture)
#: once: each worker running some of them made its own
pytestmark = pytest.mark.xdist_group("test_report")


@pytest.fixture(scope="module")
def page() -> str:
    """The page of :func:`_analysis`, rendered once for the module's tests."""
    return render_report(_analysis())


def test_the_report_says_how_many_pattern_rows_it_leaves_out(page: str) -> None:
    cut = render_report(_summary(patterns=5_000, shown=200))
    assert "The 200 rows with the most reads of 5,000" in cut
    assert len(re.findall(r"<td>t\d+</td>", cut)) == 200
    assert "Windows of 11 s (982 with reads" in cut
    # the module's page lists its 3 pattern rows whole (a render costs seconds)
    assert "most reads of" not in page and len(re.findall(r"<td>t\d+</td>", page)) == 3


def _charts(page: str) -> dict[str, dict[str, Any]]:
    """The data of each chart of the page, by the figure's id."""
    found = re.findall(
        r'<figure class="chart" id="([^"]+)">.*?<script type="application/json" '
        r'class="chart-data">(.*?)</script></figure>',
        page,
        flags=re.S,
    )
    return {name: json.loads(data) for name, data in found}


def test_the_curves_are_miss_ratio_against_cache_size_with_every_policy(page: str) -> None:
    charts = _charts(page)
    assert set(charts) == {"miss-ratio", "byte-miss-ratio", "reuse-distance", "working-set"}
    misses = charts["miss-ratio"]
    assert misses["title"] == "miss ratio against cache size"
    assert misses["xlabel"] == "cache size (MiB, log scale)"
    assert misses["ylabel"].startswith("miss ratio (0 to 1")
    series = {item["name"]: item for item in misses["series"]}
    assert list(series) == [
        "legacy", "pip430", "segmented",
        "ARC (libcachesim)", "LRU (libcachesim)", "S3FIFO (libcachesim)",
        "WTinyLFU (libcachesim)", "bound (Belady, size aware)", "broker: pip430 at 1.00 MiB",
    ]  # fmt: skip
    assert series["legacy"]["x"] == [0.25, 1.0, 4.0]
    assert series["legacy"]["y"] == pytest.approx([0.6, 0.5, 0.4])  # 1 - hit ratio
    assert series["LRU (libcachesim)"]["y"] == pytest.approx([0.68, 0.58, 0.48])
    assert series["bound (Belady, size aware)"]["y"] == pytest.approx([0.2, 0.15, 0.1])
    live = series["broker: pip430 at 1.00 MiB"]
    assert (live["kind"], live["x"], live["y"]) == ("point", [1.0], [pytest.approx(0.4)])
    byte_series = {item["name"]: item for item in charts["byte-miss-ratio"]["series"]}
    assert charts["byte-miss-ratio"]["ylabel"].startswith("byte miss ratio")
    assert byte_series["legacy"]["y"] == pytest.approx([0.6, 0.55, 0.5])
    assert byte_series["broker: pip430 at 1.00 MiB"]["y"] == [pytest.approx(0.45)]
    # the SVG keeps its text: the title, axis labels and legend are in the page
    curves = page[page.index("<h2>Miss-ratio curves</h2>") : page.index("<h2>Replays</h2>")]
    for text in ("miss ratio against cache size", "cache size (MiB, log scale)",
                 "WTinyLFU (libcachesim)", "broker: pip430 at 1.00 MiB"):  # fmt: skip
        assert f">{text}</text>" in curves, text
    # hit ratio is said only where the page means it (the ranking, the tables)
    assert "hit ratio" not in curves and "mean hit ratio" in page


def test_the_page_s_svg_ids_are_unique_and_every_reference_resolves(page: str) -> None:
    ids = re.findall(r'\bid="([^"]+)"', page)
    assert len(ids) == len(set(ids)) > 100
    references = re.findall(r"url\(#([^)]+)\)", page) + re.findall(r'href="#([^"]+)"', page)
    assert references and set(references) <= set(ids)


def test_every_line_has_a_colour_and_a_style_of_its_own(page: str) -> None:
    for name in ("miss-ratio", "byte-miss-ratio"):
        lines = _charts(page)[name]["series"]
        colours = [item["colour"] for item in lines]
        assert len(set(colours)) == len(colours) == 9, name
        references = [item for item in lines if item["name"].endswith("(libcachesim)")]
        assert len({item["linestyle"] for item in references}) == 4
        assert len({item["marker"] for item in lines[:3]}) == 3  # the designs


def _extent(artist: Any, renderer: Any) -> Any:
    return artist.get_window_extent(renderer)


def test_the_broker_s_point_is_not_under_the_legend() -> None:
    """The legend sits outside the plot area, so no point of the chart is under it."""
    chart = miss_ratio_chart(_analysis(), "miss_ratio")
    drawn = figure(chart)
    try:
        drawn.canvas.draw()
        renderer = drawn.canvas.get_renderer()
        axes = drawn.axes[0]
        legend = _extent(drawn.legends[0], renderer)
        plot = _extent(axes, renderer)
        assert not legend.overlaps(plot)
        assert drawn.bbox.x0 <= legend.x0 and legend.x1 <= drawn.bbox.x1  # on the page
        live = chart.series[-1]
        x, y = axes.transData.transform((live.x[0], live.y[0]))
        assert plot.contains(x, y) and not legend.contains(x, y)
    finally:
        plt.close(drawn)


@pytest.mark.parametrize("name", ["working_set_chart", "reuse_chart", "miss_ratio_chart"])
def test_no_axis_label_is_cut_off(name: str) -> None:
    summary = _analysis()
    chart = (
        miss_ratio_chart(summary, "miss_ratio")
        if name == "miss_ratio_chart"
        else {"working_set_chart": working_set_chart, "reuse_chart": reuse_chart}[name](summary)
    )
    assert chart is not None
    drawn = figure(chart)
    try:
        drawn.canvas.draw()
        renderer = drawn.canvas.get_renderer()
        axes = drawn.axes[0]
        page = drawn.bbox
        for label in (axes.xaxis.label, axes.yaxis.label, axes.title):
            box = _extent(label, renderer)
            assert label.get_text()
            inside = page.x0 <= box.x0 and box.x1 <= page.x1
            assert inside and page.y0 <= box.y0 and box.y1 <= page.y1, label.get_text()
    finally:
        plt.close(drawn)


def test_reuse_distance_is_a_chart_and_stays_a_table(page: str) -> None:
    reuse = _charts(page)["reuse-distance"]
    assert reuse["ylabel"] == "reads"
    assert "previous read" in reuse["xlabel"]
    (bars,) = reuse["series"]
    assert (bars["x"], bars["y"]) == ([1, 2, 4, 8], [400, 300, 200, 100])
    section = page[page.index("<h2>Reuse distance") : page.index("<h2>Working set</h2>")]
    assert 'id="reuse-distance"' in section and "<th>events (bucket)</th>" in section
    assert "<td>8</td><td>100</td>" in section
    empty = _analysis()
    empty["statistics"]["reuse"] = []
    assert reuse_chart(empty) is None
