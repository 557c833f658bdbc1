"""``report.html`` from a summary: what it says about statistics it does not list whole."""

from __future__ import annotations

import re
from typing import Any

from pipeline.report import render_report


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


def test_the_report_says_how_many_pattern_rows_it_leaves_out() -> None:
    page = render_report(_summary(patterns=5_000, shown=200))
    assert "The 200 rows with the most reads of 5,000" in page
    assert len(re.findall(r"<td>t\d+</td>", page)) == 200
    assert "Windows of 11 s (982 with reads" in page
    whole = render_report(_summary(patterns=3, shown=3))
    assert "most reads of" not in whole and len(re.findall(r"<td>t\d+</td>", whole)) == 3
