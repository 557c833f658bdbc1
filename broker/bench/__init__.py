"""``brokerlab bench <name>``: benchmarks that report ratios measured in one run."""

from __future__ import annotations

import sys


def run_bench(name: str, quick: bool = False, as_json: bool = False) -> int:
    """Run benchmark ``name``, print its table (or one JSON object); the exit code."""
    if name == "http":
        from broker.bench.http import main

        return main(quick=quick, as_json=as_json)
    if name == "lac":
        from broker.bench.lac import main as lac_main

        return lac_main(quick=quick, as_json=as_json)
    if name == "cursors":
        from broker.bench.cursors import main as cursors_main

        return cursors_main(quick=quick, as_json=as_json)
    if name == "cache":
        from broker.bench.cache import main as cache_main

        return cache_main(quick=quick, as_json=as_json)
    if name == "tiered":
        from broker.bench.tiered import main as tiered_main

        return tiered_main(quick=quick, as_json=as_json)
    if name == "wire":
        from broker.bench.wire import main as wire_main

        return wire_main(quick=quick, as_json=as_json)
    print(f"brokerlab bench: unknown benchmark {name!r}", file=sys.stderr)
    return 2
