"""``brokerlab bench http --quick --json`` runs end to end and reports coherent figures.

Never asserts on timing: only that every figure is there, positive and consistent.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
from typing import Any, cast

from broker.bench import http
from storage_stub.bookie.direct_writer import thread_writer_crc
from storage_stub.bookie.frame import compiled_frames

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
        "ceiling_produce_consume",
        "produce_none",
        "produce_none_codec",
        "produce_batch",
        "produce_consume_none",
        "produce_consume_traced_none",
        "produce_batched_none",
        "produce_consume_batched_none",
    }
    assert rows["produce_none"]["syncMode"] == "none"
    assert rows["produce_none_codec"]["syncMode"] == "none"
    assert rows["produce_batch"]["syncMode"] == "batch"
    assert rows["produce_consume_none"]["syncMode"] == "none"
    assert result["config"]["host"] == "127.0.0.1"
    # the servers run this interpreter's broker package: what it imports, they use
    assert result["config"]["entry_encoder"] == http.entry_encoder()
    assert result["config"]["frame_builder"] == ("compiled" if compiled_frames() else "python")
    assert result["config"]["entry_log_writer"] == (thread_writer_crc() or "python")

    ceiling = rows["ceiling"]["rate_msgs_per_s"]
    pc_ceiling = rows["ceiling_produce_consume"]["rate_msgs_per_s"]
    assert ceiling > 0 and pc_ceiling > 0
    assert result["ceiling_msgs_per_s"] == ceiling
    assert result["ceiling_produce_consume_msgs_per_s"] == pc_ceiling
    assert rows["ceiling"]["ratio"] == rows["ceiling_produce_consume"]["ratio"] == 1.0
    # produce rows are a fraction of the produce ceiling, produce+consume rows of theirs
    assert {key for key, row in rows.items() if row["ceiling"] == "ceiling"} == {
        "ceiling",
        "produce_none",
        "produce_none_codec",
        "produce_batch",
        "produce_batched_none",
    }
    for row in rows.values():
        assert row["rate_msgs_per_s"] > 0, row
        assert row["messages"] > 0, row
        own_ceiling = rows[row["ceiling"]]["rate_msgs_per_s"]
        assert abs(row["ratio"] - row["rate_msgs_per_s"] / own_ceiling) < 1e-3, row
    assert result["produce_ratio"] == rows["produce_none"]["ratio"]
    assert result["produce_batch_ratio"] == rows["produce_batch"]["ratio"]
    assert result["produce_codec_ratio"] == rows["produce_none_codec"]["ratio"]
    for row in rows.values():  # CPU per message is the CPU cores over the rate
        cores, per_message = row["server_cpu_cores"], row["server_cpu_us_per_msg"]
        assert cores is not None and per_message is not None, row
        assert abs(per_message - cores / row["rate_msgs_per_s"] * 1e6) <= 0.02 * per_message + 0.01
        # one thread of them, up to /proc's resolution: each CPU time is read in clock
        # ticks at a round's start and end, so the loop's and the server's differences
        # are each off by under a tick, either way, per round
        ticks_us = 2 * result["config"]["rounds"] / os.sysconf("SC_CLK_TCK") * 1e6
        resolution = ticks_us / row["messages"] + 0.01
        assert 0 < row["loop_cpu_us_per_msg"] <= per_message + resolution, row
    assert result["produce_consume_ratio"] == rows["produce_consume_none"]["ratio"]
    assert result["produce_batched_ratio"] == rows["produce_batched_none"]["ratio"]
    assert result["produce_consume_batched_ratio"] == rows["produce_consume_batched_none"]["ratio"]
    assert result["produce_consume_over_produce_ceiling"] == round(
        rows["produce_consume_none"]["rate_msgs_per_s"] / ceiling, 4
    )
    rounds = result["config"]["rounds"]
    for row in rows.values():  # one ratio a round, the ceilings' all 1
        assert len(row["round_ratios"]) == rounds, row
        if row["ceiling"] == row["row"]:
            assert row["round_ratios"] == [1.0] * rounds, row
    if rounds == 1:
        for row in rows.values():
            assert abs(row["round_ratios"][0] - row["ratio"]) < 1e-3, row
    assert result["target_produce_ratio"] == 0.6
    assert result["target_produce_consume_ratio"] == 0.5
    assert "base64" in config_text(result)

    config = result["config"]
    expected = config["requests_per_row"] * config["messages_per_request"]
    for row in rows.values():
        assert row["produced"] == expected, row
    consume = rows["produce_consume_none"]
    assert consume["consumed"] == consume["produced"] == expected
    assert consume["consumed_distinct"] == expected
    bare_consume = rows["ceiling_produce_consume"]
    assert bare_consume["consumed"] == bare_consume["consumed_distinct"] == expected
    traced = rows["produce_consume_traced_none"]
    assert traced["consumed"] == traced["consumed_distinct"] == expected
    batched = rows["produce_consume_batched_none"]  # each message of each batch, once
    assert batched["consumed"] == batched["consumed_distinct"] == expected
    assert batched["consumed_from_batches"] == expected
    assert consume["consumed_from_batches"] == traced["consumed_from_batches"] == 0
    assert result["traced_over_untraced"] == round(
        traced["rate_msgs_per_s"] / consume["rate_msgs_per_s"], 4
    )
    assert result["consumed"] == result["produced"] == expected


def config_text(result: dict[str, object]) -> str:
    config = result["config"]
    assert isinstance(config, dict)
    return f"{config['ceiling']} {config['ceiling_produce_consume']}"


def test_a_rows_round_ratios_pair_it_with_its_ceiling_round_by_round() -> None:
    """Two rounds in which the machine ran at different speeds: each round's ratio is
    the row's rate over its own ceiling's in that round, not over the run's total."""
    rows = []
    for key, ceiling in (
        (http.CEILING, http.CEILING),
        (http.CEILING_PRODUCE_CONSUME, http.CEILING_PRODUCE_CONSUME),
        ("produce_none", http.CEILING),
        ("produce_none_codec", http.CEILING),
        ("produce_batch", http.CEILING),
        ("produce_batched_none", http.CEILING),
        ("produce_consume_none", http.CEILING_PRODUCE_CONSUME),
        ("produce_consume_traced_none", http.CEILING_PRODUCE_CONSUME),
        ("produce_consume_batched_none", http.CEILING_PRODUCE_CONSUME),
    ):
        row = http.Row(key, key, cast(Any, None), "none", ceiling)
        # the ceilings: 100 then 200 msgs/s; every other row: 50 then 150 msgs/s
        fast = key in (http.CEILING, http.CEILING_PRODUCE_CONSUME)
        for messages in (100, 200) if fast else (50, 150):
            row.messages += messages
            row.produced += messages
            row.elapsed_s += 1.0
            row.round_rates.append(float(messages))
        rows.append(row)
    consumers = {
        key: http.ConsumerState(key)
        for key in (
            http.CEILING_PRODUCE_CONSUME,
            "produce_consume_none",
            "produce_consume_traced_none",
            "produce_consume_batched_none",
        )
    }

    result = http._report(http.FULL, rows, consumers)

    by_key = {row["row"]: row for row in result["rows"]}
    assert by_key["produce_none"]["round_ratios"] == [0.5, 0.75]
    assert by_key["produce_none"]["ratio"] == round(200 / 300, 4)
    assert by_key[http.CEILING]["round_ratios"] == [1.0, 1.0]
    table = http.format_table(result)
    assert "0.50-0.75" in table
    # the fsynced mode's headline has its own line, against the same target
    assert "produce / produce ceiling (syncMode=batch): 0.67 (meets the target 0.60" in table


def test_server_cpu_counts_the_servers_children() -> None:
    """A broker's codec processes are its children: the server CPU column adds theirs."""
    burn = (
        "import sys, time\n"
        "start = time.process_time()\n"
        "while time.process_time() - start < 0.3: pass\n"
        "print('burnt', flush=True)\n"
        "sys.stdin.read()\n"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", burn], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert child.stdin is not None and child.stdout is not None
    try:
        assert child.stdout.readline() == "burnt\n"
        assert child.pid in http.child_pids(os.getpid())
        own = http._own_cpu_seconds(os.getpid())
        theirs = http._own_cpu_seconds(child.pid)
        total = http._cpu_seconds(os.getpid())
        assert own is not None and theirs is not None and total is not None
        assert theirs >= 0.29
        assert total >= own + theirs  # read after both, and CPU time only grows
    finally:
        child.stdin.close()
        child.wait(timeout=60)
    assert child.pid not in http.child_pids(os.getpid())
