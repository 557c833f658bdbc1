"""``brokerlab bench http --quick --json`` runs end to end and reports coherent figures.

Never asserts on timing: only that every figure is there, positive and consistent.
"""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import subprocess
import sys
from typing import Any, cast

import pytest

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
    config = result["config"]
    expected = config["requests_per_row"] * config["messages_per_request"]
    assert set(rows) == {
        "ceiling",
        "ceiling_produce_consume",
        "produce_none",
        "produce_none_codec",
        "produce_batch",
        "produce_batch_one_in_flight",
        "produce_consume_none",
        "produce_consume_traced_none",
        "produce_batched_none",
        "produce_consume_batched_none",
    }
    assert rows["produce_none"]["syncMode"] == "none"
    assert rows["produce_none_codec"]["syncMode"] == "none"
    assert rows["produce_batch"]["syncMode"] == "batch"
    assert rows["produce_batch_one_in_flight"]["syncMode"] == "batch"
    assert result["config"]["pending_per_producer"] >= 1
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
        "produce_batch_one_in_flight",
        "produce_batched_none",
    }
    for row in rows.values():
        assert row["rate_msgs_per_s"] > 0, row
        assert row["messages"] > 0, row
        own_ceiling = rows[row["ceiling"]]["rate_msgs_per_s"]
        assert abs(row["ratio_of_totals"] - row["rate_msgs_per_s"] / own_ceiling) < 1e-3, row
        # the headline is the rounds' median, inside its interval
        assert row["ratio"] == round(http.median(row["round_ratios"]), 4), row
        low, high = row["ratio_interval"]
        assert low <= row["ratio"] <= high, row
    assert result["produce_ratio"] == rows["produce_none"]["ratio"]
    assert result["produce_batch_ratio"] == rows["produce_batch"]["ratio"]
    assert result["produce_codec_ratio"] == rows["produce_none_codec"]["ratio"]
    for row in rows.values():  # CPU per message is the CPU cores over the rate
        cores, per_message = row["server_cpu_cores"], row["server_cpu_us_per_msg"]
        assert cores is not None and per_message is not None, row
        assert abs(per_message - cores / row["rate_msgs_per_s"] * 1e6) <= 0.02 * per_message + 0.01
        # one thread of them, up to /proc's resolution: each CPU time is read in clock
        # ticks at a round's start and end, so the loop's and the server's differences
        # are each off by under a tick, either way, per slice (a ceiling runs several
        # slices a round)
        slices = result["config"]["rounds"] * row["produced"] // expected
        ticks_us = 2 * slices / os.sysconf("SC_CLK_TCK") * 1e6
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

    for row in rows.values():
        if row["ceiling"] != row["row"]:
            assert row["produced"] == expected, row
    # a ceiling runs a slice before its first row and one after each of its rows
    assert rows["ceiling"]["produced"] == 6 * expected
    assert rows["ceiling_produce_consume"]["produced"] == 4 * expected
    assert result["config"]["load_average"] is not None
    consume = rows["produce_consume_none"]
    assert consume["consumed"] == consume["produced"] == expected
    assert consume["consumed_distinct"] == expected
    bare_consume = rows["ceiling_produce_consume"]
    assert bare_consume["consumed"] == bare_consume["consumed_distinct"] == 4 * expected
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


ROWS = (
    (http.CEILING, http.CEILING),
    (http.CEILING_PRODUCE_CONSUME, http.CEILING_PRODUCE_CONSUME),
    ("produce_none", http.CEILING),
    ("produce_none_codec", http.CEILING),
    ("produce_batch", http.CEILING),
    ("produce_batched_none", http.CEILING),
    ("produce_batch_one_in_flight", http.CEILING),
    ("produce_consume_none", http.CEILING_PRODUCE_CONSUME),
    ("produce_consume_traced_none", http.CEILING_PRODUCE_CONSUME),
    ("produce_consume_batched_none", http.CEILING_PRODUCE_CONSUME),
)


def test_a_rows_round_ratio_is_over_the_ceiling_slices_either_side_of_it() -> None:
    """The machine slows down steadily through a round: every slice runs at a speed
    factor that falls from slice to slice. A row as fast as its ceiling reads 1.0 in
    every position of the round, which a ratio over one ceiling slice per round (or
    over the run's totals) would not; a row at 0.6 of the ceiling reads 0.6."""
    ceiling = http.Row(http.CEILING, "c", cast(Any, None), None, http.CEILING)
    same = [http.Row(f"same{i}", "s", cast(Any, None), "none", http.CEILING) for i in range(3)]
    slower = http.Row("slower", "s", cast(Any, None), "batch", http.CEILING)
    order: list[str] = []

    async def measure(row: http.Row) -> float:
        speed = 1000.0 - 40.0 * len(order)  # linear drift, slice by slice
        order.append(row.key)
        return speed * (0.6 if row is slower else 1.0)

    for _ in range(2):
        asyncio.run(http.interleaved_round(ceiling, [*same, slower], measure))

    assert order[:9] == [
        "ceiling", "same0", "ceiling", "same1", "ceiling", "same2", "ceiling", "slower",
        "ceiling",
    ]  # fmt: skip
    for row in same:
        assert row.round_ratios == [pytest.approx(1.0)] * 2
    assert slower.round_ratios == [pytest.approx(0.6)] * 2
    assert ceiling.round_ratios == [1.0, 1.0]


def test_a_rows_ratio_is_the_median_of_its_rounds() -> None:
    """One disturbed round (a ratio of 0.1 among 0.6s) does not move the headline;
    the pooled ratio of totals is reported beside it."""
    rows = []
    batch_ratios = [0.6, 0.62, 0.1, 0.58, 0.61, 0.6, 0.59, 0.63]
    for key, ceiling in ROWS:
        row = http.Row(key, key, cast(Any, None), "none", ceiling)
        for ratio in batch_ratios if key == "produce_batch" else [0.5] * 8:
            own = 1.0 if key == ceiling else ratio
            row.messages += int(own * 1000)
            row.produced += 1000
            row.elapsed_s += 1.0
            row.round_rates.append(own * 1000)
            row.round_ratios.append(own)
        rows.append(row)
    consumers = {key: http.ConsumerState(key) for key, ceiling in ROWS[1:2] + ROWS[7:]}

    result = http._report(http.FULL, rows, consumers, (2.0, 3.0))

    by_key = {row["row"]: row for row in result["rows"]}
    batch = by_key["produce_batch"]
    assert batch["ratio"] == 0.6  # the median of eight: (0.6 + 0.6) / 2
    assert result["produce_batch_ratio"] == 0.6
    assert batch["ratio_of_totals"] == round(sum(batch_ratios) / 8, 4)  # 0.54
    assert batch["ratio_interval"] == [0.58, 0.62]  # the 2nd and the 7th of eight
    assert batch["ratio_interval_coverage"] == round(1 - 2 * 9 / 256, 4)
    assert by_key[http.CEILING]["ratio"] == 1.0
    table = http.format_table(result)
    assert "0.10-0.63" in table  # the rounds' spread
    assert "load average 2.0 at the start, 3.0 at the end" in table
    # the fsynced mode's headline has its own line, against the same target
    assert (
        "produce / produce ceiling (syncMode=batch): 0.60 (meets the target 0.60; "
        "median of 8 rounds, interval 0.58-0.62 (93%)"
    ) in table


def test_median_interval_by_order_statistics() -> None:
    assert http.median([3.0, 1.0, 2.0]) == 2.0
    assert http.median([4.0, 1.0, 3.0, 2.0]) == 2.5
    values = [float(v) for v in range(1, 9)]
    assert http.median_interval(values) == (2.0, 7.0, pytest.approx(0.9297, abs=1e-4))
    # five values: only the lowest and highest cover 90% (94%)
    assert http.median_interval([5.0, 1.0, 3.0, 2.0, 4.0]) == (
        1.0, 5.0, pytest.approx(1 - 2 / 32)
    )  # fmt: skip
    # too few for the coverage asked: the extremes, with what they cover
    assert http.median_interval([2.0, 1.0]) == (1.0, 2.0, 0.5)
    assert http.median_interval([1.0]) == (1.0, 1.0, 0.0)
    low, high, coverage = http.median_interval([float(v) for v in range(20)])
    assert coverage >= 0.9 and (low, high) == (5.0, 14.0)


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


def test_a_produce_slices_rate_leaves_out_its_ramp_up_and_ramp_down() -> None:
    # 4 senders, 40 requests of 10 messages: receipts start after a 1 s latency, then
    # one every 0.1 s while the window is full, then the last 4 straggle in 1 s apart.
    in_flight, per_request = 4, 10
    completions = [1.0 + 0.1 * i for i in range(36)] + [5.0, 6.0, 7.0, 8.0]
    # the 4th receipt to the 4th from the end: 32 requests in 3.2 s
    assert http.steady_rate(completions, in_flight, per_request) == pytest.approx(100.0)
    # the whole slice would have read 400 messages / 8 s: the ramps, not the server
    assert 40 * per_request / completions[-1] == pytest.approx(50.0)
    # too short a slice to have a full window's stretch: the caller times it whole
    assert http.steady_rate(completions[:15], in_flight, per_request) is None
    assert http.FULL.in_flight == http.FULL.producers * http.FULL.pending_per_producer
    # the run's slices are long enough to have a steady stretch
    assert http.FULL.requests_per_row // http.FULL.rounds >= 4 * http.FULL.in_flight
