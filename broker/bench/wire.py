"""``brokerlab bench wire``: Pulsar's binary protocol, brokerlab against pulsar-lite.

The official Python client (``pulsar-client``, C++ core) produces 1 KiB messages and
consumes them again, on brokerlab (``brokerlab serve``, its binary protocol server) and,
in the same run, on ``pulsar-lite`` (the Rust Pulsar-compatible server from PyPI) as the
reference. For each server x batching (on, off), on a fresh topic:

- the consumer subscribes first (initial position Earliest), so its subscription sees
  every message; it stays connected, so up to its receiver queue (1000) is dispatched
  to it while the producer runs, on both servers alike;
- produce: ``send_async`` of N messages as fast as the client allows, through the
  client's bounded pending queue (1000 messages, ``block_if_queue_full``), then
  ``flush``; the rate is N over the time until every send was acknowledged. Only every
  1000th send and the last carry a callback (to fail early on an error): a callback on
  each cost the Python client two thirds of its batched rate;
- consume: ``receive`` + ``acknowledge`` of every message; the rate is N over the time
  until all N distinct messages arrived (each payload carries its sequence number, so a
  message delivered twice counts once: the duplicates are reported beside the rate);
- entries: what the broker stored. brokerlab: ``numberOfEntries`` of the topic's
  ``/admin/v2/persistent/public/default/{topic}/internalStats``. pulsar-lite has no admin
  API; its Prometheus endpoint (enabled on a free local port) counts the entries it
  writes broker-wide (``pulsar_entry_size_count``), and the bench is its only writer, so
  the count's growth over a row is the row's entries. A figure that cannot be read is
  reported as n/a.

The headline is brokerlab / pulsar-lite for produce and for consume, measured in one run
(issue #15's target: >= 0.8 of both with batching on; batching off is reported). The
bench reports the ratios and whether they meet the target; it never fails on them.

A third server, brokerlab with ``brokerDeduplicationEnabled=true`` (issue #37), runs the
same rows: the cost of message deduplication on the produce path (a check and a record
per send, a snapshot every ``brokerDeduplicationEntriesInterval`` entries) is its rate
over plain brokerlab's, reported as ``deduplication_cost`` (1.0: free).

Settings, chosen to be alike on both servers and each side's defaults otherwise:

- durability: pulsar-lite acknowledges a publish once its entry-log write (``write``,
  no fsync) and its RocksDB index write (WAL not synced) are done; strace shows its
  only fsyncs at start-up. brokerlab therefore runs ``syncMode=none`` (as the headline
  of ``bench http``); the other storage settings are conf/storage.conf's (disk mode);
- client: the Python client's defaults but for two settings: ``block_if_queue_full`` (its
  default fails a send when 1000 are pending instead of waiting) and, in the "on" rows,
  ``batching_enabled`` (the Python client's default is off; the batching parameters keep
  their defaults: 1000 messages, 128 KiB, 10 ms, so 1 KiB messages make batches of
  about 127). Receiver queue 1000, acknowledgments grouped by the client (100 ms), no
  compression;
- subscription: Shared, with its one consumer (the order and the messages are those of
  Exclusive). pulsar-lite 0.2.0's single-active-consumer dispatcher (Exclusive and
  Failover) delivered duplicates in most runs of this workload (up to half as many
  again) and, batching off, stalled for good in about one run in three with messages
  missing (stored: a reader gets them all); its Shared dispatcher did neither;
- servers: pulsar-lite with its defaults (1000 pending publishes per connection, log
  level info, no partitions), plus the metrics endpoint on 127.0.0.1; brokerlab with
  conf/broker.conf.

The machine has 2 cores; nothing is pinned. While a row runs, the bench process only
waits for the client, a child process (``python -m broker.bench.wire client``) whose
Python thread (building each message in Python) and the client's C++ I/O and listener
threads keep up to about one core busy. The server under test has the
rest: brokerlab runs one event loop (plus its storage writer threads), so at most
about one core; pulsar-lite runs a tokio worker per core and its own write threads,
so it can spread over both cores, competing with the client. The other server sits
idle. The CPU columns show who was busy during each phase: a client near one full core
means the row measures the client, and its ratio reads closer to 1 than the servers are.
Rows run interleaved over rounds (server order alternating) so drift in the machine's
load hits both servers alike. All traffic goes to 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.metadata
import importlib.util
import os
import pathlib
import shutil
import socket
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from typing import Any

import aiohttp
import orjson
import uvloop

from broker.bench.http import (
    BROKER_READY_PREFIX,
    STARTUP_DEADLINE_S,
    BenchError,
    ServerProcess,
    _conf_dir,
    _cpu_seconds,
)

HOST = "127.0.0.1"
#: the line ``brokerlab serve`` prints once its binary protocol server listens
BINARY_READY_PREFIX = "brokerlab binary protocol on "
#: how long after its HTTP line brokerlab may take to print its binary protocol line
BINARY_LINE_GRACE_S = 2.0
REFERENCE_READY_MARK = "Server listening on "
REFERENCE_START_ATTEMPTS = 3  # ports are picked before the start: another process may win
TENANT_NAMESPACE = "public/default"
SUBSCRIPTION = "bench-wire"
TARGET_RATIO = 0.8
CLIENT_RESULT_PREFIX = "wire-client-result "
CLIENT_DEADLINE_S = 600.0  # a whole row, client start-up included
CONSUME_STALL_S = 30.0  # no new message for this long while some are missing: give up
RECEIVE_POLL_MS = 1000
SEND_CHECK_EVERY = 1000  # sends with a callback that checks their result
ADMIN_TIMEOUT_S = 30.0
SERVERS = ("brokerlab", "brokerlab-dedup", "reference")
SERVER_LABELS = {
    "brokerlab": "brokerlab",
    "brokerlab-dedup": "brokerlab (dedup)",
    "reference": "pulsar-lite",
}


@dataclass(frozen=True, slots=True)
class BenchConfig:
    messages_per_row: int  # measured messages per server x batching, over all rounds
    rounds: int  # rows run interleaved, one slice of messages per round
    message_bytes: int = 1024
    max_pending_messages: int = 1000  # the Python client's default
    receiver_queue_size: int = 1000  # the Python client's default
    #: one consumer on a Shared subscription: pulsar-lite 0.2.0's Exclusive dispatcher
    #: delivers duplicates and stalls with this workload (see the module docstring)
    subscription_type: str = "Shared"

    def messages_in_round(self, round_index: int) -> int:
        base, extra = divmod(self.messages_per_row, self.rounds)
        return base + (1 if round_index < extra else 0)


QUICK = BenchConfig(messages_per_row=2000, rounds=1)
FULL = BenchConfig(messages_per_row=60_000, rounds=3)


class ServerUnavailable(BenchError):
    """A server could not be started or lacks the binary protocol: its rows are not run."""


# ---------------------------------------------------------------------- server processes


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((HOST, 0))
        return int(probe.getsockname()[1])


def _version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def find_pulsar_lite() -> pathlib.Path | None:
    """The ``pulsar-lite`` binary: the one its wheel ships, else one on PATH."""
    spec = importlib.util.find_spec("pulsar_lite")  # finds the package without importing it
    for location in (spec.submodule_search_locations or []) if spec else []:
        shipped = pathlib.Path(location) / "bin" / "pulsar-lite"
        if shipped.is_file() and os.access(shipped, os.X_OK):
            return shipped
    on_path = shutil.which("pulsar-lite")
    return pathlib.Path(on_path) if on_path else None


class WireServer(ServerProcess):
    """A server of Pulsar's binary protocol in a child process (stdout and stderr kept)."""

    def __init__(self, key: str, argv: list[str], cwd: pathlib.Path | None = None) -> None:
        super().__init__(SERVER_LABELS[key], argv, ready_prefix="")
        self.cwd = cwd
        self.service_url = ""  # pulsar://HOST:PORT

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    async def _spawn(self) -> None:
        self.process = await asyncio.create_subprocess_exec(
            *self.argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            cwd=self.cwd,
        )

    async def _next_line(self, deadline: float) -> str | None:
        """The next output line; None once ``deadline`` (loop time) passed; error on exit."""
        assert self.process is not None and self.process.stdout is not None
        loop = asyncio.get_running_loop()
        try:
            raw = await asyncio.wait_for(
                self.process.stdout.readline(), max(0.0, deadline - loop.time())
            )
        except TimeoutError:
            return None
        if not raw:
            await self.process.wait()
            raise ServerUnavailable(
                f"{self.label}: exited with code {self.process.returncode} during start"
                + self.tail()
            )
        text = raw.decode(errors="replace").rstrip("\n")
        self.output.append(text)
        return text

    def _follow_output(self) -> None:
        self._drain = asyncio.create_task(self._drain_output())


class BrokerlabServer(WireServer):
    """``brokerlab serve``: ready once it printed both its HTTP and its binary line."""

    def __init__(self, data_dir: pathlib.Path, deduplication: bool = False) -> None:
        argv = [sys.executable, "-m", "broker.cli", "serve", "--host", HOST, "--port", "0"]
        argv += ["--broker-port", "-1", "--data-dir", str(data_dir)]
        conf = _conf_dir()
        if conf is not None:
            argv += ["--config", str(conf / "broker.conf")]
            argv += ["--storage-config", str(conf / "storage.conf")]
        argv += ["--storage-set", "storageMode=disk", "--storage-set", "syncMode=none"]
        if deduplication:
            argv += ["--set", "brokerDeduplicationEnabled=true"]
        super().__init__("brokerlab-dedup" if deduplication else "brokerlab", argv)

    async def start(self) -> str:
        await self._spawn()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + STARTUP_DEADLINE_S
        while not (self.url and self.service_url):
            line = await self._next_line(deadline)
            if line is None:
                if not self.url:
                    raise ServerUnavailable(
                        f"brokerlab: not ready after {STARTUP_DEADLINE_S:.0f} s" + self.tail()
                    )
                raise ServerUnavailable(
                    "brokerlab: no binary protocol: `brokerlab serve --broker-port -1` printed "
                    f"no '{BINARY_READY_PREFIX}pulsar://HOST:PORT' line within "
                    f"{BINARY_LINE_GRACE_S:.0f} s of its HTTP line"
                )
            if line.startswith(BROKER_READY_PREFIX):
                self.ready_line = line
                self.url = line[len(BROKER_READY_PREFIX) :].split()[0]
                deadline = min(deadline, loop.time() + BINARY_LINE_GRACE_S)
                if "sync: none)" not in line:
                    raise ServerUnavailable(f"brokerlab: started as {line!r}, not syncMode=none")
            elif line.startswith(BINARY_READY_PREFIX):
                self.service_url = line[len(BINARY_READY_PREFIX) :].split()[0]
        if not self.url.startswith(f"http://{HOST}:"):
            raise ServerUnavailable(f"brokerlab: listens on {self.url}, not on {HOST}")
        if not self.service_url.startswith(f"pulsar://{HOST}:"):
            raise ServerUnavailable(f"brokerlab: binary protocol on {self.service_url}")
        self._follow_output()
        return self.service_url


class ReferenceServer(WireServer):
    """pulsar-lite on ports picked beforehand (it prints no port it chose itself)."""

    def __init__(self, binary: pathlib.Path, data_dir: pathlib.Path) -> None:
        super().__init__("reference", [], cwd=data_dir)
        self.binary = binary
        self.data_dir = data_dir
        self.metrics_url = ""

    def _configure(self) -> None:
        port, metrics_port = _free_port(), _free_port()
        config = self.data_dir / "pulsar-lite.toml"
        # Metrics only to count entries; without this table it would bind 0.0.0.0:8080.
        config.write_text(f'[metrics]\nenabled = true\naddr = "{HOST}:{metrics_port}"\n')
        self.argv = [str(self.binary), "--config", str(config), "--addr", f"{HOST}:{port}"]
        self.argv += ["--db-path", str(self.data_dir / "db")]
        self.service_url = f"pulsar://{HOST}:{port}"
        self.metrics_url = f"http://{HOST}:{metrics_port}/metrics"

    async def start(self) -> str:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        attempt = 1
        while True:
            self._configure()
            self.output.clear()
            await self._spawn()
            deadline = asyncio.get_running_loop().time() + STARTUP_DEADLINE_S
            try:
                while True:
                    line = await self._next_line(deadline)
                    if line is None:
                        raise ServerUnavailable(
                            f"pulsar-lite: not ready after {STARTUP_DEADLINE_S:.0f} s" + self.tail()
                        )
                    if REFERENCE_READY_MARK in line:
                        self.ready_line = line
                        break
            except ServerUnavailable:
                in_use = any("in use" in text for text in self.output)
                if not in_use or attempt == REFERENCE_START_ATTEMPTS:
                    raise
                attempt += 1
                await self.stop()
                continue
            self._follow_output()
            return self.service_url


async def _start(server: WireServer) -> str | None:
    """Start ``server``; None when it came up, else why it is unavailable."""
    try:
        await server.start()
    except (BenchError, OSError) as error:
        return str(error)
    return None


# ---------------------------------------------------------------------- the client process


@dataclass(frozen=True, slots=True)
class ClientSpec:
    """One row slice, run by ``python -m broker.bench.wire client SPEC``."""

    service_url: str
    topic: str
    batching: bool
    messages: int
    message_bytes: int
    max_pending_messages: int
    receiver_queue_size: int
    subscription_type: str  # a pulsar.ConsumerType name
    server_pid: int | None  # to read the server's CPU time at each phase boundary


def run_client(spec: ClientSpec) -> dict[str, Any]:
    """Subscribe, produce ``spec.messages``, consume them all; the figures as a dict."""
    import pulsar  # type: ignore[import-untyped]  # no py.typed in pulsar-client

    if spec.message_bytes < 8:
        raise BenchError("messages carry an 8-byte sequence number: message_bytes >= 8")
    count = spec.messages
    body = os.urandom(spec.message_bytes - 8)
    payloads = [sequence.to_bytes(8, "big") + body for sequence in range(count)]
    client = pulsar.Client(spec.service_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn))
    try:
        consumer = client.subscribe(
            spec.topic,
            SUBSCRIPTION,
            consumer_type=getattr(pulsar.ConsumerType, spec.subscription_type),
            initial_position=pulsar.InitialPosition.Earliest,
            receiver_queue_size=spec.receiver_queue_size,
        )
        producer = client.create_producer(
            spec.topic,
            batching_enabled=spec.batching,
            max_pending_messages=spec.max_pending_messages,
            block_if_queue_full=True,
        )
        results: list[Any] = []

        def on_sent(result: Any, _message_id: Any) -> None:
            results.append(result)  # on the client's thread; list.append holds the GIL

        # A callback on every send took two thirds of the client's batched produce rate
        # (each one a trip into Python); the consume phase checks every message anyway.
        callbacks = [
            on_sent if sequence % SEND_CHECK_EVERY == 0 or sequence == count - 1 else None
            for sequence in range(count)
        ]
        marks = [_mark(spec.server_pid)]
        for payload, callback in zip(payloads, callbacks, strict=True):
            producer.send_async(payload, callback)
        producer.flush()
        checked = sum(callback is not None for callback in callbacks)
        give_up = time.perf_counter() + CONSUME_STALL_S
        while len(results) < checked:  # flush returned; the last callbacks may still run
            if time.perf_counter() > give_up:
                raise BenchError(f"{checked - len(results)} checked sends never completed")
            time.sleep(0.0005)
        marks.append(_mark(spec.server_pid))
        failed = [result for result in results if result != pulsar.Result.Ok]
        if failed:
            raise BenchError(f"{len(failed)} of {checked} checked sends failed: {failed[0]}")

        seen = bytearray(count)
        distinct = received = idle_polls = 0
        while distinct < count:
            try:
                message = consumer.receive(RECEIVE_POLL_MS)
            except pulsar.Timeout:
                idle_polls += 1
                if idle_polls * RECEIVE_POLL_MS / 1000 >= CONSUME_STALL_S:
                    raise BenchError(
                        f"consumer stalled: {count - distinct} of {count} messages never "
                        f"arrived ({received} received)"
                    ) from None
                continue
            idle_polls = 0
            received += 1
            sequence = int.from_bytes(message.data()[:8], "big")
            if sequence >= count:
                raise BenchError(f"consumer got a message that was never produced ({sequence})")
            if not seen[sequence]:
                seen[sequence] = 1
                distinct += 1
            consumer.acknowledge(message)
        marks.append(_mark(spec.server_pid))
        producer.close()
        consumer.close()
    finally:
        client.close()
    (wall0, cpu0, srv0), (wall1, cpu1, srv1), (wall2, cpu2, srv2) = marks
    return {
        "messages": count,
        "received": received,
        "produce_s": wall1 - wall0,
        "consume_s": wall2 - wall1,
        "client_cpu_produce_s": cpu1 - cpu0,
        "client_cpu_consume_s": cpu2 - cpu1,
        "server_cpu_produce_s": None if srv0 is None or srv1 is None else srv1 - srv0,
        "server_cpu_consume_s": None if srv1 is None or srv2 is None else srv2 - srv1,
    }


def _mark(server_pid: int | None) -> tuple[float, float, float | None]:
    """Wall time, this process's CPU time (all its threads), the server's CPU time."""
    server_cpu = None if server_pid is None else _cpu_seconds(server_pid)
    return time.perf_counter(), time.process_time(), server_cpu


def client_main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] != "client":
        print("usage: python -m broker.bench.wire client SPEC_JSON", file=sys.stderr)
        return 2
    spec = ClientSpec(**orjson.loads(argv[1]))
    try:
        result = run_client(spec)
    except Exception as error:
        print(f"wire client: {type(error).__name__}: {error}", file=sys.stderr, flush=True)
        return 1
    print(CLIENT_RESULT_PREFIX + orjson.dumps(result).decode(), flush=True)
    return 0


async def run_client_process(spec: ClientSpec, what: str) -> dict[str, Any]:
    """Run one row slice in a fresh client process; its figures, or BenchError."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "broker.bench.wire",
        "client",
        orjson.dumps(asdict(spec)).decode(),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        raw, _ = await asyncio.wait_for(process.communicate(), CLIENT_DEADLINE_S)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        await process.wait()
        raise BenchError(f"{what}: client not done after {CLIENT_DEADLINE_S:.0f} s") from None
    lines = raw.decode(errors="replace").splitlines()
    for line in lines:
        if line.startswith(CLIENT_RESULT_PREFIX) and process.returncode == 0:
            result: dict[str, Any] = orjson.loads(line[len(CLIENT_RESULT_PREFIX) :])
            return result
    tail = "\n".join(lines[-15:])
    raise BenchError(f"{what}: client exited with code {process.returncode}\n{tail}")


# ---------------------------------------------------------------------- entries


async def brokerlab_entries(session: aiohttp.ClientSession, url: str, topic: str) -> int | None:
    name = topic.removeprefix("persistent://")
    try:
        async with session.get(f"{url}/admin/v2/persistent/{name}/internalStats") as response:
            if response.status != 200:
                return None
            stats = await response.json(loads=orjson.loads)
    except (aiohttp.ClientError, TimeoutError, ValueError):
        return None
    entries = stats.get("numberOfEntries")
    return entries if isinstance(entries, int) else None


async def reference_entries_written(session: aiohttp.ClientSession, url: str) -> int | None:
    """Entries pulsar-lite wrote since it started, all topics (Prometheus counter)."""
    try:
        async with session.get(url) as response:
            if response.status != 200:
                return None
            text = await response.text()
    except (aiohttp.ClientError, TimeoutError, UnicodeDecodeError):
        return None
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name == "pulsar_entry_size_count":
            with contextlib.suppress(ValueError):
                return int(float(value))
    return None


# ---------------------------------------------------------------------- rows


@dataclass(slots=True)
class Row:
    server: str  # "brokerlab" or "reference"
    batching: bool
    error: str | None = None
    messages: int = 0
    received: int = 0  # duplicates included
    entries: int | None = 0  # None once any slice's count could not be read
    produce_s: float = 0.0
    consume_s: float = 0.0
    client_cpu_produce_s: float = 0.0
    client_cpu_consume_s: float = 0.0
    server_cpu_produce_s: float | None = 0.0
    server_cpu_consume_s: float | None = 0.0

    @property
    def key(self) -> str:
        return f"{self.server}_batching_{'on' if self.batching else 'off'}"

    def add(self, figures: dict[str, Any], entries: int | None) -> None:
        self.messages += figures["messages"]
        self.received += figures["received"]
        self.entries = None if self.entries is None or entries is None else self.entries + entries
        for name in ("produce_s", "consume_s", "client_cpu_produce_s", "client_cpu_consume_s"):
            setattr(self, name, getattr(self, name) + figures[name])
        for name in ("server_cpu_produce_s", "server_cpu_consume_s"):
            mine, theirs = getattr(self, name), figures[name]
            setattr(self, name, None if mine is None or theirs is None else mine + theirs)

    def report(self) -> dict[str, Any]:
        measured = self.error is None and self.produce_s > 0 and self.consume_s > 0

        def per_s(count: int | None, seconds: float) -> float | None:
            return round(count / seconds, 1) if measured and count is not None else None

        def cores(cpu_s: float | None, seconds: float) -> float | None:
            return round(cpu_s / seconds, 3) if measured and cpu_s is not None else None

        return {
            "row": self.key,
            "server": self.server,
            "label": SERVER_LABELS[self.server],
            "batching": self.batching,
            "available": self.error is None,
            "error": self.error,
            "messages": self.messages,
            "received": self.received,
            "duplicates": self.received - self.messages if measured else None,
            "entries": self.entries if measured else None,
            "msgs_per_entry": (
                round(self.messages / self.entries, 2) if measured and self.entries else None
            ),
            "produce_msgs_per_s": per_s(self.messages, self.produce_s),
            "produce_entries_per_s": per_s(self.entries, self.produce_s),
            "consume_msgs_per_s": per_s(self.messages, self.consume_s),
            "consume_entries_per_s": per_s(self.entries, self.consume_s),
            "produce_s": round(self.produce_s, 4),
            "consume_s": round(self.consume_s, 4),
            "client_cpu_cores_produce": cores(self.client_cpu_produce_s, self.produce_s),
            "client_cpu_cores_consume": cores(self.client_cpu_consume_s, self.consume_s),
            "server_cpu_cores_produce": cores(self.server_cpu_produce_s, self.produce_s),
            "server_cpu_cores_consume": cores(self.server_cpu_consume_s, self.consume_s),
        }


async def run_rows(config: BenchConfig, data_root: pathlib.Path) -> dict[str, Any]:
    brokerlab = BrokerlabServer(data_root / "brokerlab")
    deduplicating = BrokerlabServer(data_root / "brokerlab-dedup", deduplication=True)
    binary = find_pulsar_lite()
    reference = ReferenceServer(binary or pathlib.Path("pulsar-lite"), data_root / "pulsar-lite")
    servers: dict[str, WireServer] = {
        "brokerlab": brokerlab,
        "brokerlab-dedup": deduplicating,
        "reference": reference,
    }
    rows = {
        (server, batching): Row(server, batching)
        for batching in (True, False)
        for server in SERVERS
    }
    session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=ADMIN_TIMEOUT_S))
    try:
        missing = "pulsar-lite is not installed (pip install 'brokerlab[reference]')"
        brokerlab_error, dedup_error, reference_error = await asyncio.gather(
            _start(brokerlab),
            _start(deduplicating),
            _start(reference) if binary is not None else asyncio.sleep(0, missing),
        )
        started = (
            ("brokerlab", brokerlab_error),
            ("brokerlab-dedup", dedup_error),
            ("reference", reference_error),
        )
        for key, error in started:
            if error is not None:
                for row in rows.values():
                    if row.server == key:
                        row.error = error
        for round_index in range(config.rounds):
            count = config.messages_in_round(round_index)
            if count == 0:
                continue
            order = SERVERS if round_index % 2 == 0 else SERVERS[::-1]
            for batching in (True, False):
                for key in order:
                    row = rows[(key, batching)]
                    if row.error is None:
                        await _run_slice(session, config, servers[key], row, round_index, count)
        for key, server in servers.items():
            if server.process is not None and server.process.returncode is not None:
                for row in rows.values():
                    if row.server == key and row.error is None:
                        row.error = f"{server.label}: exited with code {server.process.returncode}"
        return _report(config, list(rows.values()), servers, reference)
    finally:
        await session.close()
        await asyncio.gather(*(server.stop() for server in servers.values()))


async def _run_slice(
    session: aiohttp.ClientSession,
    config: BenchConfig,
    server: WireServer,
    row: Row,
    round_index: int,
    count: int,
) -> None:
    """One round of one row, on a topic of its own; a failure marks the row failed."""
    mode = "batching-on" if row.batching else "batching-off"
    topic = f"persistent://{TENANT_NAMESPACE}/wire-{mode}-r{round_index}"
    spec = ClientSpec(
        service_url=server.service_url,
        topic=topic,
        batching=row.batching,
        messages=count,
        message_bytes=config.message_bytes,
        max_pending_messages=config.max_pending_messages,
        receiver_queue_size=config.receiver_queue_size,
        subscription_type=config.subscription_type,
        server_pid=server.pid,
    )
    try:
        server.check_alive()
        if isinstance(server, ReferenceServer):
            before = await reference_entries_written(session, server.metrics_url)
            figures = await run_client_process(spec, f"{server.label}, {mode}")
            after = await reference_entries_written(session, server.metrics_url)
            entries = None if before is None or after is None else after - before
        else:
            figures = await run_client_process(spec, f"{server.label}, {mode}")
            entries = await brokerlab_entries(session, server.url, topic)
    except BenchError as error:
        row.error = str(error) + server.tail(10)
        return
    row.add(figures, entries)


def _ratio(numerator: float | None, denominator: float | None) -> float | None:
    if numerator is None or not denominator:
        return None
    return round(numerator / denominator, 4)


def _report(
    config: BenchConfig,
    rows: list[Row],
    servers: dict[str, WireServer],
    reference: ReferenceServer,
) -> dict[str, Any]:
    reports = [row.report() for row in rows]
    by_key = {(report["server"], report["batching"]): report for report in reports}
    ratios: dict[str, dict[str, float | None]] = {}
    for batching in (True, False):
        ours, theirs = by_key[("brokerlab", batching)], by_key[("reference", batching)]
        ratios[f"batching_{'on' if batching else 'off'}"] = {
            phase: _ratio(ours[f"{phase}_msgs_per_s"], theirs[f"{phase}_msgs_per_s"])
            for phase in ("produce", "consume")
        }
    cost: dict[str, dict[str, float | None]] = {}
    for batching in (True, False):
        on, off = by_key[("brokerlab-dedup", batching)], by_key[("brokerlab", batching)]
        cost[f"batching_{'on' if batching else 'off'}"] = {
            phase: _ratio(on[f"{phase}_msgs_per_s"], off[f"{phase}_msgs_per_s"])
            for phase in ("produce", "consume")
        }
    headline = ratios["batching_on"]
    meets: bool | None = None
    if headline["produce"] is not None and headline["consume"] is not None:
        meets = headline["produce"] >= TARGET_RATIO and headline["consume"] >= TARGET_RATIO
    return {
        "bench": "wire",
        "config": {
            **asdict(config),
            "host": HOST,
            "cpu_count": os.cpu_count() or 0,
            "client": f"pulsar-client {_version('pulsar-client')} (Python, C++ core), "
            "one child process per row and round",
            "brokerlab": "brokerlab serve, storageMode=disk, syncMode=none",
            "brokerlab-dedup": "the same with brokerDeduplicationEnabled=true",
            "reference": f"pulsar-lite {_version('pulsar-lite')} ({reference.binary}), defaults",
            "entries_source": {
                "brokerlab": "internalStats numberOfEntries",
                "reference": "metrics pulsar_entry_size_count, growth over the row",
            },
        },
        "servers": {
            key: {
                "label": server.label,
                "service_url": server.service_url or None,
                "available": all(row.error is None for row in rows if row.server == key),
            }
            for key, server in servers.items()
        },
        "rows": reports,
        "ratios": ratios,
        "deduplication_cost": cost,
        "produce_ratio": headline["produce"],
        "consume_ratio": headline["consume"],
        "target_ratio": TARGET_RATIO,
        "meets_target": meets,
    }


# ---------------------------------------------------------------------- output


def _cell(value: float | int | None, spec: str = ",.0f") -> str:
    return "n/a" if value is None else format(value, spec)


def _cpu_pair(produce: float | None, consume: float | None) -> str:
    return f"{_cell(produce, '.2f')}/{_cell(consume, '.2f')}"


def format_table(result: dict[str, Any]) -> str:
    config = result["config"]
    header = (
        "server",
        "batching",
        "produce msg/s",
        "entries/s",
        "consume msg/s",
        "entries/s",
        "msg/entry",
        "dups",
        "server CPU p/c",
        "client CPU p/c",
    )
    lines_in: list[tuple[str, ...]] = [header]
    failures: dict[str, list[str]] = {}  # error -> the rows it stopped
    for row in result["rows"]:
        batching = "on" if row["batching"] else "off"
        if not row["available"]:
            lines_in.append((row["label"], batching, *(["-"] * (len(header) - 2))))
            failures.setdefault(row["error"], []).append(f"{row['label']}, batching {batching}")
            continue
        lines_in.append(
            (
                row["label"],
                batching,
                _cell(row["produce_msgs_per_s"]),
                _cell(row["produce_entries_per_s"]),
                _cell(row["consume_msgs_per_s"]),
                _cell(row["consume_entries_per_s"]),
                _cell(row["msgs_per_entry"], ".1f"),
                _cell(row["duplicates"], "d"),
                _cpu_pair(row["server_cpu_cores_produce"], row["server_cpu_cores_consume"]),
                _cpu_pair(row["client_cpu_cores_produce"], row["client_cpu_cores_consume"]),
            )
        )
    widths = [max(len(line[i]) for line in lines_in) for i in range(len(header))]
    out = [
        f"brokerlab bench wire: {config['message_bytes']} B messages, "
        f"{config['messages_per_row']:,} per row in {config['rounds']} interleaved round(s); "
        f"{config['client']}",
        f"brokerlab: {config['brokerlab']}; reference: {config['reference']}",
        "",
    ]
    for index, line in enumerate(lines_in):
        cells = [
            cell.ljust(width) if column < 2 else cell.rjust(width)
            for column, (cell, width) in enumerate(zip(line, widths, strict=True))
        ]
        out.append("  ".join(cells).rstrip())
        if index == 0:
            out.append("  ".join("-" * width for width in widths))
    out.append("")
    target = result["target_ratio"]
    for mode, ratios in result["ratios"].items():
        produce, consume = ratios["produce"], ratios["consume"]
        text = (
            f"brokerlab / pulsar-lite, {mode.replace('_', ' ')}: produce "
            f"{_cell(produce, '.2f')}, consume {_cell(consume, '.2f')}"
        )
        if mode == "batching_on" and result["meets_target"] is not None:
            verdict = "meets" if result["meets_target"] else "BELOW"
            text += f" ({verdict} the target {target:.2f} of both)"
        out.append(text)
    for mode, phases in result["deduplication_cost"].items():
        out.append(
            f"brokerlab dedup on / off, {mode.replace('_', ' ')}: produce "
            f"{_cell(phases['produce'], '.2f')}, consume {_cell(phases['consume'], '.2f')}"
        )
    out += [
        "msg/s = distinct messages / phase time; entries/s = broker entries / phase time; "
        "dups = messages delivered more than once; CPU = cores busy during produce/consume "
        "(server process; client = its child process).",
        "entries: brokerlab from internalStats numberOfEntries; pulsar-lite from its "
        "metrics (pulsar_entry_size_count, growth over the row).",
    ]
    if config["cpu_count"] <= 2:
        out.append(
            f"note: {config['cpu_count']} CPU core(s) shared by the client and the server; a "
            "client near 1.00 cores is the bottleneck and the ratio reads close to 1."
        )
    for error, stopped in failures.items():
        out += ["", f"not measured: {'; '.join(stopped)}: {error}"]
    return "\n".join(out)


def main(quick: bool = False, as_json: bool = False) -> int:
    """Run, print the table (or one JSON object); 1 if any row could not be measured."""
    config = QUICK if quick else FULL
    data_root = pathlib.Path(tempfile.mkdtemp(prefix="brokerlab-bench-wire-"))
    try:
        result = uvloop.run(run_rows(config, data_root))
    except (BenchError, aiohttp.ClientError, OSError) as error:
        print(f"brokerlab bench wire: {type(error).__name__}: {error}", file=sys.stderr)
        return 1
    finally:
        shutil.rmtree(data_root, ignore_errors=True)
    result["quick"] = quick
    print(orjson.dumps(result).decode() if as_json else format_table(result))
    unmeasured = [row for row in result["rows"] if not row["available"]]
    for row in unmeasured:
        mode = "on" if row["batching"] else "off"
        first_line = (row["error"] or "").splitlines()[0] if row["error"] else ""
        print(
            f"brokerlab bench wire: {row['label']}, batching {mode}, not measured: {first_line}",
            file=sys.stderr,
        )
    return 1 if unmeasured else 0


if __name__ == "__main__":
    sys.exit(client_main(sys.argv[1:]))
