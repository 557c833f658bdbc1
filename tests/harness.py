"""The test harness: one way to start a broker, one client, one poller, one topic maker.

Plain helpers, importable from any test (``from tests.harness import eventually``); the
fixtures built on them live in ``tests/conftest.py``, whose docstring says which to use
for what.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import functools
import itertools
import json
import os
import pathlib
import random
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import IO, Any, Protocol, TypeVar

import aiohttp
from aiohttp import web

from broker.bench.http import child_pids
from broker.cache import DEFAULT_DESIGN, CacheConfig, create_stream
from broker.clock import ManualClock
from broker.cluster import BrokerNode, Cluster, http_url
from broker.config import load_broker_config, load_storage_config
from broker.dispatch.service import BrokerService, ServiceConfig
from broker.http.app import Settings, create_app, node_app
from broker.http.app_state import NODE
from broker.http.listener import LimitedTCPSite, http_runner
from storage_stub.bookie.memory import InMemoryBookie, InMemoryMetadataStore

ROOT = pathlib.Path(__file__).resolve().parent.parent
CONF = ROOT / "conf"
STARTUP_DEADLINE_S = 60.0
STOP_DEADLINE_S = 60.0
#: the namespace tests put their topics in unless they say otherwise
NAMESPACE = "public/default"

T = TypeVar("T")


def b64(data: bytes | str) -> str:
    raw = data.encode() if isinstance(data, str) else data
    return base64.b64encode(raw).decode()


def unb64(text: str) -> bytes:
    return base64.b64decode(text)


# ---------------------------------------------------------------------- polling


class DeadlinePassed(AssertionError):
    """A poller's deadline passed before its condition held: an AssertionError, so a
    test that waited in vain fails; a caller that wants what came by then catches it."""


def _described(what: str | Callable[[], str]) -> str:
    return what if isinstance(what, str) else what()


def eventually(
    condition: Callable[[], T],
    what: str | Callable[[], str] = "the condition",
    deadline_s: float = 30.0,
    *,
    every_s: float = 0.02,
) -> T:
    """Call ``condition`` every ``every_s`` until it returns something truthy and return
    that; fail naming ``what`` once ``deadline_s`` passed (a callable ``what`` is asked
    then, so it can name the last thing the condition saw). Never a fixed sleep: it
    returns as soon as the condition holds. A longer ``every_s`` spares a program that
    a look costs work (Prometheus answering a query)."""
    end = time.monotonic() + deadline_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > end:
            raise DeadlinePassed(f"timed out after {deadline_s} s waiting for {_described(what)}")
        time.sleep(every_s)


async def eventually_async(
    condition: Callable[[], Awaitable[T] | T],
    what: str | Callable[[], str] = "the condition",
    deadline_s: float = 30.0,
    *,
    every_s: float = 0.01,
) -> T:
    """:func:`eventually` inside an event loop: ``condition`` may be a coroutine function
    or a plain one; the loop runs between looks. The deadline also ends a look that
    hangs (a coroutine that never returns fails the test, it does not hang it)."""
    loop = asyncio.get_running_loop()
    try:
        async with asyncio.timeout_at(loop.time() + deadline_s) as scope:
            while True:
                value = condition()
                if isinstance(value, Awaitable):
                    value = await value
                if value:
                    return value  # type: ignore[return-value]
                await asyncio.sleep(every_s)
    except TimeoutError as error:
        if not scope.expired():
            raise  # the condition's own timeout, not the deadline's
        raise DeadlinePassed(
            f"timed out after {deadline_s} s waiting for {_described(what)}"
        ) from error


def python_calls(work: Callable[[], T]) -> tuple[T, int]:
    """``work()``'s result and how many Python function calls it made (counted by a
    ``sys.setprofile`` hook): a measure of an algorithm's work that does not depend on
    the machine's speed or load, for tests that bound a cost."""
    calls = 0

    def count(frame: Any, event: str, arg: Any) -> None:
        nonlocal calls
        calls += event == "call"

    sys.setprofile(count)
    try:
        result = work()
    finally:
        sys.setprofile(None)
    return result, calls


# ---------------------------------------------------------------------- topics

_names = itertools.count()


def new_topic(prefix: str = "topic", namespace: str = NAMESPACE, *, full: bool = False) -> str:
    """A topic name no other test of this process uses: ``tenant/namespace/prefix-N``
    (what HTTP paths take), or with ``full`` the client's ``persistent://`` name."""
    name = f"{namespace}/{prefix}-{next(_names)}"
    return persistent(name) if full else name


def new_topic_and_path(prefix: str = "topic") -> tuple[str, str]:
    """A new topic as a binary client names it (``persistent://...``) and as an HTTP
    path does (``persistent/...``)."""
    name = new_topic(prefix)
    return persistent(name), f"persistent/{name}"


def persistent(topic: str) -> str:
    """``persistent://tenant/namespace/local`` of a short or full name."""
    return "persistent://" + short(topic)


def short(topic: str) -> str:
    """``tenant/namespace/local`` of a short or full (``persistent://``) name."""
    return topic.removeprefix("persistent://")


#: Pulsar's defaultNumberOfNamespaceBundles (conf/broker.conf ships it)
BUNDLES = 4


def pulsar_bundle(topic: str, bundles: int = BUNDLES) -> str:
    """The bundle Pulsar puts ``topic`` (a full ``persistent://`` name) in:
    NamespaceBundleFactory hashes the name with CRC32, and getBundles(n) cuts
    ``[0, 2**32)`` into ``2**32 // n`` wide ranges, the last one ending at
    ``0xffffffff`` (which it holds too). Computed here independently of
    ``broker.dispatch.ownership``, so a broker that hashes differently fails the tests."""
    size = 2**32 // bundles
    bounds = [index * size for index in range(bundles)] + [0xFFFFFFFF]
    value = zlib.crc32(topic.encode())
    index = min(value // size, bundles - 1)
    return f"0x{bounds[index]:08x}_0x{bounds[index + 1]:08x}"


def topics_in_distinct_bundles(prefix: str, count: int = BUNDLES) -> list[str]:
    """``count`` new topics (full names) of ``public/default``, each in a bundle of its
    own."""
    found: dict[str, str] = {}
    while len(found) < count:
        name = persistent(new_topic(prefix))
        found.setdefault(pulsar_bundle(name), name)
    return list(found.values())


def topic_in_bundle(prefix: str, bundle: str) -> str:
    """A new topic (full name) of ``public/default`` in ``bundle``."""
    while pulsar_bundle(name := persistent(new_topic(prefix))) != bundle:
        pass
    return name


# ---------------------------------------------------------------------- HTTP clients


class Client:
    """A thin async JSON client of the brokerlab HTTP contract."""

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
        """Poll until ``count`` messages arrived, or the deadline passed: what came (the
        caller's assertion names what is missing)."""
        got: list[dict[str, Any]] = []

        async def enough() -> bool:
            got.extend(await self.receive(consumer_id, min(1000, count - len(got)), 500))
            return len(got) >= count

        if count > 0:
            with contextlib.suppress(DeadlinePassed):  # each look is a long poll: no pause
                await eventually_async(enough, f"{count} messages", deadline_s, every_s=0)
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


@dataclass
class Answer:
    """One HTTP answer: status, the JSON body (or text), headers."""

    status: int
    body: Any
    headers: dict[str, str] = field(default_factory=dict)


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None  # the 307 itself is what a test looks at


_opener = urllib.request.build_opener(_NoRedirects)


def http_request(
    base: str,
    method: str,
    path: str,
    body: Any = None,
    headers: dict[str, str] | None = None,
    timeout: float = 30,
) -> Answer:
    """One blocking request (for tests without an event loop): ``body`` sent as JSON,
    redirects not followed, error statuses returned."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        base + path,
        data=data,
        method=method,
        headers={
            **({"Content-Type": "application/json"} if data is not None else {}),
            **(headers or {}),
        },
    )
    try:
        with _opener.open(request, timeout=timeout) as response:
            status, raw, got = response.status, response.read(), dict(response.headers)
    except urllib.error.HTTPError as error:
        status, raw, got = error.code, error.read(), dict(error.headers)
    try:
        parsed = json.loads(raw) if raw else None
    except ValueError:
        parsed = raw.decode(errors="replace")
    return Answer(status, parsed, got)


# ---------------------------------------------------------------------- in-process brokers


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


async def served_site(settings: Settings) -> tuple[web.AppRunner, LimitedTCPSite]:
    """The broker of ``settings`` served as ``brokerlab serve`` serves it, with the
    listener's limits and timeouts, on the configured address and port (0: a free one):
    its runner and its site (whose limiter tests of the listener look at)."""
    runner = http_runner(create_app(settings), settings.broker)
    await runner.setup()
    site = LimitedTCPSite.for_config(runner, settings.broker)
    await site.start()
    return runner, site


async def served(settings: Settings) -> web.AppRunner:
    """:func:`served_site`'s runner."""
    runner, _ = await served_site(settings)
    return runner


def url_of(runner: web.AppRunner) -> str:
    return f"http://127.0.0.1:{runner.addresses[0][1]}"


@contextlib.asynccontextmanager
async def in_memory_service(config: ServiceConfig | None = None) -> AsyncIterator[BrokerService]:
    """A broker service over the in-memory bookie and metadata store, on a manual clock:
    no sockets, no HTTP (the dispatch and session tests drive it directly); closed on
    exit."""
    stream = create_stream(DEFAULT_DESIGN, CacheConfig(), ManualClock())
    service = BrokerService(
        config or ServiceConfig(), InMemoryBookie(), InMemoryMetadataStore(), stream, ManualClock()
    )
    try:
        yield service
    finally:
        await service.close()


@contextlib.asynccontextmanager
async def in_process_node(
    data_dir: pathlib.Path | None = None, storage: dict[str, Any] | None = None, **broker: Any
) -> AsyncIterator[tuple[Client, BrokerNode]]:
    """One in-process broker on a real port, stopped cleanly (files closed) on exit: a
    client and the broker itself (its service, protocol server, config), for tests that
    reach inside it."""
    runner = await served(make_settings(data_dir, storage, **broker))
    client = Client(url_of(runner))
    try:
        yield client, runner.app[NODE]
    finally:
        await client.close()
        await runner.cleanup()


@contextlib.asynccontextmanager
async def in_process_broker(
    data_dir: pathlib.Path | None = None, storage: dict[str, Any] | None = None, **broker: Any
) -> AsyncIterator[Client]:
    """:func:`in_process_node`'s client."""
    async with in_process_node(data_dir, storage, **broker) as (client, _):
        yield client


class BrokerThread:
    """An in-process broker on an event loop of its own, in a thread: it outlives the
    event loops of the tests that share it (each test talks to ``url`` with its own
    client, so nothing crosses loops)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.url = ""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._failure: BaseException | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="shared-broker", daemon=True)

    def start(self) -> BrokerThread:
        self._thread.start()
        if not self._ready.wait(STARTUP_DEADLINE_S):
            raise RuntimeError("the shared in-process broker did not start")
        if self._failure is not None:
            raise RuntimeError("the shared in-process broker did not start") from self._failure
        return self

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(STOP_DEADLINE_S)

    def _run(self) -> None:
        async def serve() -> None:
            try:
                runner = await served(self.settings)
            except BaseException as error:
                self._failure = error
                self._ready.set()
                return
            self._loop = asyncio.get_running_loop()
            self._stop = asyncio.Event()
            self.url = url_of(runner)
            self._ready.set()
            try:
                await self._stop.wait()
            finally:
                await runner.cleanup()

        asyncio.run(serve())


# ---------------------------------------------------------------------- clusters in process


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
        return self.cluster.ownership.owners.get((NAMESPACE, pulsar_bundle(topic)))


@contextlib.asynccontextmanager
async def in_process_cluster(
    brokers: int = 2, storage: dict[str, Any] | None = None, **broker: Any
) -> AsyncIterator[LocalCluster]:
    """An in-process cluster (in-memory storage) with one HTTP front end per broker on a
    free port, as ``brokerlab serve`` does; keyword arguments are broker.conf keys,
    ``storage`` storage.conf ones. Closed on exit (a trace it records is complete then)."""
    cluster = Cluster(make_settings(None, storage, **broker), brokers=brokers)
    await cluster.open()
    local = LocalCluster(cluster, [], [])
    try:
        for node in cluster.nodes:
            runner = web.AppRunner(node_app(node), access_log=None)
            await runner.setup()
            local.runners.append(runner)
            await web.TCPSite(runner, "127.0.0.1", 0).start()
            node.address.http_url = http_url("127.0.0.1", runner.addresses[0][1])
            local.clients.append(Client(node.address.http_url))
        await cluster.start()
        yield local
    finally:
        for client in local.clients:
            await client.close()
        for runner in local.runners:
            await runner.cleanup()
        await cluster.close()


# ---------------------------------------------------------------------- broker processes


def child_processes(pid: int, command_part: str) -> list[int]:
    """``pid``'s live child processes whose command line holds ``command_part``."""
    found = []
    for child in child_pids(pid):
        with contextlib.suppress(OSError), open(f"/proc/{child}/cmdline", "rb") as cmdline:
            if command_part.encode() in cmdline.read():
                found.append(child)
    return found


def rss_mib(pid: int) -> float:
    """Process ``pid``'s resident memory (``VmRSS``), in MiB."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmRSS for process {pid}")


def _conf_value(value: object) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def _index_of(line: str) -> int:
    """The broker index a cluster's startup line ends with (``..., broker 1)``)."""
    tail = line.rstrip().rstrip(")").rsplit(" ", 1)[1]
    return int(tail) if tail.isdigit() else 0


class BrokerChild(Protocol):
    """What the harness uses of a broker's process: a ``subprocess.Popen`` or a process
    forked by ``tests/integration/forkserver.py``."""

    pid: int
    stdout: IO[bytes] | None

    def poll(self) -> int | None: ...
    def wait(self, timeout: float | None = None) -> int: ...
    def send_signal(self, sig: int) -> None: ...
    def kill(self) -> None: ...


#: starts ``brokerlab *argv`` with its output (stdout and stderr) on ``stdout``
Spawn = Callable[[list[str]], BrokerChild]


#: ``brokerlab`` in a fresh interpreter of this environment
BROKERLAB = [sys.executable, "-m", "broker.cli"]


def brokerlab(*argv: str, cwd: pathlib.Path = ROOT) -> subprocess.CompletedProcess[str]:
    """``brokerlab *argv`` run to its end in a fresh interpreter, its output captured:
    for tests of the command itself (exit codes, what it says when it cannot start).
    A broker that should stay up is a :class:`ServedBroker`."""
    return subprocess.run([*BROKERLAB, *argv], cwd=cwd, capture_output=True, text=True, timeout=120)


def _popen(argv: list[str]) -> BrokerChild:
    """``python -m broker.cli *argv``: a fresh interpreter."""
    return subprocess.Popen(
        [*BROKERLAB, *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        cwd=str(ROOT),
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


#: where a broker that restarts on its binary port gets that port: below Linux's
#: ephemeral range (32768-60999 by default), so that while the broker is down no
#: outgoing connection of another test takes it as its local port (a restart once
#: found its port in use that way)
STABLE_PORTS = range(20000, 32768)


def stable_port() -> int:
    """A port of :data:`STABLE_PORTS` free on 127.0.0.1 now (another process may still
    bind it before the caller does: :meth:`ServedBroker.start` then takes another)."""
    for _ in range(200):
        port = random.choice(STABLE_PORTS)
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port
    raise RuntimeError(f"no free port in {STABLE_PORTS}")


class ServedBroker:
    """``brokerlab serve`` (``--brokers N`` when ``brokers`` > 1) as a child process on
    free ports over ``data_dir``, which outlives it: stop, kill and start again. Keyword
    ``sets`` are broker.conf keys (``--set``), ``storage`` storage.conf keys
    (``--storage-set``), ``args`` more command-line arguments. A restart of one broker
    keeps its binary port, so clients reconnect as to a restarted Pulsar.

    Blocking (the official client's calls block too); async tests use
    :class:`BrokerProcess` over it."""

    def __init__(
        self,
        data_dir: pathlib.Path,
        sets: dict[str, object] | None = None,
        *,
        storage: dict[str, object] | None = None,
        brokers: int = 1,
        args: Sequence[str] = (),
        spawn: Spawn | None = None,
    ) -> None:
        self.data_dir = data_dir
        self.spawn = spawn or _popen
        self.sets = dict(sets or {})
        self.storage = dict(storage or {})
        self.brokers = brokers
        self.args = list(args)
        self.process: BrokerChild | None = None
        self.http_urls: list[str] = []
        self.service_urls: list[str] = []
        self.output: list[str] = []
        self._reader: threading.Thread | None = None
        self._broker_port = -1

    def command(self) -> list[str]:
        """The ``brokerlab`` arguments (``serve ...``) this broker is started with."""
        # a cluster's brokers take the given port plus their index: always free ports
        broker_port = self._broker_port if self.brokers == 1 else -1
        command = ["serve", "--port", "0"]
        command += ["--broker-port", str(broker_port), "--data-dir", str(self.data_dir)]
        command += ["--config", str(CONF / "broker.conf")]
        command += ["--storage-config", str(CONF / "storage.conf")]
        if self.brokers > 1:
            command += ["--brokers", str(self.brokers)]
        for key, value in self.sets.items():
            command += ["--set", f"{key}={_conf_value(value)}"]
        for key, value in self.storage.items():
            command += ["--storage-set", f"{key}={_conf_value(value)}"]
        return command + self.args

    def start(self) -> ServedBroker:
        """Start and wait until every broker listens (HTTP and binary protocol). A
        single broker's first start takes its binary port from :func:`stable_port`
        (another, if that one was taken meanwhile), and keeps it for its restarts."""
        if self.brokers > 1 or self._broker_port != -1:
            return self._start()
        for attempt in range(3):
            self._broker_port = stable_port()
            try:
                return self._start()
            except RuntimeError:
                if attempt == 2 or f"port {self._broker_port} is already in use" not in self.log():
                    raise
        raise AssertionError("unreachable")

    def _start(self) -> ServedBroker:
        self.process = self.spawn(self.command())
        stdout = self.process.stdout
        assert stdout is not None
        # a broker silent past the deadline is killed: the read below then ends
        watchdog = threading.Timer(STARTUP_DEADLINE_S, self.process.kill)
        watchdog.start()
        http_urls: dict[int, str] = {}
        service_urls: dict[int, str] = {}
        try:
            while len(http_urls) < self.brokers or len(service_urls) < self.brokers:
                line = stdout.readline().decode(errors="replace")
                if not line:
                    raise RuntimeError(
                        f"broker exited during start (killed after {STARTUP_DEADLINE_S} s "
                        "if it had not listened by then):\n" + self.log()
                    )
                self.output.append(line)
                if line.startswith("brokerlab listening on "):
                    http_urls[_index_of(line)] = line.split()[3]
                elif line.startswith("brokerlab binary protocol on "):
                    service_urls[_index_of(line)] = line.split()[4]
        finally:
            watchdog.cancel()
        self.http_urls = [http_urls[i] for i in range(self.brokers)]
        self.service_urls = [service_urls[i] for i in range(self.brokers)]
        self._broker_port = int(self.service_urls[0].rstrip("/").rsplit(":", 1)[1])
        self._reader = threading.Thread(target=self._drain, args=(stdout,), daemon=True)
        self._reader.start()
        return self

    def _drain(self, stdout: Any) -> None:
        # read on until the process closes its output, so the pipe never fills
        for line in stdout:
            self.output.append(line.decode(errors="replace"))

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self, signum: int = signal.SIGTERM) -> int:
        """Signal (SIGTERM: a graceful stop, as Ctrl-C) and wait: the exit code."""
        assert self.process is not None
        if self.process.poll() is None:
            self.process.send_signal(signum)
        code = self.process.wait(STOP_DEADLINE_S)
        if self._reader is not None:
            self._reader.join(10)
        return code

    def kill(self) -> None:
        """SIGKILL: no chance to flush or close anything."""
        self.stop(signal.SIGKILL)

    # -------------------------------------------------------------- output

    def log(self, since: int = 0) -> str:
        """The processes' output, from line ``since`` (a :meth:`mark`) on."""
        return "".join(self.output[since:])

    def mark(self) -> int:
        """Where the output is now: ``log(since=mark)`` is what came after."""
        return len(self.output)

    # -------------------------------------------------------------- addresses

    @property
    def http_url(self) -> str:
        """Broker 0's HTTP base."""
        return self.http_urls[0]

    @property
    def service_url(self) -> str:
        """One ``pulsar://`` URL naming every broker, as Pulsar clients take a cluster's."""
        hosts = [url.removeprefix("pulsar://").rstrip("/") for url in self.service_urls]
        return "pulsar://" + ",".join(hosts)

    # -------------------------------------------------------------- HTTP

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        headers: dict[str, str] | None = None,
        *,
        broker: int = 0,
    ) -> Answer:
        """One request to broker ``broker``: redirects not followed, errors returned."""
        return http_request(self.http_urls[broker], method, path, body, headers)

    def ok(
        self,
        method: str,
        path: str,
        body: Any = None,
        headers: dict[str, str] | None = None,
        *,
        broker: int = 0,
    ) -> Any:
        """The JSON of a 2xx answer (None for 204); anything else fails the test."""
        answer = self.request(method, path, body, headers, broker=broker)
        assert 200 <= answer.status < 300, (method, path, answer)
        return answer.body

    http = ok  # the name tests outside tests/protocol and tests/cluster use

    def new_namespace(self, prefix: str = "ns", tenant: str = "public") -> str:
        """A namespace no other test of this process uses (``tenant/prefix-N``), created
        on the broker (topics in it: ``new_topic(prefix, namespace)``)."""
        namespace = f"{tenant}/{prefix}-{next(_names)}"
        self.ok("PUT", f"/admin/v2/namespaces/{namespace}")
        return namespace

    def listing(self, broker: int = 0) -> list[dict[str, Any]]:
        """The cluster's brokers, as broker ``broker`` lists them."""
        brokers: list[dict[str, Any]] = self.ok("GET", "/admin/v2/brokerlab/brokers", broker=broker)
        return brokers

    def lookup(self, topic: str, *, broker: int = 0) -> dict[str, Any]:
        data: dict[str, Any] = self.ok(
            "GET", "/lookup/v2/topic/persistent/" + short(topic), broker=broker
        )
        return data

    def owner(self, topic: str, *, asking: int = 0) -> int:
        """The index of the broker a lookup names as the topic's owner."""
        return self.service_urls.index(self.lookup(topic, broker=asking)["brokerUrl"])


class _ProcessHandle:
    """A :class:`ServedBroker`'s process, seen from an event loop."""

    def __init__(self, process: BrokerChild) -> None:
        self._process = process
        self.pid = process.pid

    @property
    def returncode(self) -> int | None:
        return self._process.poll()

    def send_signal(self, signum: int) -> None:
        self._process.send_signal(signum)

    async def wait(self) -> int:
        return await asyncio.to_thread(self._process.wait, STOP_DEADLINE_S)


class BrokerProcess:
    """A :class:`ServedBroker` for async tests: ``start()`` returns a :class:`Client`;
    ``args`` are ``brokerlab serve`` arguments."""

    def __init__(self, data_dir: pathlib.Path, args: list[str], spawn: Spawn | None = None) -> None:
        self.served = ServedBroker(data_dir, args=args, spawn=spawn)
        self.client: Client | None = None

    @property
    def data_dir(self) -> pathlib.Path:
        return self.served.data_dir

    @property
    def args(self) -> list[str]:
        return self.served.args

    @property
    def output(self) -> list[str]:
        return self.served.output

    @property
    def process(self) -> _ProcessHandle | None:
        process = self.served.process
        return None if process is None else _ProcessHandle(process)

    async def start(self) -> Client:
        await asyncio.to_thread(self.served.start)
        self.client = Client(self.served.http_url)
        return self.client

    async def _finish(self, signum: int) -> int:
        code = await asyncio.to_thread(self.served.stop, signum)
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
        process = self.process
        assert process is not None
        (child,) = child_processes(process.pid, command_part)
        os.kill(child, signal.SIGKILL)
        code = await process.wait()
        await self._finish(signal.SIGTERM)  # collects the output; the process is gone
        return code


# ---------------------------------------------------------------------- network namespaces


@functools.cache
def private_network() -> bool:
    """Whether ``unshare -rn`` gives this process's children a network of their own
    (where documented fixed ports are free whatever runs on the machine)."""
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(["unshare", "-rn", "true"], capture_output=True, check=False)
    return probe.returncode == 0


#: brings the loopback interface of a new network namespace up (it starts down)
LOOPBACK_UP = """
import fcntl, socket, struct
with socket.socket() as s:
    ifreq = struct.pack("16sH14s", b"lo", 0, b"")
    flags = struct.unpack("16sH14s", fcntl.ioctl(s, 0x8913, ifreq))[1]  # SIOCGIFFLAGS
    fcntl.ioctl(s, 0x8914, struct.pack("16sH14s", b"lo", flags | 1, b""))  # SIOCSIFFLAGS: up
"""


def in_private_network(script: pathlib.Path) -> list[str]:
    """The command that runs the bash ``script`` in a network namespace of its own, its
    loopback up (:func:`private_network` must hold)."""
    loopback_up = f"{shlex.quote(sys.executable)} -c {shlex.quote(LOOPBACK_UP)}"
    inner = f"{loopback_up} && exec bash {shlex.quote(str(script))}"
    return ["unshare", "-rn", "--", "bash", "-c", inner]
