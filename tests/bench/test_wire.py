"""``brokerlab bench wire --quick --json`` runs end to end: a row for each server
(brokerlab with and without deduplication, pulsar-lite) and each batching mode, driven by
several client processes, with figures that are there, positive and consistent: broker
CPU per message for both servers and their ratio, and the check of whether a client set
the pace, both printed; and the bench tells a brokerlab without the binary protocol from
one with it by the lines it prints.

Never asserts on timing, nor on the issue's target ratios: only on the report's structure,
on counts, and on CPU figures being there, positive and finite.
"""

from __future__ import annotations

import json
import math
import pathlib
import subprocess
import sys
from typing import Any

import pytest

from broker.bench import wire
from broker.bench.wire import BrokerlabServer, find_pulsar_lite

ROOT = pathlib.Path(__file__).resolve().parent.parent.parent


def _measured_row_is_consistent(row: dict[str, Any], messages: int) -> None:
    assert row["available"] and row["error"] is None, row
    assert row["messages"] == messages, row
    assert row["produce_msgs_per_s"] > 0, row
    assert row["consume_msgs_per_s"] > 0, row
    assert row["received"] >= messages, row
    assert row["duplicates"] == row["received"] - messages, row
    entries = row["entries"]
    if entries is None:  # reported as n/a
        assert row["produce_entries_per_s"] is None and row["consume_entries_per_s"] is None
        return
    if row["batching"]:
        assert 0 < entries < messages, row
    else:
        assert entries == messages, row
    assert row["produce_entries_per_s"] > 0 and row["consume_entries_per_s"] > 0, row
    assert row["msgs_per_entry"] == round(messages / entries, 2), row


def _positive(value: Any) -> bool:
    return isinstance(value, int | float) and math.isfinite(value) and value > 0


def _cpu_figures_are_sane(row: dict[str, Any], clients: int) -> None:
    """The row's broker CPU per message and the client figures the check is made of."""
    assert row["clients"] == clients, row
    assert _positive(row["server_cpu_s_per_million"]), row
    for phase in ("produce", "consume"):
        assert _positive(row[f"server_cpu_cores_{phase}"]), row
        assert _positive(row[f"client_process_cores_max_{phase}"]), row
        # one of the process's threads, read inside the process's window (slack: rounding)
        thread = row[f"client_thread_cores_max_{phase}"]
        assert 0 <= thread <= row[f"client_process_cores_max_{phase}"] + 0.01, row
        assert row["paced_by"][phase] in {"client", "server", "cores", "latency"}, row
    # the two phases' CPU per message add up to the row's
    produce, consume = (
        row["server_cpu_s_per_million_produce"],
        row["server_cpu_s_per_million_consume"],
    )
    assert math.isclose(produce + consume, row["server_cpu_s_per_million"], abs_tol=0.002), row


@pytest.mark.skipif(find_pulsar_lite() is None, reason="pulsar-lite (the reference) not installed")
def test_bench_wire_quick_measures_brokerlab_and_pulsar_lite_batched_and_not() -> None:
    completed = subprocess.run(
        [sys.executable, "-m", "broker.cli", "bench", "wire", "--quick", "--json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert completed.stdout, completed.stderr[-3000:]
    result = json.loads(completed.stdout)
    assert result["bench"] == "wire" and result["quick"] is True
    config = result["config"]
    assert config["host"] == "127.0.0.1"
    assert config["message_bytes"] == 1024
    messages = config["messages_per_row"]
    clients = config["clients"]
    assert clients >= 2  # several client processes drive each server

    rows = {(row["server"], row["batching"]): row for row in result["rows"]}
    assert set(rows) == {
        ("brokerlab", True),
        ("brokerlab", False),
        ("brokerlab-dedup", True),
        ("brokerlab-dedup", False),
        ("reference", True),
        ("reference", False),
    }
    for batching in (True, False):
        _measured_row_is_consistent(rows[("reference", batching)], messages)
        _cpu_figures_are_sane(rows[("reference", batching)], clients)
    assert result["servers"]["reference"]["available"] is True
    assert result["servers"]["reference"]["service_url"].startswith("pulsar://127.0.0.1:")
    assert result["target_ratio"] == 0.8

    assert completed.returncode == 0, completed.stderr[-3000:]
    assert result["servers"]["brokerlab"]["available"] is True
    assert result["servers"]["brokerlab"]["service_url"].startswith("pulsar://127.0.0.1:")
    for batching in (True, False):
        _measured_row_is_consistent(rows[("brokerlab", batching)], messages)
        _cpu_figures_are_sane(rows[("brokerlab", batching)], clients)
        ours, theirs = rows[("brokerlab", batching)], rows[("reference", batching)]
        ratios = result["ratios"][f"batching_{'on' if batching else 'off'}"]
        for phase in ("produce", "consume"):
            key = f"{phase}_msgs_per_s"
            assert ratios[phase] == round(ours[key] / theirs[key], 4)
        # deduplication's cost: the same rows with brokerDeduplicationEnabled=true
        deduplicating = rows[("brokerlab-dedup", batching)]
        _measured_row_is_consistent(deduplicating, messages)
        cost = result["deduplication_cost"][f"batching_{'on' if batching else 'off'}"]
        for phase in ("produce", "consume"):
            key = f"{phase}_msgs_per_s"
            assert cost[phase] == round(deduplicating[key] / ours[key], 4)
    assert result["servers"]["brokerlab-dedup"]["available"] is True
    assert result["produce_ratio"] == result["ratios"]["batching_on"]["produce"]
    assert result["consume_ratio"] == result["ratios"]["batching_on"]["consume"]
    assert isinstance(result["meets_target"], bool)  # reported, never required

    # broker CPU per message, brokerlab / pulsar-lite, in the same run: both printed
    cpu_ratios = result["cpu_per_message_ratios"]
    table = wire.format_table(result)  # what the bench prints without --json
    for mode, batching in (("batched", True), ("unbatched", False)):
        ours, theirs = rows[("brokerlab", batching)], rows[("reference", batching)]
        expected = round(ours["server_cpu_s_per_million"] / theirs["server_cpu_s_per_million"], 4)
        assert cpu_ratios[mode] == expected and _positive(cpu_ratios[mode])
        assert f"broker CPU per message, brokerlab / pulsar-lite ({mode}): " in table
        line = next(
            text
            for text in table.splitlines()
            if text.startswith(f"broker CPU per message, brokerlab / pulsar-lite ({mode}): ")
        )
        assert float(line.rpartition(": ")[2]) == round(cpu_ratios[mode], 2)
    assert isinstance(result["meets_cpu_target"], bool)  # reported, never required
    # what each server spends with no work, and the ratios net of it, are reported too
    idle = result["idle_cpu_cores"]
    assert set(idle) == {"brokerlab", "brokerlab-dedup", "reference"}
    assert all(math.isfinite(cores) and cores >= 0 for cores in idle.values())
    assert set(result["cpu_per_message_ratios_net_of_idle"]) == {"batched", "unbatched"}

    # whether a client process set the pace: answered, with the figures it rests on
    check = result["client_check"]
    assert isinstance(check["client_not_bottleneck"], bool)
    assert _positive(check["busiest_process_cores"])
    assert check["busiest_process_cores"] == max(
        row[f"client_process_cores_max_{phase}"]
        for row in result["rows"]
        for phase in ("produce", "consume")
    )
    assert (check["client_bound"] == []) == check["client_not_bottleneck"]
    check_lines = [text for text in table.splitlines() if text.startswith("client check: ")]
    assert len(check_lines) == 1
    verdict = "is not the bottleneck" if check["client_not_bottleneck"] else "CLIENT-BOUND"
    assert verdict in check_lines[0] and f"{check['busiest_process_cores']:.2f}" in check_lines[0]


def _fake_brokerlab(tmp_path: pathlib.Path, *lines: str) -> BrokerlabServer:
    """A BrokerlabServer whose child prints ``lines`` and then waits to be stopped."""
    server = BrokerlabServer(tmp_path)
    script = "import sys, time\n" + "".join(f"print({line!r}, flush=True)\n" for line in lines)
    server.argv = [sys.executable, "-c", script + "time.sleep(60)\n"]
    return server


async def test_a_brokerlab_that_speaks_no_binary_protocol_is_reported_unavailable(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(wire, "BINARY_LINE_GRACE_S", 0.2)
    server = _fake_brokerlab(
        tmp_path, "brokerlab listening on http://127.0.0.1:8080 (data: d, sync: none)"
    )
    try:
        with pytest.raises(wire.ServerUnavailable, match="no binary protocol"):
            await server.start()
    finally:
        await server.stop()


async def test_brokerlab_is_ready_once_it_printed_its_http_and_binary_protocol_lines(
    tmp_path: pathlib.Path,
) -> None:
    server = _fake_brokerlab(
        tmp_path,
        "brokerlab binary protocol on pulsar://127.0.0.1:6650",
        "brokerlab listening on http://127.0.0.1:8080 (data: d, sync: none)",
    )
    try:
        assert await server.start() == "pulsar://127.0.0.1:6650"
        assert server.url == "http://127.0.0.1:8080"
    finally:
        await server.stop()


def _figures(specs: list[wire.ClientSpec]) -> dict[str, Any]:
    spent = {"wall_s": 0.5, "cpu_s": 0.1, "thread_cpu_s": 0.05}
    figures: dict[str, Any] = {"messages": sum(spec.messages for spec in specs)}
    figures["received"] = figures["messages"]
    for phase in ("produce", "consume"):
        figures[f"{phase}_s"] = 0.5
        for kind in ("server_cpu", "loop_cpu", "machine_busy"):
            figures[f"{kind}_{phase}_s"] = 0.2
    figures["clients"] = [{"produce": spent, "consume": spent} for _ in specs]
    return figures


@pytest.mark.parametrize("reference", [True, False])
async def test_a_failed_slice_is_run_again_once_on_pulsar_lite_only(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, reference: bool
) -> None:
    topics: list[list[str]] = []

    async def fails_once(_server: Any, specs: list[wire.ClientSpec], what: str) -> dict[str, Any]:
        topics.append([spec.topic for spec in specs])
        if len(topics) == 1:
            raise wire.BenchError(f"{what}: client exited with code 1\nconsumer stalled")
        return _figures(specs)

    async def no_count(*_args: Any) -> None:
        return None

    monkeypatch.setattr(wire, "run_clients", fails_once)
    monkeypatch.setattr(wire, "reference_entries_written", no_count)
    monkeypatch.setattr(wire, "brokerlab_entries", no_count)
    server: wire.WireServer
    if reference:
        server = wire.ReferenceServer(tmp_path / "pulsar-lite", tmp_path)
    else:
        server = BrokerlabServer(tmp_path)
    row = wire.Row("reference" if reference else "brokerlab", batching=True)
    await wire._run_slice(None, wire.QUICK, server, row, 0, 10)  # type: ignore[arg-type]
    if reference:  # run again on fresh topics; the retry is reported, the row measured
        assert len(topics) == 2 and not set(topics[0]) & set(topics[1])
        assert row.error is None and row.messages == 10
        assert row.retries == ["round 0: consumer stalled"]
        assert row.report(2)["retries"] == row.retries
    else:  # brokerlab's failure is reported, never hidden by a second try
        assert len(topics) == 1
        assert row.error is not None and "consumer stalled" in row.error
        assert row.retries == []


async def test_a_client_that_fails_ends_the_slice_and_its_fellow_clients(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The failing client's reason is raised, and the other client process (still trying
    to reach a server that is not there) is stopped rather than waited for."""
    started: list[wire.ClientProcess] = []
    start = wire.ClientProcess.start

    async def recorded(self: wire.ClientProcess) -> None:
        started.append(self)
        await start(self)

    monkeypatch.setattr(wire.ClientProcess, "start", recorded)
    common = {
        "service_url": "pulsar://127.0.0.1:1",  # nothing listens there
        "topic": "persistent://public/default/t",
        "batching": False,
        "messages": 10,
        "max_pending_messages": 10,
        "receiver_queue_size": 10,
        "subscription_type": "Shared",
    }
    specs = [
        wire.ClientSpec(message_bytes=4, **common),  # fails at once: below 8 bytes
        wire.ClientSpec(message_bytes=1024, **common),
    ]
    server = wire.ReferenceServer(tmp_path / "pulsar-lite", tmp_path)
    with pytest.raises(wire.BenchError, match="8-byte sequence number"):
        await wire.run_clients(server, specs, "test")
    assert len(started) == 2
    for client in started:
        assert client.process is not None and client.process.returncode is not None
