"""The brokerlab command: unbuilt subcommands say so, bad configuration stops start-up
with file, line and key named, the self-check passes end to end."""

from __future__ import annotations

import pathlib

import pytest

from tests.harness import brokerlab


def test_analyze_without_a_trace_says_so_with_exit_2(tmp_path: pathlib.Path) -> None:
    result = brokerlab("analyze", str(tmp_path), "--out", str(tmp_path / "out"))
    assert result.returncode == 2
    assert "no trace-*.parquet files" in result.stderr


@pytest.mark.parametrize("command", ["loadgen", "compare"])
def test_loadgen_and_compare_need_a_scenario(command: str) -> None:
    result = brokerlab(command)
    assert result.returncode == 2
    assert "--scenario" in result.stderr


def test_unknown_key_stops_start_up_naming_file_line_and_key(tmp_path: pathlib.Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text("# mine\nwebServicePort=0\nmanagedLedgerCacheSizeMb=10\n")
    result = brokerlab("serve", "--config", str(conf), "--data-dir", str(tmp_path / "d"))
    assert result.returncode == 2
    assert f"{conf}:3" in result.stderr
    assert "managedLedgerCacheSizeMb" in result.stderr
    assert not (tmp_path / "d").exists(), "nothing is created before the config is valid"


def test_bad_value_stops_start_up_naming_file_line_and_key(tmp_path: pathlib.Path) -> None:
    conf = tmp_path / "storage.conf"
    conf.write_text("syncMode=sometimes\n")
    result = brokerlab("serve", "--storage-config", str(conf), "--data-dir", str(tmp_path / "d"))
    assert result.returncode == 2
    assert f"{conf}:1" in result.stderr and "syncMode" in result.stderr


@pytest.mark.slow
def test_self_check_produces_consumes_restarts_and_verifies(tmp_path: pathlib.Path) -> None:
    result = brokerlab("serve", "--self-check")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "redelivered 1000 unacked in order: OK" in result.stdout
