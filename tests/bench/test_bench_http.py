"""``brokerlab bench http --quick --json`` runs end to end and reports coherent figures.

Never asserts on timing: only that every figure is there, positive and consistent.
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent.parent


def test_bench_http_quick_json() -> None:
    completed = subprocess.run(
        [sys.executable, "-m", "broker.cli", "bench", "http", "--quick", "--json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    result = json.loads(completed.stdout)

    rows = {row["row"]: row for row in result["rows"]}
    assert set(rows) == {
        "ceiling",
        "produce_none",
        "produce_batch",
        "produce_consume_none",
        "produce_consume_traced_none",
    }
    assert rows["produce_none"]["syncMode"] == "none"
    assert rows["produce_batch"]["syncMode"] == "batch"
    assert rows["produce_consume_none"]["syncMode"] == "none"
    assert result["config"]["host"] == "127.0.0.1"

    ceiling = rows["ceiling"]["rate_msgs_per_s"]
    assert ceiling > 0
    assert result["ceiling_msgs_per_s"] == ceiling
    assert rows["ceiling"]["ratio"] == 1.0
    for row in rows.values():
        assert row["rate_msgs_per_s"] > 0, row
        assert row["messages"] > 0, row
        assert abs(row["ratio"] - row["rate_msgs_per_s"] / ceiling) < 1e-3, row
    assert result["produce_ratio"] == rows["produce_none"]["ratio"]
    assert result["produce_batch_ratio"] == rows["produce_batch"]["ratio"]
    assert result["produce_consume_ratio"] == rows["produce_consume_none"]["ratio"]

    config = result["config"]
    expected = config["requests_per_row"] * config["messages_per_request"]
    for row in rows.values():
        assert row["produced"] == expected, row
    consume = rows["produce_consume_none"]
    assert consume["consumed"] == consume["produced"] == expected
    assert consume["consumed_distinct"] == expected
    traced = rows["produce_consume_traced_none"]
    assert traced["consumed"] == traced["consumed_distinct"] == expected
    assert result["traced_over_untraced"] == round(
        traced["rate_msgs_per_s"] / consume["rate_msgs_per_s"], 4
    )
    assert result["consumed"] == result["produced"] == expected
