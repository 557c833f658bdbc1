"""Charts and a markdown table from results documents (see ``loadgen.results``).

``plot_run`` draws one run (rates, latency, hit ratio over time), ``plot_comparison`` and
``comparison_table`` put runs of the same scenario with different cache designs (or
variants of them: a design plus settings) side by side. A run is named by its
``variant`` when ``compare`` set one, else by ``broker.implementation``.
"""

from __future__ import annotations

import contextlib
import math
import pathlib
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
from matplotlib.axes import Axes
from matplotlib.figure import Figure

if TYPE_CHECKING:
    from loadgen.verdict import VariantSummary

DPI = 100
# Figure sizes in inches; at DPI the PNGs are 100 pixels per inch.
RATES_SIZE = (10.0, 5.0)
LATENCY_SIZE = (10.0, 8.0)
HIT_RATIO_SIZE = (10.0, 4.0)
COMPARE_SIZE = (16.0, 4.5)
#: room (percentage points) above 100% and below 0% on the hit-ratio axis
HIT_RATIO_MARGIN = 4
#: the shadows' lines on hit-ratio.png, in turn (the live design's is solid and wide)
SHADOW_LINESTYLES = ("-", (0, (6, 3)), (0, (2, 2)), "-.")
LATENCY_LINES = (
    ("50pct", "p50"),
    ("95pct", "p95"),
    ("99pct", "p99"),
    ("999pct", "p99.9"),
    ("Max", "max"),
)
_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


#: a run's charts' margins in inches (left, right, top, bottom), and the gap between the
#: latency chart's two panels: room for the titles, the axis labels and six-digit tick
#: labels (matplotlib writes a million and more as a multiple of 1e6), on the left and,
#: for the backlog's axis, right of the rates chart. A run's charts have the same labels
#: whatever the run, so they are laid out here once: matplotlib's constrained layout
#: measured every label again at each save, 40% of a run's charts' CPU
MARGINS_IN = (0.95, 0.15, 0.35, 0.5)
RATES_MARGINS_IN = (0.95, 0.95, 0.35, 0.5)
PANEL_GAP_IN = 0.75


@contextlib.contextmanager
def _figure(
    path: pathlib.Path,
    size: tuple[float, float],
    rows: int = 1,
    cols: int = 1,
    margins: tuple[float, float, float, float] | None = None,
) -> Iterator[tuple[Figure, Any]]:
    """A figure that is saved to ``path`` when the block ends, and closed in any case:
    with ``margins`` (inches: left, right, top, bottom) at those, else laid out by
    matplotlib's constrained layout."""
    if margins is None:
        fig, axes = plt.subplots(rows, cols, figsize=size, layout="constrained", squeeze=False)
    else:
        fig, axes = plt.subplots(rows, cols, figsize=size, squeeze=False)
        width, height = size
        left, right, top, bottom = margins
        panel = (height - top - bottom - PANEL_GAP_IN * (rows - 1)) / rows
        fig.subplots_adjust(
            left=left / width,
            right=1 - right / width,
            top=1 - top / height,
            bottom=bottom / height,
            hspace=PANEL_GAP_IN / panel,
        )
    try:
        yield fig, axes.flatten()
        fig.savefig(path, dpi=DPI, format="png")
    finally:
        plt.close(fig)


def _floats(values: Sequence[Any], scale: float = 1.0) -> list[float]:
    return [math.nan if value is None else float(value) * scale for value in values]


def _series(results: dict[str, Any], name: str, scale: float = 1.0) -> list[float]:
    """``results[name]`` as floats (None as NaN), as long as ``time``."""
    length = len(results.get("time") or [])
    values = _floats((results.get(name) or [])[:length], scale)
    return values + [math.nan] * (length - len(values))


def _style(length: int) -> dict[str, Any]:
    # A single sample is an invisible line: draw a marker for it.
    return {"marker": "o"} if length == 1 else {}


def _mark_events(ax: Axes, events: Sequence[dict[str, Any]]) -> None:
    for event in events:
        at = event.get("at")
        if at is None:
            continue
        ax.axvline(at, color="grey", linestyle="--", linewidth=1)
        ax.text(
            at,
            0.98,
            f" {event.get('type', 'event')}",
            transform=ax.get_xaxis_transform(),
            rotation=90,
            va="top",
            ha="right",
            fontsize=8,
            color="dimgrey",
        )


def _title(results: dict[str, Any], what: str) -> str:
    scenario = (results.get("scenario") or {}).get("name") or "unknown scenario"
    return f"{scenario} ({_label(results)}): {what}"


def _label(results: dict[str, Any]) -> str:
    """What ran: the variant ``compare`` labelled the run with (a design plus settings,
    ``legacy-markdelete``), else the broker's cache implementation."""
    variant = results.get("variant")
    if variant:
        return str(variant)
    return str((results.get("broker") or {}).get("implementation") or "unknown")


def plot_run(results: dict[str, Any], out_dir: pathlib.Path) -> list[pathlib.Path]:
    """Write ``rates.png``, ``latency.png`` and ``hit-ratio.png`` for one run into
    ``out_dir``; return their paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    time = _floats(results.get("time") or [])
    events = results.get("events") or []
    style = _style(len(time))
    paths = [out_dir / "rates.png", out_dir / "latency.png", out_dir / "hit-ratio.png"]

    with _figure(paths[0], RATES_SIZE, margins=RATES_MARGINS_IN) as (_, (ax,)):
        ax.plot(time, _series(results, "publishRate"), label="publish", **style)
        ax.plot(time, _series(results, "consumeRate"), label="consume", **style)
        ax.set_xlabel("time (s)")
        ax.set_ylabel("rate (msg/s)")
        backlog_ax = ax.twinx()
        backlog_ax.plot(
            time, _series(results, "backlog"), color="tab:red", label="backlog", **style
        )
        backlog_ax.set_ylabel("backlog (messages)")
        handles, labels = ax.get_legend_handles_labels()
        more_handles, more_labels = backlog_ax.get_legend_handles_labels()
        ax.legend(handles + more_handles, labels + more_labels, loc="upper left")
        ax.set_title(_title(results, "publish and consume rate, backlog"))
        _mark_events(ax, events)

    with _figure(paths[1], LATENCY_SIZE, rows=2, margins=MARGINS_IN) as (_, axes):
        for ax, prefix, name in zip(
            axes, ("publishLatency", "endToEndLatency"), ("publish", "end-to-end"), strict=True
        ):
            plotted: list[float] = []
            for suffix, label in LATENCY_LINES:
                values = _series(results, prefix + suffix)
                plotted += [value for value in values if not math.isnan(value)]
                ax.plot(time, values, label=label, **style)
            if plotted and min(plotted) > 0:
                ax.set_yscale("log")
            ax.set_xlabel("time (s)")
            ax.set_ylabel("latency (ms)")
            ax.set_title(_title(results, f"{name} latency"))
            ax.legend(loc="upper left")
            _mark_events(ax, events)

    with _figure(paths[2], HIT_RATIO_SIZE, margins=MARGINS_IN) as (_, (ax,)):
        _plot_hit_ratios(ax, results, time, style)
        _mark_events(ax, events)
    return paths


def _plot_hit_ratios(
    ax: Axes, results: dict[str, Any], time: list[float], style: dict[str, Any]
) -> None:
    """The live design's hit ratio per interval and each shadow's beside it: per interval
    where the results carry ``shadowHitRatio``, else (results written before it was
    recorded) the shadow's ratio over the whole run as a flat dashed line. The y axis
    runs a little past 100% so that a ratio of 100% is a line, not the frame."""
    live = (results.get("broker") or {}).get("implementation") or "live design"
    # the live line wide, the shadows thin over it: one at the same ratio hides neither
    ax.plot(
        time, _series(results, "hitRatio", scale=100), label=f"{live} (live)", linewidth=3, **style
    )
    per_interval = results.get("shadowHitRatio") or {}
    whole_run = (results.get("cache") or {}).get("shadows") or {}
    names = [*per_interval, *(n for n in whole_run if n not in per_interval)]
    for index, name in enumerate(names):
        if name in per_interval:
            values = _floats(per_interval[name][: len(time)], 100)
            values += [math.nan] * (len(time) - len(values))
            # shadows at the same ratio overlap: a dash pattern each shows them all
            dashes = SHADOW_LINESTYLES[index % len(SHADOW_LINESTYLES)]
            ax.plot(
                time,
                values,
                label=f"{name} (shadow)",
                linewidth=1.5,
                linestyle=dashes,
                zorder=3,
                **style,
            )
            continue
        ratio = (whole_run[name] or {}).get("hitRatio")
        if ratio is not None and time:
            ax.plot(
                [time[0], time[-1]],
                [ratio * 100] * 2,
                linestyle=":",
                linewidth=1.5,
                zorder=3,
                label=f"{name} (shadow, whole run)",
            )
    ax.set_ylim(-HIT_RATIO_MARGIN, 100 + HIT_RATIO_MARGIN)
    ax.set_yticks(range(0, 101, 20))
    ax.set_xlabel("time (s)")
    ax.set_ylabel("hit ratio (%)")
    ax.set_title(_title(results, "cache hit ratio per interval, live and shadow designs"))
    ax.legend(loc="lower left", fontsize=8)


def _storage(results: dict[str, Any], tier: str, name: str) -> float:
    return float(((results.get("storage") or {}).get(tier) or {}).get(name) or 0)


def _cache(results: dict[str, Any], name: str) -> float | None:
    value = (results.get("cache") or {}).get(name)
    return None if value is None else float(value)


def _bar_labels(ax: Axes, container: Any, values: Sequence[float | None], fmt: str) -> None:
    ax.bar_label(container, ["n/a" if v is None else format(v, fmt) for v in values], fontsize=8)


def plot_comparison(
    runs: list[dict[str, Any]],
    out_dir: pathlib.Path,
    summaries: Sequence[VariantSummary] | None = None,
) -> pathlib.Path:
    """Write ``compare.png``: hit ratio, storage reads, eviction CPU and p99 latencies, one
    bar (group) per run, named by its variant or cache implementation; return its path.
    With ``summaries`` (one per run, over several seeds), the hit ratio and storage reads
    are their means, with the 95% intervals as error bars; the other panels show the
    given (first seed's) runs."""
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "compare.png"
    names = [_label(run) for run in runs]
    positions = list(range(len(runs)))
    scenario = (runs[0].get("scenario") or {}).get("name") if runs else None

    with _figure(path, COMPARE_SIZE, cols=4) as (fig, axes):
        fig.suptitle(f"{scenario or 'unknown scenario'}: cache implementations compared")
        hit_ratio, storage, cpu, latency = axes

        if summaries is not None:
            _interval_bars(hit_ratio, storage, positions, summaries)
        else:
            ratios = [None if (r := _cache(run, "hitRatio")) is None else r * 100 for run in runs]
            bars = hit_ratio.bar(positions, [r or 0.0 for r in ratios], color="tab:green")
            _bar_labels(hit_ratio, bars, ratios, ".1f")
            hit_ratio.set(title="hit ratio", ylabel="%", ylim=(0, 105))

            entries = [_storage(run, "bookie", "entriesRead") for run in runs]
            gets = [_storage(run, "tiered", "objectGets") for run in runs]
            storage.bar(positions, entries, label="bookie entries read")
            storage.bar(positions, gets, bottom=entries, label="tiered object gets")
            storage.set(title="storage reads", ylabel="reads")
            storage.legend(fontsize=8)

        seconds = [_cache(run, "evictionCpuSeconds") for run in runs]
        bars = cpu.bar(positions, [s or 0.0 for s in seconds], color="tab:purple")
        _bar_labels(cpu, bars, seconds, ".3f")
        cpu.set(title="CPU time spent evicting", ylabel="s")

        width = 0.4
        for offset, key, label in (
            (-width / 2, "aggregatedPublishLatency99pct", "publish p99"),
            (width / 2, "aggregatedEndToEndLatency99pct", "end-to-end p99"),
        ):
            values = [run.get(key) for run in runs]
            bars = latency.bar(
                [p + offset for p in positions], [v or 0.0 for v in values], width, label=label
            )
            _bar_labels(latency, bars, values, ".1f")
        latency.set(title="p99 latency", ylabel="ms")
        latency.legend(fontsize=8)

        for ax in axes:
            ax.set_xticks(positions, names, rotation=20, ha="right")
    return path


def human_bytes(n: float) -> str:
    """``1536`` -> ``"1.5 KiB"``; below 1 KiB a whole number of bytes."""
    value = float(n)
    for unit in _UNITS:
        if abs(value) < 1024 or unit == _UNITS[-1]:
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def percent(value: float | None) -> str:
    """A ratio as a percentage with one decimal; n/a for None."""
    return "n/a" if value is None else f"{value * 100:.1f}%"


def _count(value: int | None) -> str:
    return "n/a" if value is None else f"{value:,}"


def _fixed(value: float | None, digits: int) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def _interval_bars(
    hit_ratio: Axes, storage: Axes, positions: list[int], summaries: Sequence[VariantSummary]
) -> None:
    """Means over the seeds, with their 95% intervals as error bars."""
    seeds = summaries[0].seeds if summaries else ()
    ratios = [s.hit_ratio for s in summaries]
    means = [r.mean * 100 if r is not None else 0.0 for r in ratios]
    errors = [r.half_width * 100 if r is not None else 0.0 for r in ratios]
    bars = hit_ratio.bar(positions, means, yerr=errors, capsize=4, color="tab:green")
    _bar_labels(hit_ratio, bars, [r.mean * 100 if r else None for r in ratios], ".1f")
    hit_ratio.set(
        title=f"hit ratio, mean of {len(seeds)} seeds (95% CI)", ylabel="%", ylim=(0, 105)
    )
    reads = [s.storage_reads for s in summaries]
    bars = storage.bar(
        positions,
        [r.mean for r in reads],
        yerr=[r.half_width for r in reads],
        capsize=4,
        color="tab:blue",
    )
    _bar_labels(storage, bars, [r.mean for r in reads], ",.0f")
    storage.set(title="entries read from storage (95% CI)", ylabel="entries")


def comparison_table(runs: list[dict[str, Any]]) -> str:
    """A GitHub markdown table with one row per run, in the given order, named by its
    variant or cache implementation."""
    header = [
        "implementation",
        "hit ratio",
        "consumed hit ratio",
        "published",
        "consumed",
        "byte hit ratio",
        "bookie read requests",
        "bookie entries read",
        "bookie bytes read",
        "tiered object gets",
        "tiered bytes read",
        "eviction CPU (s)",
        "publish p99 (ms)",
        "end-to-end p99 (ms)",
    ]
    rows = [header, ["---"] * len(header)]
    for run in runs:
        rows.append(
            [
                _label(run).replace("|", "\\|"),
                percent(_cache(run, "hitRatio")),
                percent(_cache(run, "consumedHitRatio")),
                _count(run.get("totals", {}).get("publishedMessages")),
                _count(run.get("totals", {}).get("consumedMessages")),
                percent(_cache(run, "byteHitRatio")),
                f"{_storage(run, 'bookie', 'readRequests'):.0f}",
                f"{_storage(run, 'bookie', 'entriesRead'):.0f}",
                human_bytes(_storage(run, "bookie", "bytesRead")),
                f"{_storage(run, 'tiered', 'objectGets'):.0f}",
                human_bytes(_storage(run, "tiered", "bytesRead")),
                _fixed(_cache(run, "evictionCpuSeconds"), 3),
                _fixed(run.get("aggregatedPublishLatency99pct"), 2),
                _fixed(run.get("aggregatedEndToEndLatency99pct"), 2),
            ]
        )
    return "\n".join("| " + " | ".join(row) + " |" for row in rows) + "\n"
