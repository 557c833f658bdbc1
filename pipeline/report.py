"""``report.html``: one self-contained page (charts as inline SVG, no network) with the
miss-ratio curves of every design next to the bound and libcachesim's references, the
ranking, storage reads saved, and the trace statistics. It is written next to the
tables, on whatever file system they are (``pipeline.trace_io``).

The curves are drawn as libCacheSim's ``plot_mrc_size.py`` and the caching literature
draw them: miss ratio (0 to 1) against cache size on a log axis, one line per policy,
colours from a qualitative palette and line styles that differ too. Each chart's data
is embedded beside its SVG (``<script type="application/json" class="chart-data">``):
titles, axis labels, and every series' name and values."""

from __future__ import annotations

import dataclasses
import html
import io
import json
import pathlib
import re
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter

from broker.cache import DESIGNS


def _mib(value: float) -> str:
    return f"{value / 1048576:,.2f} MiB"


#: a qualitative palette (matplotlib's tab10, colour-blind friendlier than a ramp): the
#: designs take the first colours in order, the libcachesim references the next ones;
#: red is kept for the broker's own point and black for the bound
_DESIGN_COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#17becf", "#bcbd22")
_REFERENCE_COLOURS = ("#9467bd", "#8c564b", "#e377c2", "#7f7f7f")
_REFERENCE_STYLES = ("--", "-.", ":", (0, (5, 1, 1, 1, 1, 1)))
_DESIGN_MARKERS = ("o", "s", "^", "D", "v")
_LIVE_COLOUR = "#d62728"


@dataclasses.dataclass
class Series:
    """One line (or point, or set of bars) of a chart, with the values it plots."""

    name: str
    x: list[float]
    y: list[float]
    colour: str
    linestyle: str | tuple[int, tuple[int, ...]] = "-"
    marker: str | None = None
    kind: str = "line"  # line, point, bar (one per category) or steps (x: window starts)
    width: float = 1.0  # steps: the windows' width


@dataclasses.dataclass
class Chart:
    """What a chart shows, kept apart from drawing it: the page embeds both the SVG and
    this data (JSON), so a reader can plot it again and a test can check it."""

    name: str
    title: str
    xlabel: str
    ylabel: str
    series: list[Series]
    xlog: bool = False
    ylim: tuple[float, float] | None = None
    xticks: list[tuple[float, str]] | None = None
    size: tuple[float, float] = (10.0, 5.0)

    def as_json(self) -> dict[str, Any]:
        return {
            "title": self.title,
            "xlabel": self.xlabel,
            "ylabel": self.ylabel,
            "series": [
                {
                    "name": s.name,
                    "kind": s.kind,
                    "x": s.x,
                    "y": s.y,
                    "colour": s.colour,
                    "linestyle": str(s.linestyle),
                    "marker": s.marker,
                }
                for s in self.series
            ],
        }


def _miss(row: dict[str, Any], field: str) -> float:
    """The miss ratio (``field`` ``miss_ratio``) or byte miss ratio of a result row: one
    minus its hit ratio."""
    return 1.0 - float(row["hit_ratio" if field == "miss_ratio" else "byte_hit_ratio"])


def miss_ratio_chart(summary: dict[str, Any], field: str) -> Chart:
    """``field`` (``miss_ratio`` or ``byte_miss_ratio``) against cache size, as
    libCacheSim's ``plot_mrc_size.py`` and the literature draw it: one line per design,
    per libcachesim reference and for the bound; the broker's own point on top."""
    label = "miss ratio" if field == "miss_ratio" else "byte miss ratio"
    series = []
    sweep = [row for row in summary["sweep"] if not row["live"]]
    designs = sorted({row["design"] for row in sweep})
    # a design keeps its colour and marker from report to report: by registry order
    order = [*DESIGNS, *(design for design in designs if design not in DESIGNS)]
    for design in designs:
        number = order.index(design)
        points = sorted((row["size_bytes"], _miss(row, field)) for row in sweep
                        if row["design"] == design)  # fmt: skip
        series.append(
            Series(
                design,
                [size / 1048576 for size, _ in points],
                [value for _, value in points],
                _DESIGN_COLOURS[number % len(_DESIGN_COLOURS)],
                marker=_DESIGN_MARKERS[number % len(_DESIGN_MARKERS)],
            )
        )
    references = summary.get("references", [])
    for number, policy in enumerate(sorted({row["design"] for row in references})):
        points = sorted((row["size_bytes"], _miss(row, field)) for row in references
                        if row["design"] == policy)  # fmt: skip
        series.append(
            Series(
                f"{policy} (libcachesim)",
                [size / 1048576 for size, _ in points],
                [value for _, value in points],
                _REFERENCE_COLOURS[number % len(_REFERENCE_COLOURS)],
                linestyle=_REFERENCE_STYLES[number % len(_REFERENCE_STYLES)],
            )
        )
    bound = sorted((row["size_bytes"], _miss(row, field)) for row in summary["bound"])
    if bound:
        series.append(
            Series(
                "bound (Belady, size aware)",
                [size / 1048576 for size, _ in bound],
                [value for _, value in bound],
                "#000000",
                linestyle=(0, (8, 3)),
            )
        )
    for row in summary["sweep"]:
        if row["live"]:
            series.append(
                Series(
                    f"broker: {row['design']} at {_mib(row['size_bytes'])}",
                    [row["size_bytes"] / 1048576],
                    [_miss(row, field)],
                    _LIVE_COLOUR,
                    marker="*",
                    kind="point",
                )
            )
    return Chart(
        field.replace("_", "-"),
        f"{label} against cache size",
        "cache size (MiB, log scale)",
        f"{label} (0 to 1, lower is better)",
        series,
        xlog=True,
        ylim=(0.0, 1.0),
    )


def reuse_chart(summary: dict[str, Any]) -> Chart | None:
    """Reads by reuse distance (events since the entry's previous read, log2 buckets)."""
    rows = sorted(summary["statistics"].get("reuse", []), key=lambda row: row["events_bucket"])
    if not rows:
        return None
    buckets = [row["events_bucket"] for row in rows]
    return Chart(
        "reuse-distance",
        "reuse distance: reads by events since the entry's previous read",
        "events since the entry's previous read (bucket b: b to 2b - 1)",
        "reads",
        [
            Series(
                "reads",
                [float(b) for b in buckets],
                [float(row["reads"]) for row in rows],
                _DESIGN_COLOURS[0],
                kind="bar",
            )
        ],
        xticks=[(float(b), f"{b:,}") for b in buckets],
        size=(10.0, 3.5),
    )


def working_set_chart(summary: dict[str, Any]) -> Chart | None:
    """The working set over time: distinct bytes read per window."""
    points = summary["statistics"].get("working_set", [])
    if not points:
        return None
    window = summary.get("workingSetWindowSeconds", 1)
    return Chart(
        "working-set",
        "working set over time (distinct entries read per window)",
        "seconds since the recorder started",
        f"MiB read per {window} s",
        [
            Series(
                "working set",
                [float(row["second"]) for row in points],
                [row["bytes"] / 1048576 for row in points],
                _DESIGN_COLOURS[0],
                kind="steps",
                width=float(window),
            )
        ],
        size=(10.0, 3.5),
    )


def figure(chart: Chart) -> Any:
    """The chart drawn (a matplotlib Figure; the caller closes it). The legend is the
    figure's, outside the plot area on the right, so it never covers a point; the layout
    is constrained, so no axis label is cut off."""
    drawn = plt.figure(figsize=chart.size, dpi=100, layout="constrained")
    axes = drawn.add_subplot()
    for series in chart.series:
        if series.kind == "bar":  # categories: one bar each, evenly spaced
            axes.bar(range(len(series.x)), series.y, color=series.colour, label=series.name)
        elif series.kind == "steps":  # one filled outline, not a patch per window
            first = series.x[0]
            heights = [0.0] * (round((series.x[-1] - first) / series.width) + 1)
            for start, value in zip(series.x, series.y, strict=True):
                heights[round((start - first) / series.width)] = value
            edges = [first + series.width * i for i in range(len(heights) + 1)]
            axes.stairs(heights, edges, fill=True, color=series.colour, label=series.name)
        elif series.kind == "point":
            axes.scatter(series.x, series.y, marker=series.marker or "o", s=260,
                         color=series.colour, edgecolors="black", linewidths=0.8,
                         zorder=5, label=series.name, clip_on=False)  # fmt: skip
        else:
            axes.plot(series.x, series.y, linestyle=series.linestyle, marker=series.marker,
                      color=series.colour, linewidth=1.6, label=series.name)  # fmt: skip
    if chart.xticks is not None:
        axes.set_xticks(range(len(chart.xticks)), [label for _, label in chart.xticks],
                        rotation=45, ha="right")  # fmt: skip
    if chart.xlog:
        axes.set_xscale("log")
        # a tick at each size swept, as a plain number (0.25, 1, 64): not only at the
        # powers of ten, set as math text
        swept = sorted({x for series in chart.series for x in series.x})
        axes.xaxis.set_major_locator(FixedLocator(swept))
        axes.xaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:.3g}"))
        axes.xaxis.set_minor_formatter(NullFormatter())
    if chart.ylim is not None:
        axes.set_ylim(*chart.ylim)
    axes.set_xlabel(chart.xlabel)
    axes.set_ylabel(chart.ylabel)
    axes.set_title(chart.title)
    axes.grid(True, alpha=0.3, linestyle="--")
    if len(chart.series) > 1:
        drawn.legend(loc="outside right upper", fontsize="small")
    return drawn


def render_chart(chart: Chart) -> str:
    """The chart as inline SVG (its text kept as text) and its data as JSON."""
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": chart.name}):
        drawn = figure(chart)
        try:
            buffer = io.StringIO()
            drawn.savefig(buffer, format="svg")
        finally:
            plt.close(drawn)
    svg = buffer.getvalue()
    svg = svg[svg.index("<svg") :]  # inline: no XML declaration or doctype
    # one page holds several SVGs: each one's ids (and what refers to them) get its name
    prefix = f"{chart.name}-"
    svg = re.sub(r'\bid="([^"]+)"', lambda m: f'id="{prefix}{m[1]}"', svg)
    svg = re.sub(r"url\(#([^)]+)\)", lambda m: f"url(#{prefix}{m[1]})", svg)
    svg = re.sub(r'href="#([^"]+)"', lambda m: f'href="#{prefix}{m[1]}"', svg)
    data = json.dumps(chart.as_json()).replace("</", "<\\/")
    return (
        f'<figure class="chart" id="{chart.name}">{svg}'
        f'<script type="application/json" class="chart-data">{data}</script></figure>'
    )


def _table(rows: list[dict[str, Any]], columns: list[tuple[str, str]]) -> str:
    head = "".join(f"<th>{html.escape(title)}</th>" for _, title in columns)
    body = []
    for row in rows:
        cells = []
        for key, _ in columns:
            value = row.get(key)
            if isinstance(value, float):
                text = f"{value:.4f}"
            elif isinstance(value, int) and not isinstance(value, bool):
                text = f"{value:,}"
            else:
                text = "" if value is None else str(value)
            cells.append(f"<td>{html.escape(text)}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><tr>{head}</tr>{''.join(body)}</table>"


def _references(summary: dict[str, Any]) -> str:
    rows = summary.get("references", [])
    if not rows:
        return "<p>Not run: install the <code>reference</code> extra (libcachesim).</p>"
    shown = [{**row, "size": _mib(row["size_bytes"])} for row in rows]
    columns = [
        ("design", "policy"),
        ("size", "size"),
        ("hits", "hits"),
        ("misses", "misses"),
        ("hit_ratio", "hit ratio"),
        ("byte_hit_ratio", "byte hit ratio"),
    ]
    return _table(shown, columns)


def _working_set(summary: dict[str, Any]) -> str:
    chart = working_set_chart(summary)
    if chart is None:
        return "<p>No reads.</p>"
    window = summary.get("workingSetWindowSeconds", 1)
    return (
        f"<p>Windows of {window} s ({len(chart.series[0].x):,} with reads; one second wide, "
        "widened so a long trace has at most 1,000).</p>" + render_chart(chart)
    )


def _reuse(summary: dict[str, Any]) -> str:
    chart = reuse_chart(summary)
    table = _table(
        summary["statistics"].get("reuse", []),
        [("events_bucket", "events (bucket)"), ("reads", "reads"),
         ("mean_seconds", "mean seconds")],
    )  # fmt: skip
    return (render_chart(chart) if chart is not None else "<p>No entry was read twice.</p>") + table


def _patterns(summary: dict[str, Any]) -> str:
    stats = summary["statistics"]
    shown = stats.get("patterns", [])
    total = summary.get("patternRows", len(shown))
    note = ""
    if total > len(shown):
        note = (
            f"<p>The {len(shown):,} rows with the most reads of {total:,}; every row is in "
            "<code>patterns/</code>. All subscriptions by pattern:</p>"
        )
        note += _table(
            stats.get("patterns_by_kind", []),
            [("pattern", "pattern"), ("rows", "subscriptions"), ("reads", "reads"),
             ("hits", "live hits")],
        )  # fmt: skip
    return note + _table(
        shown,
        [
            ("topic", "topic"),
            ("subscription", "subscription"),
            ("pattern", "pattern"),
            ("reads", "reads"),
            ("hits", "live hits"),
            ("bytes", "bytes"),
        ],
    )


def write_report(summary: dict[str, Any], target: str | pathlib.Path) -> str:
    """Write the page at ``target`` (a URI, or a local path); returns its URI."""
    from pipeline.trace_io import resolve_uri, write_text

    return write_text(resolve_uri(target), render_report(summary))


def render_report(summary: dict[str, Any]) -> str:
    """The page."""
    reads = 0
    if summary["sweep"]:
        first = summary["sweep"][0]
        reads = first["hits"] + first["misses"]
    sweep_rows = [
        {**row, "storage_reads_saved": row["hits"], "size": _mib(row["size_bytes"])}
        for row in summary["sweep"]
    ]
    bound_rows = [{**row, "size": _mib(row["size_bytes"])} for row in summary["bound"]]
    ranking = "".join(
        f"<li><b>{html.escape(item['design'])}</b>: mean hit ratio "
        f"{item['meanHitRatio']:.1%} over the sizes</li>"
        for item in summary["ranking"]
    )
    brokers = summary.get("brokers", 1)
    cluster = (
        f" {brokers} brokers, each with a cache of its own of every size (the counts are"
        " their sums; the working set is the largest broker's)."
        if brokers > 1
        else ""
    )
    rate = summary.get("sampleRate", 1.0)
    sampled = ""
    if rate < 1:
        sampled = (
            f" The replays are miniature simulations: {rate:.2%} of the entries (spatially"
            " hashed) through caches scaled by the same rate, so their counts are estimates."
        )
    asked = summary.get("sampleRateAsked", rate)
    if asked < rate:
        sampled += (
            f" {asked:.2%} was asked: that would have sampled too few entries (too few"
            f" in the smallest scaled cache, or in the sample), so the replays ran at"
            f" {rate:.2%}."
        )
    page = f"""<!doctype html>
<html><head><meta charset="utf-8"><title>brokerlab analyze</title>
<style>
body {{ font-family: sans-serif; margin: 2em; max-width: 70em; }}
table {{ border-collapse: collapse; margin: 1em 0; }}
td, th {{ border: 1px solid #ccc; padding: 0.2em 0.6em; text-align: right; }}
th {{ background: #f4f4f4; }}
figure.chart {{ margin: 1em 0; }}
figure.chart svg {{ max-width: 100%; height: auto; }}
</style></head><body>
<h1>Cache designs on one trace</h1>
<p>Trace <code>{html.escape(str(summary["trace"]))}</code>: {summary["events"]:,} events,
{reads:,} reads, working set {_mib(summary["workingSetBytes"])}.{cluster} The broker ran
<b>{html.escape(str(summary["live"]["design"]))}</b> at
{_mib(summary["live"]["sizeBytes"] or 0)} (the red star). Every design was replayed at
every size through the broker's own cache classes (solid lines); the black dashed line
is the optimal bound (Belady, size aware), the other dashed and dotted lines are
general-purpose references from libcachesim (fed the adds as uncounted requests). Each
hit is a storage read saved.{sampled}</p>
<h2>Ranking</h2><ol>{ranking}</ol>
<h2>Miss-ratio curves</h2>
<p>Miss ratio: the share of reads that went to storage; byte miss ratio: the share of
the bytes read that came from storage. Lower is better.</p>
{render_chart(miss_ratio_chart(summary, "miss_ratio"))}
{render_chart(miss_ratio_chart(summary, "byte_miss_ratio"))}
<h2>Replays</h2>
{
        _table(
            sweep_rows,
            [
                ("design", "design"),
                ("size", "size"),
                ("live", "live"),
                ("hits", "hits"),
                ("misses", "misses"),
                ("hit_ratio", "hit ratio"),
                ("byte_hit_ratio", "byte hit ratio"),
                ("storage_reads_saved", "storage reads saved"),
                ("evicted_ttl", "evicted by TTL"),
                ("evicted_size", "evicted by size"),
                ("evicted_invalidated", "invalidated"),
                *([("sample_rate", "sample rate")] if rate < 1 else []),
            ],
        )
    }
<h2>Bound</h2>
{
        _table(
            bound_rows,
            [
                ("size", "size"),
                ("hits", "hits"),
                ("misses", "misses"),
                ("hit_ratio", "hit ratio"),
                ("byte_hit_ratio", "byte hit ratio"),
            ],
        )
    }
<h2>References (libcachesim)</h2>
{_references(summary)}
<p>Any other libCacheSim policy runs on the same reads after <code>brokerlab trace export
TRACE_DIR --out reads.oracleGeneral.bin</code> (docs/pipeline.md).</p>
<h2>Read patterns by subscription</h2>
{_patterns(summary)}
<h2>Reuse distance (events between reads of an entry, log2 buckets)</h2>
{_reuse(summary)}
<h2>Working set</h2>
{_working_set(summary)}
<p>Sweep: {summary["sweepSeconds"]} s; whole analysis: {summary.get("seconds", "?")} s.</p>
</body></html>
"""
    return page
