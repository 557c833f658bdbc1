"""``report.html``: one self-contained page (charts embedded as PNG, no network) with
the miss-ratio curves of every design next to the bound, the ranking, storage reads
saved, and the trace statistics. It is written next to the tables, on whatever file
system they are (``pipeline.trace_io``)."""

from __future__ import annotations

import base64
import html
import io
import pathlib
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt


def _mib(value: float) -> str:
    return f"{value / 1048576:,.2f} MiB"


def _curves(summary: dict[str, Any], field: str, label: str) -> str:
    """A chart of ``field`` against cache size, one line per design plus the bound."""
    figure, axes = plt.subplots(figsize=(8, 4.5), dpi=100)
    try:
        designs = sorted({row["design"] for row in summary["sweep"] if not row["live"]})
        for design in designs:
            points = sorted(
                (row["size_bytes"], row[field])
                for row in summary["sweep"]
                if row["design"] == design and not row["live"]
            )
            axes.plot([p[0] / 1048576 for p in points], [p[1] * 100 for p in points],
                      marker="o", label=design)  # fmt: skip
        for policy in sorted({row["design"] for row in summary.get("references", [])}):
            points = sorted(
                (row["size_bytes"], row[field])
                for row in summary["references"]
                if row["design"] == policy
            )
            axes.plot(
                [p[0] / 1048576 for p in points],
                [p[1] * 100 for p in points],
                linestyle=":",
                linewidth=1,
                label=f"{policy} (libcachesim)",
            )
        bound = sorted((row["size_bytes"], row[field]) for row in summary["bound"])
        if bound:
            axes.plot([p[0] / 1048576 for p in bound], [p[1] * 100 for p in bound],
                      linestyle="--", color="black", label="bound (Belady)")  # fmt: skip
        for row in summary["sweep"]:
            if row["live"]:
                axes.scatter(
                    [row["size_bytes"] / 1048576],
                    [row[field] * 100],
                    marker="*",
                    s=160,
                    color="red",
                    zorder=5,
                    label=f"live ({row['design']})",
                )
        axes.set_xscale("log")
        axes.set_xlabel("cache size (MiB, log)")
        axes.set_ylabel(f"{label} (%)")
        axes.set_ylim(0, 101)
        axes.grid(True, alpha=0.3)
        axes.legend(loc="lower right")
        axes.set_title(f"{label} against cache size")
        buffer = io.BytesIO()
        figure.savefig(buffer, format="png")
    finally:
        plt.close(figure)
    encoded = base64.b64encode(buffer.getvalue()).decode()
    return f'<img alt="{html.escape(label)} curves" src="data:image/png;base64,{encoded}">'


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


def _png(figure: Any, label: str) -> str:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    encoded = base64.b64encode(buffer.getvalue()).decode()
    return f'<img alt="{html.escape(label)}" src="data:image/png;base64,{encoded}">'


def _working_set(summary: dict[str, Any]) -> str:
    """The working set over time: distinct bytes read per window."""
    points = summary["statistics"].get("working_set", [])
    if not points:
        return "<p>No reads.</p>"
    window = summary.get("workingSetWindowSeconds", 1)
    figure, axes = plt.subplots(figsize=(8, 3), dpi=100)
    try:
        axes.bar(
            [row["second"] for row in points],
            [row["bytes"] / 1048576 for row in points],
            width=window,
            align="edge",
        )
        axes.set_xlabel("seconds since the recorder started")
        axes.set_ylabel(f"MiB read per {window} s")
        axes.grid(True, alpha=0.3)
        axes.set_title("working set over time (distinct entries read per window)")
        image = _png(figure, "working set over time")
    finally:
        plt.close(figure)
    return (
        f"<p>Windows of {window} s ({len(points):,} with reads; one second wide, widened so "
        "a long trace has at most 1,000).</p>" + image
    )


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
    stats = summary["statistics"]
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
</style></head><body>
<h1>Cache designs on one trace</h1>
<p>Trace <code>{html.escape(str(summary["trace"]))}</code>: {summary["events"]:,} events,
{reads:,} reads, working set {_mib(summary["workingSetBytes"])}.{cluster} The broker ran
<b>{html.escape(str(summary["live"]["design"]))}</b> at
{_mib(summary["live"]["sizeBytes"] or 0)} (the red star). Every design was replayed at
every size through the broker's own cache classes; the dashed line is the optimal bound
(Belady, size aware), dotted lines are general-purpose references from libcachesim (fed
the adds as uncounted requests). Each hit is a storage read saved.{sampled}</p>
<h2>Ranking</h2><ol>{ranking}</ol>
<h2>Miss-ratio curves</h2>
{_curves(summary, "hit_ratio", "hit ratio")}
{_curves(summary, "byte_hit_ratio", "byte hit ratio")}
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
<h2>Read patterns by subscription</h2>
{_patterns(summary)}
<h2>Reuse distance (events between reads of an entry, log2 buckets)</h2>
{
        _table(
            stats.get("reuse", []),
            [
                ("events_bucket", "events (bucket)"),
                ("reads", "reads"),
                ("mean_seconds", "mean seconds"),
            ],
        )
    }
<h2>Working set</h2>
{_working_set(summary)}
<p>Sweep: {summary["sweepSeconds"]} s; whole analysis: {summary.get("seconds", "?")} s.</p>
</body></html>
"""
    return page
