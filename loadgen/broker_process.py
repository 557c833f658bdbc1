"""A broker of the load generator's own: ``brokerlab serve`` in a subprocess on an
ephemeral port over a data directory, restartable on the same ports and data (the
``restart`` event), stopped gracefully (SIGTERM) at the end. With ``brokers`` > 1 the
process runs a cluster (``--brokers N``): one HTTP and one binary line per broker, and
``urls`` lists the brokers' HTTP bases in index order.

The broker is started as a program, not imported: the load generator speaks HTTP to it,
and the pulsar driver its binary protocol, whose address the broker prints on a line of
its own (``brokerlab binary protocol on pulsar://HOST:PORT``), before or after the HTTP
one. Its output goes to ``broker.log`` in the data directory's parent run directory.
"""

from __future__ import annotations

import asyncio
import contextlib
import pathlib
import re
import signal
import sys
import time
from collections.abc import Awaitable, Callable
from typing import BinaryIO, Protocol

LISTENING = re.compile(rb"brokerlab listening on (http://\S+)")
BINARY_PROTOCOL = re.compile(rb"brokerlab binary protocol on (pulsar://\S+)")
#: the longest output line scanned for the binary protocol's address
LINE_LIMIT = 4096
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0


class BrokerChild(Protocol):
    """What :class:`BrokerProcess` uses of its child: an ``asyncio.subprocess.Process``
    or anything that behaves as one (output on ``stdout``)."""

    @property
    def stdout(self) -> asyncio.StreamReader | None: ...
    @property
    def returncode(self) -> int | None: ...
    async def wait(self) -> int: ...
    def send_signal(self, sig: int) -> None: ...
    def kill(self) -> None: ...


#: starts ``command`` (``python -m broker.cli serve ...``) with stdout and stderr on one
#: pipe and stdin from /dev/null
Launcher = Callable[[list[str]], Awaitable[BrokerChild]]


async def exec_command(command: list[str]) -> BrokerChild:
    """The default :data:`Launcher`: a fresh interpreter running ``command``."""
    return await asyncio.create_subprocess_exec(
        *command,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        stdin=asyncio.subprocess.DEVNULL,
    )


#: how every BrokerProcess starts its child. The test suite swaps in a launcher that forks
#: the same command from an interpreter that has already imported the broker (a fresh one
#: spends seconds of CPU on imports before it serves); the command, its output and the
#: process's life (SIGTERM, SIGKILL, exit status) are the same.
launcher: Launcher = exec_command


class BrokerStartError(Exception):
    """The broker exited or stayed silent instead of listening; carries its output."""


class BrokerProcess:
    """``start()`` returns the base URL; ``restart()`` keeps it; ``stop()`` is idempotent."""

    def __init__(
        self,
        data_dir: pathlib.Path,
        *,
        log_path: pathlib.Path,
        config: pathlib.Path | None = None,
        storage_config: pathlib.Path | None = None,
        overrides: dict[str, object] | None = None,
        storage_overrides: dict[str, object] | None = None,
        host: str = "127.0.0.1",
        brokers: int = 1,
    ) -> None:
        self.brokers = brokers
        #: every broker's HTTP base, by index
        self.urls: list[str] = []
        self._service_urls: dict[int, str] = {}
        self.data_dir = data_dir
        self.log_path = log_path
        self.config = config
        self.storage_config = storage_config
        self.overrides = dict(overrides or {})
        self.storage_overrides = dict(storage_overrides or {})
        self.host = host
        self.port = 0
        self.url = ""
        #: the binary protocol's ``pulsar://HOST:PORT``; "" until (unless) the broker says
        self.service_url = ""
        #: -1: any free port; after a start that printed its address, that port (a restart
        #: keeps it, so clients reconnect to the same address)
        self.broker_port = -1
        self.starts = 0
        self._process: BrokerChild | None = None
        self._pump: asyncio.Task[None] | None = None
        self._service_announced = asyncio.Event()

    def command(self, port: int) -> list[str]:
        broker_port = self.broker_port
        if self.brokers > 1:
            # the brokers take the given ports plus their index, which a restart of the
            # process may find taken: a cluster always starts on free ports
            port, broker_port = 0, -1
        command = [sys.executable, "-m", "broker.cli", "serve", "--host", self.host]
        command += ["--port", str(port), "--data-dir", str(self.data_dir)]
        if self.brokers > 1:
            command += ["--brokers", str(self.brokers)]
        # the binary protocol on any free port (then the same one again on a restart), so a
        # broker never fights for 6650
        command += ["--broker-port", str(broker_port)]
        if self.config is not None:
            command += ["--config", str(self.config)]
        if self.storage_config is not None:
            command += ["--storage-config", str(self.storage_config)]
        for key, value in self.overrides.items():
            command += ["--set", f"{key}={_conf_value(value)}"]
        for key, value in self.storage_overrides.items():
            command += ["--storage-set", f"{key}={_conf_value(value)}"]
        return command

    async def start(self) -> str:
        """Start (on the port of the previous start, if any) and wait until it listens."""
        if self._process is not None:
            raise RuntimeError("the broker is already running")
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.service_url = ""
        self._service_urls = {}
        self._service_announced.clear()
        log = self.log_path.open("ab")
        process = await launcher(self.command(self.port))
        assert process.stdout is not None
        deadline = time.monotonic() + START_TIMEOUT_S
        seen: list[bytes] = []
        urls: list[str] = []
        try:
            while len(urls) < self.brokers:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise BrokerStartError(_describe("did not start listening in time", seen))
                try:
                    line = await asyncio.wait_for(process.stdout.readline(), remaining)
                except TimeoutError:
                    continue
                if not line:
                    await process.wait()
                    raise BrokerStartError(
                        _describe(f"exited with status {process.returncode}", seen)
                    )
                log.write(line)
                seen.append(line)
                self._scan(line)
                match = LISTENING.search(line)
                if match:
                    urls.append(match.group(1).decode())
        except BaseException:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()
            log.close()
            raise
        log.flush()
        self._process = process
        self._pump = asyncio.create_task(self._copy_output(process.stdout, log))
        self.urls = urls
        url = self.url = urls[0]
        self.port = int(url.rsplit(":", 1)[1])
        self.starts += 1
        return url

    async def stop(self, *, kill: bool = False) -> int | None:
        """SIGTERM (or SIGKILL) and wait; returns the exit status."""
        process, self._process = self._process, None
        if process is None:
            return None
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
        try:
            status = await asyncio.wait_for(process.wait(), STOP_TIMEOUT_S)
        except TimeoutError:
            process.kill()
            status = await process.wait()
        if self._pump is not None:
            await self._pump
            self._pump = None
        return status

    async def restart(self) -> str:
        await self.stop()
        return await self.start()

    async def wait_service_url(self, timeout_s: float) -> str:
        """The binary protocol's address, waiting up to ``timeout_s`` for the broker to
        print it (it may come after the HTTP line); "" if it has not."""
        if not self.service_url and self.running:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._service_announced.wait(), timeout_s)
        return self.service_url

    def _scan(self, line: bytes) -> None:
        match = BINARY_PROTOCOL.search(line)
        if match is None:
            return
        url = match.group(1).decode()
        index = len(self._service_urls)
        self._service_urls[index] = url
        if index == 0:
            with contextlib.suppress(ValueError):
                self.broker_port = int(url.rsplit(":", 1)[1].rstrip("/"))
        if len(self._service_urls) < self.brokers:
            return
        # several brokers: one service URL naming them all, as Pulsar clients take it
        hosts = [self._service_urls[i].removeprefix("pulsar://") for i in range(self.brokers)]
        self.service_url = "pulsar://" + ",".join(host.rstrip("/") for host in hosts)
        self._service_announced.set()

    async def _copy_output(self, stream: asyncio.StreamReader, log: BinaryIO) -> None:
        """Copy the broker's output to its log until it closes (so the pipe never fills),
        watching for the binary protocol's address while it has not been seen."""
        partial = b""
        try:
            while True:
                chunk = await stream.read(65536)
                if not chunk:
                    break
                log.write(chunk)
                if self.service_url:
                    continue
                *lines, partial = (partial + chunk).split(b"\n")
                partial = partial[-LINE_LIMIT:]
                for line in lines:
                    self._scan(line)
        finally:
            log.close()

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.returncode is None


def _conf_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _describe(what: str, seen: list[bytes]) -> str:
    tail = b"".join(seen[-20:]).decode("utf-8", "replace").strip()
    return f"brokerlab serve {what}" + (f"; its output:\n{tail}" if tail else "")
