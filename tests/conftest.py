"""Shared harness: a real broker on a real port, in-process or as a subprocess."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import pathlib
import signal
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from broker.bench.http import child_pids
from broker.config import load_broker_config, load_storage_config
from broker.http.app import Settings, create_app
from broker.http.listener import LimitedTCPSite, http_runner

ROOT = pathlib.Path(__file__).resolve().parent.parent
CONF = ROOT / "conf"
STARTUP_DEADLINE_S = 60.0


def b64(data: bytes | str) -> str:
    raw = data.encode() if isinstance(data, str) else data
    return base64.b64encode(raw).decode()


def unb64(text: str) -> bytes:
    return base64.b64decode(text)


class Client:
    """A thin JSON client of the brokerlab HTTP contract."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url
        self.session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60))

    async def close(self) -> None:
        await self.session.close()

    async def request(
        self,
        method: str,
        path: str,
        json: Any = None,
        data: bytes | str | None = None,
        **params: Any,
    ) -> tuple[int, Any]:
        async with self.session.request(
            method, self.base_url + path, json=json, data=data, params=params or None
        ) as response:
            body = await response.read()
            if response.content_type == "application/json" and body:
                return response.status, await response.json()
            return response.status, body.decode(errors="replace")

    async def produce(self, topic: str, payloads: list[str], **fields: Any) -> list[str]:
        messages = [{"payload": b64(p), **fields} for p in payloads]
        status, body = await self.request(
            "POST", f"/topics/persistent/{topic}", json={"messages": messages}
        )
        assert status == 200, body
        return [result["messageId"] for result in body["messagePublishResults"]]

    async def subscribe(self, topic: str, subscription: str, **options: Any) -> str:
        status, body = await self.request(
            "POST", f"/consumers/persistent/{topic}/{subscription}", json=options
        )
        assert status == 200, body
        return str(body["consumerId"])

    async def receive(
        self, consumer_id: str, max_messages: int = 100, timeout_ms: int = 200
    ) -> list[dict[str, Any]]:
        status, body = await self.request(
            "GET",
            f"/consumers/{consumer_id}/messages",
            maxMessages=max_messages,
            timeoutMs=timeout_ms,
        )
        assert status == 200, body
        return list(body["messages"])

    async def receive_until(
        self, consumer_id: str, count: int, deadline_s: float = 20.0
    ) -> list[dict[str, Any]]:
        """Poll until ``count`` messages arrived (or the deadline passed)."""
        got: list[dict[str, Any]] = []
        loop = asyncio.get_running_loop()
        end = loop.time() + deadline_s
        while len(got) < count and loop.time() < end:
            got += await self.receive(consumer_id, min(1000, count - len(got)), 500)
        return got

    async def ack(self, consumer_id: str, ids: list[str], ack_type: str = "Individual") -> None:
        status, body = await self.request(
            "POST", f"/consumers/{consumer_id}/ack", json={"messageIds": ids, "ackType": ack_type}
        )
        assert status == 204, body

    async def stats(self, topic: str) -> dict[str, Any]:
        status, body = await self.request("GET", f"/admin/v2/persistent/{topic}/stats")
        assert status == 200, body
        return dict(body)

    async def internal_stats(self, topic: str) -> dict[str, Any]:
        status, body = await self.request("GET", f"/admin/v2/persistent/{topic}/internalStats")
        assert status == 200, body
        return dict(body)


def make_settings(
    data_dir: pathlib.Path | None, storage: dict[str, Any] | None = None, **broker: Any
) -> Settings:
    """Settings from the shipped conf files with overrides; in-memory storage unless a
    data dir is given."""
    storage_overrides = {"storageMode": "memory"} if data_dir is None else {}
    storage_overrides.update(storage or {})
    # No codec processes unless a test asks: one per served broker would cost each test
    # a Python start; tests/http/test_codec.py covers them.
    broker = {"httpCodecProcesses": 0, **broker}
    return Settings(
        broker=load_broker_config(
            CONF / "broker.conf", {"webServicePort": 0, "brokerServicePort": 0, **broker}
        ),
        storage=load_storage_config(CONF / "storage.conf", storage_overrides),
        data_dir=data_dir,
    )


async def served(settings: Settings) -> web.AppRunner:
    """The broker of ``settings`` served as ``brokerlab serve`` serves it, with the
    listener's limits and timeouts, on the configured address and port (0: a free one)."""
    runner = http_runner(create_app(settings), settings.broker)
    await runner.setup()
    await LimitedTCPSite.for_config(runner, settings.broker).start()
    return runner


@contextlib.asynccontextmanager
async def in_process_broker(
    data_dir: pathlib.Path | None = None, storage: dict[str, Any] | None = None, **broker: Any
) -> AsyncIterator[Client]:
    """One in-process broker on a real port, stopped cleanly (files closed) on exit."""
    runner = await served(make_settings(data_dir, storage, **broker))
    client = Client(f"http://127.0.0.1:{runner.addresses[0][1]}")
    try:
        yield client
    finally:
        await client.close()
        await runner.cleanup()


LiveBroker = Callable[..., Awaitable[Client]]


@pytest.fixture
async def live_broker() -> AsyncIterator[LiveBroker]:
    """Start in-process brokers (in-memory storage unless a data dir is given) on real
    ports; each call returns a client; ``storage`` overrides storage.conf keys. All are
    stopped at the end."""
    runners: list[web.AppRunner] = []
    clients: list[Client] = []

    async def start(
        data_dir: pathlib.Path | None = None, storage: dict[str, Any] | None = None, **broker: Any
    ) -> Client:
        runner = await served(make_settings(data_dir, storage, **broker))
        runners.append(runner)
        port = runner.addresses[0][1]
        client = Client(f"http://127.0.0.1:{port}")
        clients.append(client)
        return client

    yield start
    for client in clients:
        await client.close()
    for runner in runners:
        await runner.cleanup()


def child_processes(pid: int, command_part: str) -> list[int]:
    """``pid``'s live child processes whose command line holds ``command_part``."""
    found = []
    for child in child_pids(pid):
        with contextlib.suppress(OSError), open(f"/proc/{child}/cmdline", "rb") as cmdline:
            if command_part.encode() in cmdline.read():
                found.append(child)
    return found


class BrokerProcess:
    """``brokerlab serve`` as a child process over a data dir that outlives it."""

    def __init__(self, data_dir: pathlib.Path, args: list[str]) -> None:
        self.data_dir = data_dir
        self.args = args
        self.process: asyncio.subprocess.Process | None = None
        self.output: list[str] = []
        self._drain: asyncio.Task[None] | None = None
        self.client: Client | None = None

    async def start(self) -> Client:
        self.process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "broker.cli",
            "serve",
            "--port",
            "0",
            "--broker-port",
            "-1",
            "--data-dir",
            str(self.data_dir),
            "--config",
            str(CONF / "broker.conf"),
            "--storage-config",
            str(CONF / "storage.conf"),
            *self.args,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            cwd=str(ROOT),
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        assert self.process.stdout is not None
        loop = asyncio.get_running_loop()
        end = loop.time() + STARTUP_DEADLINE_S
        while True:
            line = await asyncio.wait_for(self.process.stdout.readline(), end - loop.time())
            if not line:
                raise RuntimeError("broker exited during start:\n" + "".join(self.output))
            text = line.decode(errors="replace")
            self.output.append(text)
            if text.startswith("brokerlab listening on "):
                url = text.split()[3]
                break
        self._drain = asyncio.create_task(self._drain_output())
        self.client = Client(url)
        return self.client

    async def _drain_output(self) -> None:
        assert self.process is not None and self.process.stdout is not None
        while line := await self.process.stdout.readline():
            self.output.append(line.decode(errors="replace"))

    async def _finish(self, signum: int) -> int:
        assert self.process is not None
        if self.process.returncode is None:
            self.process.send_signal(signum)
        code = await asyncio.wait_for(self.process.wait(), 60)
        if self._drain is not None:
            await self._drain
        if self.client is not None:
            await self.client.close()
            self.client = None
        return code

    async def stop(self) -> int:
        """Graceful stop (SIGTERM, as Ctrl-C would): returns the exit code."""
        return await self._finish(signal.SIGTERM)

    async def kill(self) -> None:
        """SIGKILL: no chance to flush or close anything."""
        await self._finish(signal.SIGKILL)

    async def exit_code_after_killing(self, command_part: str) -> int:
        """SIGKILL the broker's one child process whose command line holds
        ``command_part``, and return the broker's exit code once it has stopped."""
        assert self.process is not None
        (child,) = child_processes(self.process.pid, command_part)
        os.kill(child, signal.SIGKILL)
        code = await asyncio.wait_for(self.process.wait(), 60)
        await self._finish(signal.SIGTERM)  # collects the output; the process is gone
        return code


BrokerProcessFactory = Callable[..., BrokerProcess]


@pytest.fixture
async def broker_process(tmp_path: pathlib.Path) -> AsyncIterator[BrokerProcessFactory]:
    """Make broker processes over data dirs under tmp_path; all are killed at the end."""
    made: list[BrokerProcess] = []

    def make(*args: str, data_dir: pathlib.Path | None = None) -> BrokerProcess:
        process = BrokerProcess(data_dir or tmp_path / "data", list(args))
        made.append(process)
        return process

    yield make
    for process in made:
        if process.process is not None and process.process.returncode is None:
            await process.kill()
