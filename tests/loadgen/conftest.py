"""The load generator's tests start their brokers forked from a warm interpreter
(``tests/loadgen/forked.py``): the same ``brokerlab serve`` command, without a fresh
interpreter's imports at every run and restart."""

from __future__ import annotations

from tests.loadgen.charts import no_comparison_chart, no_run_charts
from tests.loadgen.forked import forked_loadgen_brokers

__all__ = ["forked_loadgen_brokers", "no_comparison_chart", "no_run_charts"]
