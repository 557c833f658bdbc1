"""Harness for clusters of brokers: a ``brokerlab serve --brokers N`` subprocess for the
official client (whose calls block), and an in-process :class:`~broker.cluster.Cluster`
with one HTTP front end per broker for tests that stop and start brokers directly.

Bundles are computed here independently of ``broker.dispatch.ownership``, as Pulsar
computes them (CRC32 of the full topic name; ``2**32 // n`` wide ranges, the last one
closed at ``0xffffffff``), so a broker that hashes differently fails these tests too.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import pathlib
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pulsar  # type: ignore[import-untyped, unused-ignore]
import pytest
from aiohttp import web

from broker.cluster import Cluster, http_url
from broker.http.app import node_app
from tests.conftest import CONF, ROOT, Client, make_settings

START_DEADLINE_S = 60.0
#: Pulsar's defaultNumberOfNamespaceBundles (conf/broker.conf ships it)
BUNDLES = 4
NAMESPACE = "public/default"

_names = itertools.count()


# ---------------------------------------------------------------------- bundles


def pulsar_bundle(topic: str, bundles: int = BUNDLES) -> str:
    """The bundle Pulsar puts ``topic`` (a full ``persistent://`` name) in:
    NamespaceBundleFactory hashes the name with CRC32, and getBundles(n) cuts
    ``[0, 2**32)`` into ``2**32 // n`` wide ranges, the last one ending at
    ``0xffffffff`` (which it holds too)."""
    size = 2**32 // bundles
    bounds = [index * size for index in range(bundles)] + [0xFFFFFFFF]
    value = zlib.crc32(topic.encode())
    index = min(value // size, bundles - 1)
    return f"0x{bounds[index]:08x}_0x{bounds[index + 1]:08x}"


def topics_in_distinct_bundles(prefix: str, count: int = BUNDLES) -> list[str]:
    """``count`` fresh topic names (full names), each in a bundle of its own."""
    found: dict[str, str] = {}
    for index in itertools.count():
        name = f"persistent://{NAMESPACE}/{prefix}-{next(_names)}-{index}"
        found.setdefault(pulsar_bundle(name), name)
        if len(found) == count:
            return list(found.values())
    raise AssertionError("unreachable")


def topic_in_bundle(prefix: str, bundle: str) -> str:
    """A fresh topic name in ``bundle``."""
    for index in itertools.count():
        name = f"persistent://{NAMESPACE}/{prefix}-{next(_names)}-{index}"
        if pulsar_bundle(name) == bundle:
            return name
    raise AssertionError("unreachable")


def short(topic: str) -> str:
    """``public/default/x`` of ``persistent://public/default/x`` (HTTP paths)."""
    return topic.removeprefix("persistent://")


def bundles_of(brokers: list[dict[str, Any]], index: int) -> list[str]:
    """The bundles broker ``index`` owns, as the brokers listing names them."""
    return list(brokers[index]["bundles"])


def owner_in_listing(brokers: list[dict[str, Any]], bundle: str) -> int | None:
    """The broker whose listing holds ``public/default/<bundle>``, if any."""
    owners = [b["index"] for b in brokers if f"{NAMESPACE}/{bundle}" in b["bundles"]]
    assert len(owners) <= 1, f"bundle {bundle} owned twice: {brokers}"
    return owners[0] if owners else None


def poll_until(condition: Callable[[], Any], what: str, deadline_s: float = 30.0) -> Any:
    """Poll ``condition`` until it returns something truthy (never a fixed sleep)."""
    end = time.monotonic() + deadline_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


async def async_poll_until(
    condition: Callable[[], Awaitable[Any]], what: str, deadline_s: float = 30.0
) -> Any:
    """``poll_until`` for coroutines, yielding to the event loop between looks."""
    loop = asyncio.get_running_loop()
    end = loop.time() + deadline_s
    while True:
        value = await condition()
        if value:
            return value
        if loop.time() > end:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


# ---------------------------------------------------------------------- a served cluster


@dataclass
class Answer:
    """One HTTP answer: status, the JSON body (or text), headers."""

    status: int
    body: Any
    headers: dict[str, str] = field(default_factory=dict)


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None  # the 307 itself is what the tests look at


_opener = urllib.request.build_opener(_NoRedirects)


def http(base: str, method: str, path: str, body: Any = None, timeout: float = 30) -> Answer:
    """One request to ``base``, redirects not followed, error statuses returned."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        base + path,
        data=data,
        method=method,
        headers={"Content-Type": "application/json"} if data is not None else {},
    )
    try:
        with _opener.open(request, timeout=timeout) as response:
            status, raw, headers = response.status, response.read(), dict(response.headers)
    except urllib.error.HTTPError as error:
        status, raw, headers = error.code, error.read(), dict(error.headers)
    try:
        parsed = json.loads(raw) if raw else None
    except ValueError:
        parsed = raw.decode(errors="replace")
    return Answer(status, parsed, headers)


class ServedCluster:
    """``brokerlab serve --brokers N`` on free ports over ``data_dir``."""

    def __init__(
        self, data_dir: pathlib.Path, brokers: int, sets: dict[str, object], storage_sets: dict
    ) -> None:
        self.data_dir = data_dir
        self.brokers = brokers
        self.sets = sets
        self.storage_sets = storage_sets
        self.process: subprocess.Popen[bytes] | None = None
        self.http_urls: list[str] = []
        self.service_urls: list[str] = []
        self.output: list[str] = []
        self._reader: threading.Thread | None = None

    def start(self) -> ServedCluster:
        command = [sys.executable, "-m", "broker.cli", "serve", "--brokers", str(self.brokers)]
        command += ["--port", "0", "--broker-port", "-1", "--data-dir", str(self.data_dir)]
        command += ["--config", str(CONF / "broker.conf")]
        command += ["--storage-config", str(CONF / "storage.conf")]
        for key, value in self.sets.items():
            command += ["--set", f"{key}={value}"]
        for key, value in self.storage_sets.items():
            command += ["--storage-set", f"{key}={value}"]
        self.process = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            cwd=str(ROOT),
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        assert self.process.stdout is not None
        deadline = time.monotonic() + START_DEADLINE_S
        http_urls: dict[int, str] = {}
        service_urls: dict[int, str] = {}
        while len(http_urls) < self.brokers or len(service_urls) < self.brokers:
            if time.monotonic() > deadline:
                raise RuntimeError("the cluster did not start:\n" + self.log())
            line = self.process.stdout.readline().decode(errors="replace")
            if not line:
                raise RuntimeError("the cluster exited during start:\n" + self.log())
            self.output.append(line)
            if line.startswith("brokerlab listening on "):
                # "... (data: d, sync: s, broker i)"
                index = int(line.rstrip().rstrip(")").rsplit(" ", 1)[1])
                http_urls[index] = line.split()[3]
            elif line.startswith("brokerlab binary protocol on "):
                index = int(line.rstrip().rstrip(")").rsplit(" ", 1)[1])
                service_urls[index] = line.split()[4]
        self.http_urls = [http_urls[i] for i in range(self.brokers)]
        self.service_urls = [service_urls[i] for i in range(self.brokers)]
        self._reader = threading.Thread(target=self._drain, daemon=True)
        self._reader.start()
        return self

    def _drain(self) -> None:
        assert self.process is not None and self.process.stdout is not None
        for line in self.process.stdout:
            self.output.append(line.decode(errors="replace"))

    @property
    def service_url(self) -> str:
        """One service URL naming every broker, as Pulsar clients take a cluster's."""
        hosts = [url.removeprefix("pulsar://").rstrip("/") for url in self.service_urls]
        return "pulsar://" + ",".join(hosts)

    def http(self, broker: int, method: str, path: str, body: Any = None) -> Answer:
        return http(self.http_urls[broker], method, path, body)

    def ok(self, broker: int, method: str, path: str, body: Any = None) -> Any:
        """The JSON of a 2xx answer (fails the test on anything else)."""
        answer = self.http(broker, method, path, body)
        assert 200 <= answer.status < 300, (method, path, answer)
        return answer.body

    def listing(self, broker: int = 0) -> list[dict[str, Any]]:
        brokers: list[dict[str, Any]] = self.ok(broker, "GET", "/admin/v2/brokerlab/brokers")
        return brokers

    def lookup(self, broker: int, topic: str) -> dict[str, Any]:
        data: dict[str, Any] = self.ok(broker, "GET", "/lookup/v2/topic/persistent/" + short(topic))
        return data

    def owner(self, topic: str, asking: int = 0) -> int:
        """The index of the broker a lookup names as the topic's owner."""
        url = self.lookup(asking, topic)["brokerUrl"]
        return self.service_urls.index(url)

    def stop(self, signum: int = signal.SIGTERM) -> int:
        assert self.process is not None
        if self.process.poll() is None:
            self.process.send_signal(signum)
        code = self.process.wait(60)
        if self._reader is not None:
            self._reader.join(10)
        return code

    def log(self) -> str:
        return "".join(self.output)


ClusterFactory = Callable[..., ServedCluster]


@pytest.fixture
def served_cluster(tmp_path: pathlib.Path) -> Iterator[ClusterFactory]:
    """Start ``brokerlab serve --brokers N`` processes: broker.conf keys as keyword
    arguments, storage.conf keys in ``storage``. All are killed at the end."""
    made: list[ServedCluster] = []

    def start(
        brokers: int = 2, storage: dict[str, object] | None = None, **sets: object
    ) -> ServedCluster:
        cluster = ServedCluster(tmp_path / f"data{len(made)}", brokers, sets, storage or {})
        made.append(cluster)
        return cluster.start()

    yield start
    for cluster in made:
        if cluster.process is not None and cluster.process.poll() is None:
            cluster.stop(signal.SIGKILL)


@pytest.fixture
def pulsar_client() -> Iterator[Callable[[str], pulsar.Client]]:
    """Official clients; those still open are closed at the end."""
    made: list[pulsar.Client] = []

    def connect(service_url: str) -> pulsar.Client:
        client = pulsar.Client(
            service_url,
            operation_timeout_seconds=20,
            logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error),
        )
        made.append(client)
        return client

    yield connect
    for client in made:
        with contextlib.suppress(pulsar.AlreadyClosed):
            client.close()


# ---------------------------------------------------------------------- in process


@dataclass
class LocalCluster:
    """An in-process cluster: ``clients[i]`` speaks HTTP to broker ``i``'s front end,
    which stays up while the broker itself is stopped (it then answers 503)."""

    cluster: Cluster
    runners: list[web.AppRunner]
    clients: list[Client]

    @property
    def urls(self) -> list[str]:
        return [client.base_url for client in self.clients]

    def owner_index(self, topic: str) -> int | None:
        """The broker owning the topic's bundle now (None: no owner), from the table."""
        bundle = pulsar_bundle(topic)
        return self.cluster.ownership.owners.get((NAMESPACE, bundle))


LocalClusterFactory = Callable[..., Awaitable[LocalCluster]]


async def unfollowed(client: Client, method: str, path: str, json: Any = None) -> tuple[int, str]:
    """One request with redirects not followed: the status and the Location (or "")."""
    async with client.session.request(
        method, client.base_url + path, json=json, allow_redirects=False
    ) as response:
        await response.read()
        return response.status, response.headers.get("Location", "")


@pytest.fixture
async def local_cluster() -> AsyncIterator[LocalClusterFactory]:
    """Start in-process clusters (in-memory storage) with one HTTP front end per broker
    on a free port, as ``brokerlab serve`` does; keyword arguments are broker.conf keys,
    ``storage`` storage.conf ones. All are closed at the end."""
    made: list[LocalCluster] = []

    async def start(
        brokers: int = 2, storage: dict[str, Any] | None = None, **broker: Any
    ) -> LocalCluster:
        cluster = Cluster(make_settings(None, storage, **broker), brokers=brokers)
        await cluster.open()
        local = LocalCluster(cluster, [], [])
        made.append(local)
        for node in cluster.nodes:
            runner = web.AppRunner(node_app(node), access_log=None)
            await runner.setup()
            local.runners.append(runner)
            await web.TCPSite(runner, "127.0.0.1", 0).start()
            port = runner.addresses[0][1]
            node.address.http_url = http_url("127.0.0.1", port)
            local.clients.append(Client(node.address.http_url))
        await cluster.start()
        return local

    yield start
    for local in made:
        for client in local.clients:
            await client.close()
        for runner in local.runners:
            await runner.cleanup()
        await local.cluster.close()
