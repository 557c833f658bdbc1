"""A real ``brokerlab serve`` process for the official Pulsar client to talk to.

The client (C++ core, blocking calls) runs in the test process; the broker runs in its
own process, so a blocking ``receive`` never stalls the broker's event loop.
"""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
CONF = ROOT / "conf"
START_DEADLINE_S = 60.0


class ServedBroker:
    """``brokerlab serve`` on free ports over ``data_dir``; restartable."""

    def __init__(self, data_dir: pathlib.Path, sets: dict[str, object]) -> None:
        self.data_dir = data_dir
        self.sets = sets
        self.process: subprocess.Popen[bytes] | None = None
        self.http_url = ""
        self.service_url = ""
        self.output: list[str] = []
        self._reader: threading.Thread | None = None
        self._broker_port = -1

    def start(self) -> ServedBroker:
        command = [sys.executable, "-m", "broker.cli", "serve", "--port", "0"]
        # a restart keeps its binary port, so clients reconnect as to a restarted Pulsar
        command += ["--broker-port", str(self._broker_port), "--data-dir", str(self.data_dir)]
        command += ["--config", str(CONF / "broker.conf")]
        command += ["--storage-config", str(CONF / "storage.conf")]
        for key, value in self.sets.items():
            flag = "--storage-set" if key == "syncMode" else "--set"
            command += [flag, f"{key}={str(value).lower() if isinstance(value, bool) else value}"]
        self.process = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            cwd=str(ROOT),
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        assert self.process.stdout is not None
        deadline = time.monotonic() + START_DEADLINE_S
        self.http_url = self.service_url = ""
        while not (self.http_url and self.service_url):
            if time.monotonic() > deadline:
                raise RuntimeError("broker did not start:\n" + "".join(self.output))
            line = self.process.stdout.readline().decode(errors="replace")
            if not line:
                raise RuntimeError("broker exited during start:\n" + "".join(self.output))
            self.output.append(line)
            if line.startswith("brokerlab listening on "):
                self.http_url = line.split()[3]
            elif line.startswith("brokerlab binary protocol on "):
                self.service_url = line.split()[4]
        self._broker_port = int(self.service_url.rsplit(":", 1)[1])
        self._reader = threading.Thread(target=self._drain, daemon=True)
        self._reader.start()
        return self

    def _drain(self) -> None:
        assert self.process is not None and self.process.stdout is not None
        for line in self.process.stdout:
            self.output.append(line.decode(errors="replace"))

    def stop(self, signum: int = signal.SIGTERM) -> int:
        assert self.process is not None
        if self.process.poll() is None:
            self.process.send_signal(signum)
        code = self.process.wait(60)
        if self._reader is not None:
            self._reader.join(10)
        return code

    def kill(self) -> None:
        self.stop(signal.SIGKILL)

    def http(
        self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None
    ) -> Any:
        """One admin request (with these extra headers); the JSON answer (None for 204)."""
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            self.http_url + path,
            data=data,
            method=method,
            headers={
                **({"Content-Type": "application/json"} if data is not None else {}),
                **(headers or {}),
            },
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            raw = response.read()
        return json.loads(raw) if raw else None

    def log(self) -> str:
        return "".join(self.output)


BrokerFactory = Callable[..., ServedBroker]


@pytest.fixture
def pulsar_broker(tmp_path: pathlib.Path) -> Iterator[BrokerFactory]:
    """Start brokers (``broker.conf``/``storage.conf`` keys as keyword arguments, e.g.
    ``syncMode="always"``); all are stopped at the end."""
    made: list[ServedBroker] = []

    def start(**sets: object) -> ServedBroker:
        broker = ServedBroker(tmp_path / f"data{len(made)}", sets).start()
        made.append(broker)
        return broker

    yield start
    for broker in made:
        if broker.process is not None and broker.process.poll() is None:
            broker.kill()


def poll_until(condition: Callable[[], Any], what: str, deadline_s: float = 30.0) -> Any:
    """Poll ``condition`` until it returns something truthy; fail with ``what`` after
    the deadline. Never a fixed sleep: it returns as soon as the condition holds."""
    end = time.monotonic() + deadline_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)
