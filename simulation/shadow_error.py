"""How far a shadow is from its design run live: every design live with the others as
shadows, on virtual time, per preset and seed; a shadow of design Y is compared with Y's
own live run of the same seed (misses: entries read from storage).

    python -m simulation.shadow_error [--presets a,b] [--seeds 1,2] [--duration S]

prints a table per preset and the largest relative error, and writes it as JSON with
``--out``. docs/cache-designs.md ("Shadows") quotes its result.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
from collections.abc import Sequence
from typing import Any

from broker.cache.designs import DESIGNS
from loadgen.runner import RunOptions
from loadgen.scenario import load_scenario
from simulation.run import run_virtual

#: presets that finish quickly on virtual time and between them read in every way:
#: tailing, catch-up, Key_Shared replays, reconnects and unloads, ledger rollover
PRESETS = ("tailing-fanout", "catchup", "keyshared-slow-consumer", "demo", "failover-lac-storm")


def measure(
    presets: Sequence[str], seeds: Sequence[int], duration_s: float
) -> list[dict[str, Any]]:
    """One row per (preset, seed, design Y, live design X != Y): Y's misses live and as a
    shadow of X, and the relative error. Runs every design live once per (preset, seed):
    O(presets x seeds x designs) runs."""
    designs = list(DESIGNS)
    rows: list[dict[str, Any]] = []
    for preset in presets:
        scenario = load_scenario(preset)
        for seed in seeds:
            live: dict[str, dict[str, Any]] = {}
            for design in designs:
                others = ",".join(d for d in designs if d != design)
                overrides: dict[str, object] = {
                    "managedLedgerCacheImplementation": design,
                    "brokerlabShadowCacheImplementations": others,
                }
                options = RunOptions(broker_overrides=overrides, duration_s=duration_s)
                live[design] = run_virtual(scenario, options, seed=seed)["cache"]
            for shadowed in designs:
                truth = live[shadowed]["misses"]
                for host in designs:
                    if host == shadowed:
                        continue
                    seen = live[host]["shadows"][shadowed]["misses"]
                    rows.append(
                        {
                            "preset": preset,
                            "seed": seed,
                            "design": shadowed,
                            "liveDesign": host,
                            "liveMisses": truth,
                            "shadowMisses": seen,
                            # against at least one miss: a shadow that misses when its
                            # design live did not is an error too
                            "relativeError": abs(seen - truth) / max(truth, 1),
                        }
                    )
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m simulation.shadow_error")
    parser.add_argument("--presets", default=",".join(PRESETS))
    parser.add_argument("--seeds", default="1,2")
    parser.add_argument("--duration", type=float, default=20.0, metavar="S")
    parser.add_argument("--out", type=pathlib.Path)
    args = parser.parse_args(argv)
    seeds = [int(seed) for seed in args.seeds.split(",")]
    rows: list[dict[str, Any]] = []
    for preset in args.presets.split(","):
        for seed in seeds:  # printed as each is measured: a long measurement shows progress
            measured = measure([preset], [seed], args.duration)
            rows += measured
            for row in measured:
                print(
                    f"{row['preset']:<24} seed {row['seed']}  {row['design']:<9} as a shadow "
                    f"of {row['liveDesign']:<9} {row['shadowMisses']:>9,} misses, live "
                    f"{row['liveMisses']:>9,}  ({row['relativeError']:.1%})",
                    flush=True,
                )
    worst = max(rows, key=lambda row: row["relativeError"])
    print(
        f"largest error: {worst['relativeError']:.1%} ({worst['design']} as a shadow of "
        f"{worst['liveDesign']} on {worst['preset']}, seed {worst['seed']})"
    )
    if args.out is not None:
        args.out.write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
