"""``brokerlab bench replay``: trace rows replayed per second of one task's CPU, per
design, before and after the column-wise replay, and the miniature simulation's error.

On one recorded trace (``--trace DIR``, or one recorded here by ``brokerlab loadgen
--scenario catchup --trace``), for every design at the trace's live cache size:

- ``before``: the first replay, row by row (one Python dict per row,
  ``pipeline.replay.replay_rows_before``), kept as this baseline until issue #17 is done;
- ``after``: ``pipeline.replay.replay_uri`` with one cell (design, size) per pass;
- ``after x8``: eight sizes (1/4 to 32 times the live size) in one pass, as a Spark task
  with several cells runs them; the rate is rows times cells per second, per cell;
- ``sampled``: ``--sample-rate`` (default 0.01) miniature simulation, one cell: its rate
  and its hit ratio's distance from the full replay's, in points, and the sampling rate
  used (raised for a cache too small to sample at the rate asked, see
  ``pipeline.columns.effective_sample_rate``).

Rates are rows per second of this process's CPU time (``time.process_time``), so other
work on the machine weighs on them less; ratios are of rates measured in this run, after
both replays ran once over the trace's first file (see ``_warm_up``). The
counts of ``before`` and ``after`` must be equal (``exact``): a faster replay that counts
otherwise is a defect, and the verdict fails.

``--presets`` records a short trace of every preset and reports the sampled replay's
error on each: the issue's bar is 2 points at a rate of 0.01.

Targets: ``after x8`` at least 10 times ``before`` for every design; sampling error at
most 2 points.
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from typing import Any

TARGET_SPEEDUP = 10.0
TARGET_SAMPLE_ERROR_POINTS = 2.0
SIZE_FACTORS = (0.25, 0.5, 1, 2, 4, 8, 16, 32)
#: seconds of the recorded run
RECORD_SECONDS = {"quick": 2, "full": 20}
PRESET_SECONDS = 10


def record_trace(scenario: str, seconds: float, out: pathlib.Path) -> pathlib.Path:
    """Run ``brokerlab loadgen`` on a broker it starts, recording its trace; returns the
    trace directory. Raises RuntimeError with the loadgen's output if it fails."""
    command = [
        sys.executable, "-m", "broker.cli", "loadgen", "--scenario", scenario,
        "--duration", str(seconds), "--trace", "--out", str(out), "--no-progress",
        "--no-plots",  # the trace is what is replayed; charts would cost seconds of CPU
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(
            f"recording a {scenario} trace failed ({done.returncode}):\n"
            f"{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
        )
    return out / "trace"


def _timed(run: Callable[[], Any]) -> tuple[Any, float]:
    started = time.process_time()
    result = run()
    return result, max(time.process_time() - started, 1e-9)


def _live_settings(trace: str) -> Any:
    from broker.cache.config import CacheConfig
    from pipeline.analyze import trace_settings
    from pipeline.trace_io import read_json

    return CacheConfig(**trace_settings(read_json(trace, "trace-meta.json"), trace))


def _counts(result: Any) -> tuple[int, int, int, int, dict[str, int]]:
    """Every count a replay reports: hits, misses, their bytes, evictions by reason."""
    return result.hits, result.misses, result.hit_bytes, result.miss_bytes, result.evicted


def _replay_before(trace: str, spec: Any) -> Any:
    """The first replay, row by row, broker by broker, summed."""
    from broker.trace.recorder import file_prefix
    from pipeline.replay import ReplayResult, replay_rows_before
    from pipeline.trace_io import iter_rows, trace_brokers

    return ReplayResult.total(
        spec,
        [replay_rows_before(iter_rows(trace, file_prefix(b)), spec) for b in trace_brokers(trace)],
    )


def _first(run: Callable[..., list[Any]], *args: Any) -> Any:
    return run(*args)[0]


def _warm_up(trace: str, spec: Any) -> None:
    """Both replays once over the trace's first file, not timed: the first replay in a
    process pays for its imports and its first allocations, which a long-running task
    pays once (about 0.4 s here, a tenth of a one-cell replay)."""
    from pipeline.replay import replay_batches, replay_rows_before
    from pipeline.trace_io import iter_file_batches, parquet_files, rows_of

    first = parquet_files(trace, "trace-b")[:1]
    for path in first:
        replay_batches(iter_file_batches(trace, path), [spec])
        replay_rows_before(rows_of(iter_file_batches(trace, path)), spec)


def measure_trace(trace: str, sample_rate: float) -> dict[str, Any]:
    """Every design on one trace: rates, ratios, exactness, sampling error."""
    from broker.cache import DESIGNS
    from pipeline.replay import ReplaySpec, replay_uri

    settings = _live_settings(trace)
    size = settings.max_size_bytes
    _warm_up(trace, ReplaySpec(next(iter(DESIGNS)), size, settings))
    rows_out = []
    for name in DESIGNS:
        spec = ReplaySpec(name, size, settings)
        before, before_s = _timed(partial(_replay_before, trace, spec))
        after, after_s = _timed(partial(_first, replay_uri, trace, [spec]))
        specs = [ReplaySpec(name, max(1, int(size * f)), settings) for f in SIZE_FACTORS]
        _, many_s = _timed(partial(replay_uri, trace, specs))
        sampled, sampled_s = _timed(partial(_first, replay_uri, trace, [spec], sample_rate))
        rows = after.events
        before_rate = rows / before_s
        rows_out.append(
            {
                "design": name,
                "rows": rows,
                "beforeRowsPerS": round(before_rate),
                "afterRowsPerS": round(rows / after_s),
                "afterX8RowsPerSPerCell": round(rows * len(specs) / many_s),
                "speedup": round(before_s / after_s, 2),
                "speedupX8": round(before_s * len(specs) / many_s, 2),
                "exact": _counts(before) == _counts(after),
                "hitRatio": after.hit_ratio,
                "sampledRowsPerS": round(rows / sampled_s),
                # the rate used: raised where the miniature cache would be too small
                "sampledRate": round(sampled.sample_rate, 4),
                "sampledHitRatio": sampled.hit_ratio,
                "sampleErrorPoints": round(abs(sampled.hit_ratio - after.hit_ratio) * 100, 2),
                "sampledCostRatio": round(sampled_s / after_s, 3),
            }
        )
    return {"trace": trace, "liveSizeBytes": size, "designs": rows_out}


def measure_presets(sample_rate: float, work: pathlib.Path) -> list[dict[str, Any]]:
    """A short trace of every preset: the sampled replay's error per design."""
    from broker.cache import DESIGNS
    from loadgen.scenario import preset_names
    from pipeline.replay import ReplaySpec, replay_uri

    results = []
    for preset in preset_names():
        trace = str(record_trace(preset, PRESET_SECONDS, work / preset))
        settings = _live_settings(trace)
        specs = [ReplaySpec(name, settings.max_size_bytes, settings) for name in DESIGNS]
        full = replay_uri(trace, specs)
        sampled = replay_uri(trace, specs, sample_rate)
        errors = {
            spec.design: round(abs(s.hit_ratio - f.hit_ratio) * 100, 2)
            for spec, f, s in zip(specs, full, sampled, strict=True)
        }
        results.append(
            {
                "preset": preset,
                "rows": full[0].events,
                "liveSizeBytes": settings.max_size_bytes,
                "sampledRate": round(sampled[0].sample_rate, 4),
                "errorPoints": errors,
            }
        )
    return results


def measure(quick: bool, trace: str | None, sample_rate: float, presets: bool) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="brokerlab-bench-replay-") as scratch:
        work = pathlib.Path(scratch)
        if trace is None:
            seconds = RECORD_SECONDS["quick" if quick else "full"]
            trace = str(record_trace("catchup", seconds, work / "catchup"))
            recorded = True
        else:
            recorded = False
        result = measure_trace(trace, sample_rate)
        result["recorded"] = recorded
        if presets:
            result["presets"] = measure_presets(sample_rate, work)
    designs = result["designs"]
    errors = [d["sampleErrorPoints"] for d in designs] + [
        e for p in result.get("presets", []) for e in p["errorPoints"].values()
    ]
    result.update(
        benchmark="replay",
        quick=quick,
        sampleRate=sample_rate,
        minSpeedupX8=min(d["speedupX8"] for d in designs),
        minSpeedup=min(d["speedup"] for d in designs),
        maxSampleErrorPoints=max(errors),
        exact=all(d["exact"] for d in designs),
    )
    result["pass"] = (
        result["exact"]
        and result["minSpeedupX8"] >= TARGET_SPEEDUP
        and result["maxSampleErrorPoints"] <= TARGET_SAMPLE_ERROR_POINTS
    )
    return result


def main(
    quick: bool = False,
    as_json: bool = False,
    trace: str | None = None,
    sample_rate: float = 0.01,
    presets: bool = False,
) -> int:
    result = measure(quick, trace, sample_rate, presets)
    if as_json:
        print(json.dumps(result))
        return 0
    source = "recorded here (catchup)" if result["recorded"] else result["trace"]
    print(
        f"brokerlab bench replay: trace {source}, {result['designs'][0]['rows']:,} rows, "
        f"live size {result['liveSizeBytes']:,} B; rows per second of one task's CPU"
    )
    print()
    header = (
        f"{'design':<10} {'before':>9} {'after':>10} {'x':>6} {'after x8/cell':>13} "
        f"{'x':>6} {'exact':>5} {'hit ratio':>9} {f'sampled {sample_rate:g}':>13} "
        f"{'error pts':>9} {'cost':>6} {'rate':>6}"
    )
    print(header)
    print("-" * len(header))
    for d in result["designs"]:
        print(
            f"{d['design']:<10} {d['beforeRowsPerS']:>9,} {d['afterRowsPerS']:>10,} "
            f"{d['speedup']:>6.1f} {d['afterX8RowsPerSPerCell']:>13,} {d['speedupX8']:>6.1f} "
            f"{'yes' if d['exact'] else 'NO':>5} {d['hitRatio']:>9.1%} "
            f"{d['sampledRowsPerS']:>13,} {d['sampleErrorPoints']:>9.2f} "
            f"{d['sampledCostRatio']:>6.3f} {d['sampledRate']:>6g}"
        )
    for preset in result.get("presets", []):
        errors = ", ".join(f"{k} {v:.2f}" for k, v in preset["errorPoints"].items())
        print(
            f"preset {preset['preset']:<24} {preset['rows']:>9,} rows, cache "
            f"{preset['liveSizeBytes'] >> 20} MiB, rate {preset['sampledRate']:g}: "
            f"error pts {errors}"
        )
    print()
    print(
        f"after x8 >= {TARGET_SPEEDUP:g}x before for every design: "
        f"min {result['minSpeedupX8']:.1f}x (one cell per pass: min {result['minSpeedup']:.1f}x); "
        f"sampling error <= {TARGET_SAMPLE_ERROR_POINTS:g} points: max "
        f"{result['maxSampleErrorPoints']:.2f}; counts exact: {result['exact']}"
    )
    print("verdict: " + ("PASS" if result["pass"] else "FAIL"))
    return 0
