"""``brokerlab analyze`` on a machine without Java: one line saying to install Java 17 or
set JAVA_HOME, exit 2, no gateway traceback (the real command, with a PATH and JAVA_HOME
that lead to no java)."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
from typing import Any

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def analyze_without_java(
    trace: pathlib.Path, out: pathlib.Path, path: pathlib.Path, java_home: str | None
) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if key != "JAVA_HOME"}
    env["PATH"] = str(path)
    if java_home is not None:
        env["JAVA_HOME"] = java_home
    return subprocess.run(
        [sys.executable, "-m", "broker.cli", "analyze", str(trace), "--out", str(out),
         "--master", "local[2]"],
        capture_output=True, text=True, timeout=300, cwd=ROOT, env=env,
    )  # fmt: skip


@pytest.mark.parametrize("java_home", [None, "missing"])
def test_analyze_without_java_says_to_install_java_17_in_one_line(
    recorded: tuple[pathlib.Path, dict[str, Any]], tmp_path: pathlib.Path, java_home: str | None
) -> None:
    trace, _ = recorded
    empty = tmp_path / "bin"
    empty.mkdir()
    home = None if java_home is None else str(tmp_path / "no-jdk")
    result = analyze_without_java(trace, tmp_path / "out", empty, home)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr and "JAVA_GATEWAY" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert "Java 17" in lines[0] and "JAVA_HOME" in lines[0]
    if home is not None:
        assert home in lines[0]
    assert not (tmp_path / "out").exists()
