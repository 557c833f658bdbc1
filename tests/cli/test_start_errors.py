"""What a newcomer at the terminal reads when ``brokerlab serve`` cannot start: one or two
lines with the cause and the fix, a non-zero exit, never a traceback. Each runs the real
command in a fresh interpreter."""

from __future__ import annotations

import importlib.metadata
import pathlib
import signal
import socket
import subprocess
from collections.abc import Iterator

import pytest

from tests.harness import CONF, ServedBroker, Spawn, brokerlab


def serve(data_dir: pathlib.Path, *args: str) -> subprocess.CompletedProcess[str]:
    return brokerlab(
        "serve",
        "--data-dir",
        str(data_dir),
        "--config",
        str(CONF / "broker.conf"),
        "--storage-config",
        str(CONF / "storage.conf"),
        *args,
    )


def assert_told_briefly(result: subprocess.CompletedProcess[str]) -> list[str]:
    """A failure said in one or two lines on stderr: the lines."""
    assert result.returncode != 0, result.stdout + result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert 1 <= len(lines) <= 2, result.stderr
    return lines


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A port something else listens on."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        yield holder.getsockname()[1]


def test_serve_on_a_taken_http_port_names_the_port_and_the_setting(
    tmp_path: pathlib.Path, taken_port: int
) -> None:
    result = serve(tmp_path / "data", "--port", str(taken_port), "--broker-port", "0")
    lines = assert_told_briefly(result)
    assert f"port {taken_port} is already in use (webServicePort)" in lines[0]
    assert "--port PORT" in result.stderr and "webServicePort=PORT" in result.stderr


def test_serve_on_a_taken_binary_port_names_the_port_and_the_setting(
    tmp_path: pathlib.Path, taken_port: int
) -> None:
    result = serve(tmp_path / "data", "--port", "0", "--broker-port", str(taken_port))
    assert_told_briefly(result)
    assert f"port {taken_port} is already in use (brokerServicePort)" in result.stderr
    assert "--broker-port PORT" in result.stderr


def held_after_a_free_port() -> tuple[socket.socket, int]:
    """A listening socket on port P + 1, and P, free when looked at."""
    for _ in range(50):
        holder = socket.socket()
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        below = holder.getsockname()[1] - 1
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", below))
            except OSError:
                holder.close()
                continue
        return holder, below
    raise AssertionError("no free port below a free one")


def test_a_second_broker_of_a_cluster_on_a_taken_port_says_which_broker(
    tmp_path: pathlib.Path,
) -> None:
    holder, base = held_after_a_free_port()
    taken_port = base + 1
    with holder:
        # broker 1 of --brokers 2 listens on the given port + 1
        result = serve(
            tmp_path / "data", "--brokers", "2", "--port", "0", "--broker-port", str(base)
        )
    assert_told_briefly(result)
    assert f"port {taken_port} is already in use (brokerServicePort of broker 1" in result.stderr


def test_serve_on_a_data_directory_another_broker_holds_names_that_process(
    tmp_path: pathlib.Path, broker_spawn: Spawn | None
) -> None:
    # the broker holding the directory is the harness's (forked); the one refused is
    # the real command
    first = ServedBroker(tmp_path / "data", spawn=broker_spawn)
    first.start()
    try:
        assert first.process is not None
        result = serve(tmp_path / "data", "--port", "0", "--broker-port", "0")
        lines = assert_told_briefly(result)
        assert f"in use by process {first.process.pid}" in lines[0]
        assert "--data-dir" in result.stderr
    finally:
        first.stop(signal.SIGTERM)
    # once it is gone the directory is free again (its pid left in the file is ignored):
    # start() raises if the broker exits before it listens
    again = ServedBroker(tmp_path / "data", spawn=broker_spawn)
    again.start()
    again.stop(signal.SIGTERM)


def test_version_is_the_installed_package_s() -> None:
    result = brokerlab("--version")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"brokerlab {importlib.metadata.version('brokerlab')} ")
    assert "protocol v19" in result.stdout
