"""Brokers the load generator starts, forked from a warm interpreter in the tests.

``loadgen.broker_process.BrokerProcess`` runs ``python -m broker.cli serve ...``: a
fresh interpreter spends seconds of CPU importing aiohttp, pydantic, protobuf and the
broker before it serves, and the load generator's tests start brokers dozens of times
(every run, every restart event). :class:`LazyForkServer` asks the integration tests' fork
server (``tests/integration/forkserver.py``) for the same command instead, started on the
first broker a worker needs: a real process over the same data dir and ports, with its
output on a pipe, stopped by SIGTERM and killed by SIGKILL as before.
``BROKERLAB_TEST_EXEC_BROKERS=1`` keeps the fresh interpreters.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys

import pytest

import loadgen.broker_process
from loadgen.broker_process import BrokerChild, exec_command
from tests.harness import STARTUP_DEADLINE_S
from tests.harness import BrokerChild as HarnessChild
from tests.integration.forkserver import ForkServer

EXEC_BROKERS = os.environ.get("BROKERLAB_TEST_EXEC_BROKERS") == "1"
#: what the load generator's command starts with before brokerlab's own arguments
PREFIX = [sys.executable, "-m", "broker.cli"]


class ForkedBroker:
    """A forked broker as ``BrokerProcess`` sees an ``asyncio.subprocess.Process``. Its
    exit status arrives on the fork server's status pipe (``exit <code>``)."""

    def __init__(self, pid: int, stdout: asyncio.StreamReader, status: asyncio.StreamReader):
        self.pid = pid
        self.stdout: asyncio.StreamReader | None = stdout
        self.returncode: int | None = None
        self._exited = asyncio.get_running_loop().create_task(self._watch(status))

    async def _watch(self, status: asyncio.StreamReader) -> None:
        line = await status.readline()
        # no line: the fork server is gone without saying; count it as killed
        self.returncode = int(line.split()[1]) if line.startswith(b"exit ") else -9

    async def wait(self) -> int:
        await asyncio.shield(self._exited)
        assert self.returncode is not None
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


async def _reader(fd: int) -> asyncio.StreamReader:
    """An asyncio reader of the pipe's read end ``fd`` (closed with the transport)."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(loop=loop)
    protocol = asyncio.StreamReaderProtocol(reader, loop=loop)
    await loop.connect_read_pipe(lambda: protocol, os.fdopen(fd, "rb", buffering=0))
    return reader


class LazyForkServer:
    """One fork server per test process (xdist worker), started by the first broker."""

    def __init__(self) -> None:
        self._server: ForkServer | None = None

    @property
    def server(self) -> ForkServer:
        if self._server is None:
            self._server = ForkServer()
        return self._server

    def spawn(self, argv: list[str]) -> HarnessChild:
        """``brokerlab *argv`` for the harness's ``ServedBroker`` (its ``Spawn``)."""
        return self.server.spawn(argv)

    async def launch(self, command: list[str]) -> BrokerChild:
        """``command`` (``python -m broker.cli ...``) for the load generator's
        ``BrokerProcess`` (its ``launcher``); a command that is not brokerlab's (a test's
        stand-in broker) runs as it would without the tests' launcher."""
        if command[:3] != PREFIX:
            return await exec_command(command)
        output, status = self.server.fork(command[3:])
        try:
            status_reader = await _reader(status)
        except BaseException:
            os.close(output)
            os.close(status)
            raise
        try:
            stdout = await _reader(output)
        except BaseException:
            os.close(output)
            raise
        pid = await asyncio.wait_for(status_reader.readline(), STARTUP_DEADLINE_S)
        if not pid:
            raise RuntimeError("the fork server did not start a broker")
        return ForkedBroker(int(pid), stdout, status_reader)

    def close(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None


# The fixture of the directories whose load generator starts brokers (their conftest.py
# imports it); the fork server is the root conftest's ``lazy_fork_server``, one per worker.


@pytest.fixture(autouse=True)
def forked_loadgen_brokers(
    lazy_fork_server: LazyForkServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The load generator's brokers are started by the fork server."""
    if not EXEC_BROKERS:
        monkeypatch.setattr(loadgen.broker_process, "launcher", lazy_fork_server.launch)
