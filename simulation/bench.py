"""``brokerlab bench simulate``: how fast virtual time runs, preset by preset.

Each preset runs on virtual time, scaled to the same length (``--duration``'s scaling:
events, warm-up and backlog keep their share), and the table gives for each the virtual
seconds simulated per wall second and the messages delivered (consumed) and published
per wall second. These are this machine's figures, not a verdict: the ratio between
presets is what carries over (which workloads cost the simulation most).
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any

from loadgen.runner import RunOptions
from loadgen.scenario import ScenarioError, load_scenario, preset_names
from simulation.run import run_virtual

#: virtual seconds each preset runs (quick, full)
DURATION_S = (2.0, 10.0)


def measure(quick: bool, presets: Sequence[str] | None = None) -> dict[str, Any]:
    """Every preset (or those named) on virtual time; a row per preset, or why it was
    skipped (a preset virtual time refuses, as throughput's unthrottled producers)."""
    duration = DURATION_S[0] if quick else DURATION_S[1]
    rows: dict[str, Any] = {}
    for name in preset_names() if presets is None else presets:
        scenario = load_scenario(name)
        began = time.perf_counter()
        try:
            results = run_virtual(scenario, RunOptions(duration_s=duration))
        except ScenarioError as error:
            rows[name] = {"skipped": str(error)}
            continue
        wall_s = time.perf_counter() - began
        totals = results["totals"]
        rows[name] = {
            "virtualSeconds": results["virtualSeconds"],
            "wallSeconds": round(wall_s, 3),
            "virtualPerWall": round(results["virtualSeconds"] / wall_s, 3),
            "deliveredPerWallSecond": round(totals["consumedMessages"] / wall_s, 1),
            "publishedPerWallSecond": round(totals["publishedMessages"] / wall_s, 1),
            "delivered": totals["consumedMessages"],
            "published": totals["publishedMessages"],
        }
    return {"benchmark": "simulate", "quick": quick, "durationSeconds": duration, "presets": rows}


def main(quick: bool = False, as_json: bool = False) -> int:
    result = measure(quick)
    if as_json:
        print(json.dumps(result))
        return 0
    print(
        f"brokerlab bench simulate: every preset on virtual time, scaled to "
        f"{result['durationSeconds']:g} virtual s (the measured part; set-up, warm-up and "
        "any catch-up backlog come on top)"
    )
    print()
    header = (
        f"{'preset':<26} {'virtual s':>9} {'wall s':>8} {'virtual/wall':>12} "
        f"{'delivered/wall s':>16} {'published/wall s':>16}"
    )
    print(header)
    print("-" * len(header))
    for name, row in result["presets"].items():
        if "skipped" in row:
            print(f"{name:<26} skipped: {row['skipped']}")
            continue
        print(
            f"{name:<26} {row['virtualSeconds']:>9.1f} {row['wallSeconds']:>8.1f} "
            f"{row['virtualPerWall']:>12.2f} {row['deliveredPerWallSecond']:>16,.0f} "
            f"{row['publishedPerWallSecond']:>16,.0f}"
        )
    print()
    print("virtual/wall above 1: the preset runs faster than real time on this machine;")
    print("delivered: messages the consumers received in the measured part.")
    return 0
