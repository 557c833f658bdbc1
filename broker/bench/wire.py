"""``brokerlab bench wire``: Pulsar's binary protocol, brokerlab against pulsar-lite.

The official Python client (``pulsar-client``, C++ core) produces 1 KiB messages and
consumes them again, on brokerlab (``brokerlab serve``, its binary protocol server) and,
in the same run, on ``pulsar-lite`` (the Rust Pulsar-compatible server from PyPI) as the
reference. For each server x batching (on, off), ``clients`` client processes
(:mod:`broker.bench.wire_client`, 4 in a full run, 2 with ``--quick``) each take a fresh
topic and their share of the messages, and run in step: the bench starts their produce
phases together once all are subscribed, and their consume phases together once all
have produced; a phase ends when its last client reports. One Python client process
was what set the pace before (issue #38: about 1.2 cores with batching on, on both
servers): several of them load the server instead. In each client process:

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
(issue #15's target: >= 0.8 of both with batching on; batching off is reported), and
beside it the broker's CPU per message (issue #38's target: brokerlab's at most
pulsar-lite's, batched and unbatched), printed as ``broker CPU per message, brokerlab /
pulsar-lite (batched): X`` and the same ``(unbatched)``:

- broker CPU: every live thread of the server process and of its child processes, from
  ``/proc/PID/task/TID/schedstat`` (nanoseconds; 10 ms ticks are too coarse for a quick
  run), read at the phase boundaries; per million messages over both phases. Each
  server's CPU with no work is read for ``idle_window_s`` before the rows, and the same
  figure net of it is reported too: brokerlab's timers keep about 0.3% of a core busy
  when nothing happens (2% before its cache eviction timer slept through the rounds
  with nothing to do), pulsar-lite almost nothing, and at a few thousand messages a
  second that is a visible share of a batched figure;
- the client check: each client process reports its CPU time over each phase (the whole
  process, and its Python thread alone, which builds or takes every message). A phase
  whose busiest client process was at or above ``CLIENT_BUSY_LIMIT`` of a core is paced
  by the client; otherwise by the server when brokerlab's event loop thread was at or
  above ``LOOP_BUSY_LIMIT``, by the machine's cores when all of them were at least
  ``MACHINE_BUSY_LIMIT`` busy (every process counted: on a shared machine that is
  usually the case), else by latency. The bench prints whether any measured phase was
  client-paced, with the busiest client's figures. The CPU per message is what compares
  the servers whoever sets the pace: it does not depend on the rate the machine allows.

The bench reports the ratios and whether they meet the targets; it never fails on them.

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
waits for its client processes, each a Python thread (building each message in Python)
and the client's C++ I/O and listener threads. The server under test has the rest:
brokerlab runs one event loop (plus its storage writer threads), so at most about one
core; pulsar-lite runs a tokio worker per core and its own write threads, so it can
spread over both cores, competing with the clients. The other servers sit idle (their
idle CPU is not counted: each server's figures are its own process tree's). Rows run
interleaved over rounds (server order alternating) so drift in the machine's
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
from collections.abc import Coroutine, Iterable
from dataclasses import asdict, dataclass, field
from typing import Any, TypeVar

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
    child_pids,
)
from broker.bench.wire_client import (
    ERROR_PREFIX,
    GO_LINE,
    PRODUCED_PREFIX,
    READY_LINE,
    RESULT_PREFIX,
    ClientSpec,
)

T = TypeVar("T")
HOST = "127.0.0.1"
#: the line ``brokerlab serve`` prints once its binary protocol server listens
BINARY_READY_PREFIX = "brokerlab binary protocol on "
#: how long after its HTTP line brokerlab may take to print its binary protocol line
BINARY_LINE_GRACE_S = 2.0
REFERENCE_READY_MARK = "Server listening on "
REFERENCE_START_ATTEMPTS = 3  # ports are picked before the start: another process may win
REFERENCE_ATTEMPTS = 2  # runs of a pulsar-lite row slice (see _run_slice)
TENANT_NAMESPACE = "public/default"
TARGET_RATIO = 0.8
CPU_TARGET_RATIO = 1.0  # issue #38: brokerlab's CPU per message at most pulsar-lite's
#: A client process busy for this share of a core over its phase sets the pace: its
#: Python thread builds or takes every message, holding the GIL the C++ threads' callbacks
#: need too, so it saturates well before the process's threads fill their cores.
CLIENT_BUSY_LIMIT = 0.8
LOOP_BUSY_LIMIT = 0.8  # brokerlab's event loop this busy: the server sets the pace
MACHINE_BUSY_LIMIT = 0.9  # the machine's cores this busy (all processes): they set it
CLIENT_DEADLINE_S = 600.0  # a whole row slice, client start-up included
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
    clients: int  # client processes a slice, each on a topic of its own, run together
    #: how long the servers' CPU is read while all of them idle, before the rows
    idle_window_s: float = 2.0
    message_bytes: int = 1024
    max_pending_messages: int = 1000  # the Python client's default
    receiver_queue_size: int = 1000  # the Python client's default
    #: one consumer on a Shared subscription: pulsar-lite 0.2.0's Exclusive dispatcher
    #: delivers duplicates and stalls with this workload (see the module docstring)
    subscription_type: str = "Shared"

    def messages_in_round(self, round_index: int) -> int:
        base, extra = divmod(self.messages_per_row, self.rounds)
        return base + (1 if round_index < extra else 0)


QUICK = BenchConfig(messages_per_row=1000, rounds=1, clients=2, idle_window_s=0.5)
FULL = BenchConfig(messages_per_row=60_000, rounds=3, clients=4)


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


# ---------------------------------------------------------------------- CPU accounting


def _schedstat_seconds(path: str) -> float | None:
    """A task's time on a CPU (user and system), in ns precision, from its schedstat."""
    try:
        with open(path, "rb") as stat:
            return int(stat.read().split()[0]) / 1e9
    except (OSError, ValueError, IndexError):
        return None


def server_cpu_seconds(pid: int) -> float | None:
    """CPU time of a server: every live thread of it and of its live child processes.

    From each thread's ``/proc/PID/task/TID/schedstat`` (nanoseconds): a phase of a quick
    run lasts a fraction of a second, in which ``/proc/PID/stat``'s 10 ms ticks would
    read pulsar-lite's batched CPU as 0 or 1 tick. A thread that ends inside a phase takes
    its time with it; neither server starts threads per message (brokerlab's writer and
    executor threads and pulsar-lite's tokio workers live as long as the server). Falls
    back to the tick count where schedstat is missing.
    """
    total = 0.0
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    for task in tasks:
        seconds = _schedstat_seconds(f"/proc/{pid}/task/{task}/schedstat")
        if seconds is None:
            return _cpu_seconds(pid)
        total += seconds
    for child in child_pids(pid):
        total += server_cpu_seconds(child) or 0.0
    return total


def loop_thread_seconds(pid: int) -> float | None:
    """CPU time of a server's main thread: brokerlab's event loop, which one core bounds."""
    return _schedstat_seconds(f"/proc/{pid}/task/{pid}/schedstat")


def machine_busy_seconds() -> float | None:
    """CPU seconds all cores spent busy since boot (every process: others' work too)."""
    try:
        with open("/proc/stat", "rb") as stat:
            fields = stat.readline().split()
    except OSError:
        return None
    if not fields or fields[0] != b"cpu":
        return None
    ticks = [int(value) for value in fields[1:9]]  # user .. steal; guest is inside user
    idle = ticks[3] + ticks[4]  # idle, iowait
    return (sum(ticks) - idle) / os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True, slots=True)
class Mark:
    """The state at a phase boundary: wall time, the server's CPU, the machine's."""

    wall: float
    server_cpu: float | None
    loop_cpu: float | None
    machine_busy: float | None

    @classmethod
    def now(cls, server: WireServer) -> Mark:
        pid = server.pid if server.process and server.process.returncode is None else None
        return cls(
            wall=time.perf_counter(),
            server_cpu=None if pid is None else server_cpu_seconds(pid),
            loop_cpu=None if pid is None else loop_thread_seconds(pid),
            machine_busy=machine_busy_seconds(),
        )


async def idle_cpu_cores(servers: dict[str, WireServer], window_s: float) -> dict[str, float]:
    """Each running server's CPU over ``window_s`` while none has work, in cores: what it
    spends whatever its load (brokerlab's cache eviction timer, every
    managedLedgerCacheEvictionIntervalMs as in Pulsar, and its other timers)."""
    running = {key: server for key, server in servers.items() if server.pid is not None}
    before = {key: Mark.now(server) for key, server in running.items()}
    await asyncio.sleep(window_s)
    after = {key: Mark.now(server) for key, server in running.items()}
    idle: dict[str, float] = {}
    for key in running:
        spent = _delta(before[key].server_cpu, after[key].server_cpu)
        if spent is not None:
            idle[key] = max(spent, 0.0) / (after[key].wall - before[key].wall)
    return idle


def _delta(before: float | None, after: float | None) -> float | None:
    return None if before is None or after is None else after - before


# ---------------------------------------------------------------------- the client processes


class ClientProcess:
    """``python -m broker.bench.wire_client SPEC``, driven phase by phase over its stdin."""

    def __init__(self, spec: ClientSpec, what: str) -> None:
        self.spec = spec
        self.what = what
        self.process: asyncio.subprocess.Process | None = None
        self.output: list[str] = []

    async def start(self) -> None:
        self.process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "broker.bench.wire_client",
            orjson.dumps(asdict(self.spec)).decode(),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )

    async def expect(self, prefix: str) -> str:
        """The rest of the next line that starts with ``prefix``; BenchError on failure."""
        assert self.process is not None and self.process.stdout is not None
        while raw := await self.process.stdout.readline():
            line = raw.decode(errors="replace").rstrip("\n")
            if line.startswith(prefix):
                return line[len(prefix) :]
            self.output.append(line)
            if line.startswith(ERROR_PREFIX):
                break
        await self.process.wait()
        tail = "\n".join(self.output[-15:])
        raise BenchError(f"{self.what}: client exited with code {self.process.returncode}\n{tail}")

    async def go(self) -> None:
        assert self.process is not None and self.process.stdin is not None
        self.process.stdin.write(f"{GO_LINE}\n".encode())
        await self.process.stdin.drain()

    async def stop(self) -> None:
        if self.process is None:
            return
        if self.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.process.kill()
        await self.process.wait()


async def _all(steps: Iterable[Coroutine[Any, Any, T]]) -> list[T]:
    """Every step's result, in order; the first failure cancels the others (a client that
    failed ends the slice: the others are not waited for) and is raised."""
    tasks = [asyncio.ensure_future(step) for step in steps]
    try:
        return await asyncio.gather(*tasks)
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise


async def run_clients(server: WireServer, specs: list[ClientSpec], what: str) -> dict[str, Any]:
    """One row slice: ``specs`` in client processes of their own, their produce phases
    started together and their consume phases together; the slice's figures.

    The server's CPU and the wall time are read here, at the phase boundaries of all
    clients at once: a phase ends when its last client reports.
    """
    clients = [ClientProcess(spec, f"{what}, client {n}") for n, spec in enumerate(specs)]
    try:
        async with asyncio.timeout(CLIENT_DEADLINE_S):
            await _all(client.start() for client in clients)
            await _all(client.expect(READY_LINE) for client in clients)
            marks = [Mark.now(server)]
            await _all(client.go() for client in clients)
            await _all(client.expect(PRODUCED_PREFIX) for client in clients)
            marks.append(Mark.now(server))
            await _all(client.go() for client in clients)
            results = await _all(client.expect(RESULT_PREFIX) for client in clients)
            marks.append(Mark.now(server))
    except TimeoutError:
        raise BenchError(f"{what}: clients not done after {CLIENT_DEADLINE_S:.0f} s") from None
    finally:
        await asyncio.gather(*(client.stop() for client in clients))
    figures = [orjson.loads(result) for result in results]
    start, middle, end = marks
    return {
        "messages": sum(figure["messages"] for figure in figures),
        "received": sum(figure["received"] for figure in figures),
        "produce_s": middle.wall - start.wall,
        "consume_s": end.wall - middle.wall,
        "server_cpu_produce_s": _delta(start.server_cpu, middle.server_cpu),
        "server_cpu_consume_s": _delta(middle.server_cpu, end.server_cpu),
        "loop_cpu_produce_s": _delta(start.loop_cpu, middle.loop_cpu),
        "loop_cpu_consume_s": _delta(middle.loop_cpu, end.loop_cpu),
        "machine_busy_produce_s": _delta(start.machine_busy, middle.machine_busy),
        "machine_busy_consume_s": _delta(middle.machine_busy, end.machine_busy),
        "clients": [{"produce": f["produce"], "consume": f["consume"]} for f in figures],
    }


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
    """One server x batching mode, summed over its rounds."""

    server: str  # a key of SERVERS
    batching: bool
    error: str | None = None
    retries: list[str] = field(default_factory=list)  # why a slice was run again
    clients: int = 0  # client processes a slice
    messages: int = 0
    received: int = 0  # duplicates included
    entries: int | None = 0  # None once any slice's count could not be read
    produce_s: float = 0.0
    consume_s: float = 0.0
    # None once any slice's figure could not be read
    server_cpu_produce_s: float | None = 0.0
    server_cpu_consume_s: float | None = 0.0
    loop_cpu_produce_s: float | None = 0.0
    loop_cpu_consume_s: float | None = 0.0
    machine_busy_produce_s: float | None = 0.0
    machine_busy_consume_s: float | None = 0.0
    client_cpu_produce_s: float = 0.0  # all client processes together
    client_cpu_consume_s: float = 0.0
    # the busiest client process (over every slice), in cores over its own phase time
    busiest_process_produce: float = 0.0
    busiest_process_consume: float = 0.0
    busiest_thread_produce: float = 0.0  # the busiest client's Python thread
    busiest_thread_consume: float = 0.0

    @property
    def key(self) -> str:
        return f"{self.server}_batching_{'on' if self.batching else 'off'}"

    def add(self, figures: dict[str, Any], entries: int | None) -> None:
        self.clients = len(figures["clients"])
        self.messages += figures["messages"]
        self.received += figures["received"]
        self.entries = None if self.entries is None or entries is None else self.entries + entries
        for name in ("produce_s", "consume_s"):
            setattr(self, name, getattr(self, name) + figures[name])
        for kind in ("server_cpu", "loop_cpu", "machine_busy"):
            for phase in ("produce", "consume"):
                name = f"{kind}_{phase}_s"
                mine, theirs = getattr(self, name), figures[name]
                setattr(self, name, None if mine is None or theirs is None else mine + theirs)
        for client in figures["clients"]:
            for phase in ("produce", "consume"):
                spent = client[phase]
                name = f"client_cpu_{phase}_s"
                setattr(self, name, getattr(self, name) + spent["cpu_s"])
                if spent["wall_s"] <= 0:
                    continue
                for kind, key in (("process", "cpu_s"), ("thread", "thread_cpu_s")):
                    name = f"busiest_{kind}_{phase}"
                    setattr(self, name, max(getattr(self, name), spent[key] / spent["wall_s"]))

    def paced_by(self, phase: str, cpu_count: int) -> str | None:
        """What set this phase's pace, judged from who was busy (see CLIENT_BUSY_LIMIT)."""
        seconds = getattr(self, f"{phase}_s")
        if self.error is not None or seconds <= 0:
            return None
        busiest = max(getattr(self, f"busiest_process_{phase}"), 0.0)
        if busiest >= CLIENT_BUSY_LIMIT:
            return "client"
        loop = getattr(self, f"loop_cpu_{phase}_s")
        if self.server != "reference" and loop is not None and loop / seconds >= LOOP_BUSY_LIMIT:
            return "server"
        machine = getattr(self, f"machine_busy_{phase}_s")
        if machine is not None and machine / seconds >= MACHINE_BUSY_LIMIT * cpu_count:
            return "cores"
        return "latency"

    def report(self, cpu_count: int, idle_cores: float | None = None) -> dict[str, Any]:
        measured = self.error is None and self.produce_s > 0 and self.consume_s > 0

        def per_s(count: int | None, seconds: float) -> float | None:
            return round(count / seconds, 1) if measured and count is not None else None

        def cores(cpu_s: float | None, seconds: float) -> float | None:
            return round(cpu_s / seconds, 3) if measured and cpu_s is not None else None

        def per_million(*cpu_s: float | None) -> float | None:
            if not measured or not self.messages or any(value is None for value in cpu_s):
                return None
            return round(sum(value or 0.0 for value in cpu_s) / self.messages * 1e6, 3)

        ours = self.server != "reference"  # brokerlab's main thread is its event loop
        net: float | None = None
        total = per_million(self.server_cpu_produce_s, self.server_cpu_consume_s)
        if total is not None and idle_cores is not None:
            idle_s = idle_cores * (self.produce_s + self.consume_s)
            net = round(total - idle_s / self.messages * 1e6, 3)
        return {
            "row": self.key,
            "server": self.server,
            "label": SERVER_LABELS[self.server],
            "batching": self.batching,
            "available": self.error is None,
            "error": self.error,
            "retries": self.retries,
            "clients": self.clients,
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
            "server_cpu_s_per_million": per_million(
                self.server_cpu_produce_s, self.server_cpu_consume_s
            ),
            "server_cpu_s_per_million_net_of_idle": net,
            "server_cpu_s_per_million_produce": per_million(self.server_cpu_produce_s),
            "server_cpu_s_per_million_consume": per_million(self.server_cpu_consume_s),
            "server_cpu_cores_produce": cores(self.server_cpu_produce_s, self.produce_s),
            "server_cpu_cores_consume": cores(self.server_cpu_consume_s, self.consume_s),
            "server_loop_cores_produce": (
                cores(self.loop_cpu_produce_s, self.produce_s) if ours else None
            ),
            "server_loop_cores_consume": (
                cores(self.loop_cpu_consume_s, self.consume_s) if ours else None
            ),
            "machine_busy_cores_produce": cores(self.machine_busy_produce_s, self.produce_s),
            "machine_busy_cores_consume": cores(self.machine_busy_consume_s, self.consume_s),
            "client_cpu_cores_produce": cores(self.client_cpu_produce_s, self.produce_s),
            "client_cpu_cores_consume": cores(self.client_cpu_consume_s, self.consume_s),
            "client_process_cores_max_produce": (
                round(self.busiest_process_produce, 3) if measured else None
            ),
            "client_process_cores_max_consume": (
                round(self.busiest_process_consume, 3) if measured else None
            ),
            "client_thread_cores_max_produce": (
                round(self.busiest_thread_produce, 3) if measured else None
            ),
            "client_thread_cores_max_consume": (
                round(self.busiest_thread_consume, 3) if measured else None
            ),
            "paced_by": {
                phase: self.paced_by(phase, cpu_count) if measured else None
                for phase in ("produce", "consume")
            },
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
        idle = await idle_cpu_cores(
            {key: server for key, server in servers.items() if server.process is not None},
            config.idle_window_s,
        )
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
        return _report(config, list(rows.values()), servers, reference, idle)
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
    """One round of one row: ``config.clients`` client processes, each on a topic of its
    own with its share of ``count`` messages; a failure marks the row failed. A slice
    that fails on pulsar-lite is run again once on fresh topics (reported as a retry):
    its Shared dispatcher (0.2.0) left a batched consumer without some of its messages
    in about one full run in five here, which would leave the run without a reference.
    brokerlab's slices are never retried: a failure there is brokerlab's to fix."""
    mode = "batching-on" if row.batching else "batching-off"
    base, extra = divmod(count, config.clients)
    what = f"{server.label}, {mode}"
    attempts = REFERENCE_ATTEMPTS if isinstance(server, ReferenceServer) else 1
    for attempt in range(attempts):
        retry = f"-retry{attempt}" if attempt else ""
        specs = [
            ClientSpec(
                service_url=server.service_url,
                topic=f"persistent://{TENANT_NAMESPACE}/wire-{mode}-r{round_index}-c{index}{retry}",
                batching=row.batching,
                messages=base + (1 if index < extra else 0),
                message_bytes=config.message_bytes,
                max_pending_messages=config.max_pending_messages,
                receiver_queue_size=config.receiver_queue_size,
                subscription_type=config.subscription_type,
            )
            for index in range(config.clients)
        ]
        specs = [spec for spec in specs if spec.messages > 0]
        try:
            server.check_alive()
            if isinstance(server, ReferenceServer):
                before = await reference_entries_written(session, server.metrics_url)
                figures = await run_clients(server, specs, what)
                after = await reference_entries_written(session, server.metrics_url)
                entries = None if before is None or after is None else after - before
            else:
                figures = await run_clients(server, specs, what)
                counts = [await brokerlab_entries(session, server.url, s.topic) for s in specs]
                entries = None if None in counts else sum(filter(None, counts))
        except BenchError as error:
            alive = server.process is None or server.process.returncode is None
            if attempt + 1 < attempts and alive:
                row.retries.append(f"round {round_index}: " + str(error).splitlines()[-1])
                continue
            row.error = str(error) + server.tail(10)
            return
        row.add(figures, entries)
        return


def _ratio(numerator: float | None, denominator: float | None) -> float | None:
    if numerator is None or not denominator:
        return None
    return round(numerator / denominator, 4)


def _report(
    config: BenchConfig,
    rows: list[Row],
    servers: dict[str, WireServer],
    reference: ReferenceServer,
    idle: dict[str, float],
) -> dict[str, Any]:
    cpu_count = os.cpu_count() or 0
    reports = [row.report(cpu_count, idle.get(row.server)) for row in rows]
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
    cpu_ratios = {
        mode: _ratio(
            by_key[("brokerlab", batching)]["server_cpu_s_per_million"],
            by_key[("reference", batching)]["server_cpu_s_per_million"],
        )
        for mode, batching in (("batched", True), ("unbatched", False))
    }
    cpu_ratios_net = {
        mode: _ratio(
            by_key[("brokerlab", batching)]["server_cpu_s_per_million_net_of_idle"],
            by_key[("reference", batching)]["server_cpu_s_per_million_net_of_idle"],
        )
        for mode, batching in (("batched", True), ("unbatched", False))
    }
    cpu_known = [ratio for ratio in cpu_ratios.values() if ratio is not None]
    headline = ratios["batching_on"]
    meets: bool | None = None
    if headline["produce"] is not None and headline["consume"] is not None:
        meets = headline["produce"] >= TARGET_RATIO and headline["consume"] >= TARGET_RATIO
    return {
        "bench": "wire",
        "config": {
            **asdict(config),
            "host": HOST,
            "cpu_count": cpu_count,
            "client": f"pulsar-client {_version('pulsar-client')} (Python, C++ core), "
            f"{config.clients} child processes per row and round, a topic each",
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
        "cpu_per_message_ratios": cpu_ratios,
        "cpu_per_message_ratios_net_of_idle": cpu_ratios_net,
        "idle_cpu_cores": {key: round(cores, 4) for key, cores in idle.items()},
        "cpu_target_ratio": CPU_TARGET_RATIO,
        "meets_cpu_target": (
            all(ratio <= CPU_TARGET_RATIO for ratio in cpu_known)
            if len(cpu_known) == len(cpu_ratios)
            else None
        ),
        "client_check": _client_check(reports),
    }


def _client_check(reports: list[dict[str, Any]]) -> dict[str, Any]:
    """Whether any client process was busy enough to set the pace of a measured phase."""
    measured = [report for report in reports if report["available"]]
    phases = [(report, phase) for report in measured for phase in ("produce", "consume")]
    busiest = max(
        (report[f"client_process_cores_max_{phase}"] or 0.0 for report, phase in phases),
        default=None,
    )
    busiest_thread = max(
        (report[f"client_thread_cores_max_{phase}"] or 0.0 for report, phase in phases),
        default=None,
    )
    bound = [
        f"{report['label']}, batching {'on' if report['batching'] else 'off'}, {phase}"
        for report, phase in phases
        if report["paced_by"][phase] == "client"
    ]
    return {
        "limit_cores": CLIENT_BUSY_LIMIT,
        "busiest_process_cores": busiest,
        "busiest_thread_cores": busiest_thread,
        "client_bound": bound,
        "client_not_bottleneck": None if not phases else not bound,
    }


# ---------------------------------------------------------------------- output


def _cell(value: float | int | None, spec: str = ",.0f") -> str:
    return "n/a" if value is None else format(value, spec)


def _cpu_pair(produce: float | None, consume: float | None) -> str:
    return f"{_cell(produce, '.2f')}/{_cell(consume, '.2f')}"


def _table(rows: list[tuple[str, ...]], left: int = 2) -> list[str]:
    """Lines of a text table: ``rows[0]`` the header, the first ``left`` columns left-aligned."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    out = []
    for index, row in enumerate(rows):
        cells = [
            cell.ljust(width) if column < left else cell.rjust(width)
            for column, (cell, width) in enumerate(zip(row, widths, strict=True))
        ]
        out.append("  ".join(cells).rstrip())
        if index == 0:
            out.append("  ".join("-" * width for width in widths))
    return out


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
    )
    cpu_header = (
        "server",
        "batching",
        "server CPU s/M msg",
        "net of idle",
        "server cores p/c",
        "loop p/c",
        "clients",
        "client cores p/c",
        "busiest client p/c",
        "its thread p/c",
        "machine p/c",
        "paced by p/c",
    )
    lines_in: list[tuple[str, ...]] = [header]
    cpu_lines: list[tuple[str, ...]] = [cpu_header]
    failures: dict[str, list[str]] = {}  # error -> the rows it stopped
    for row in result["rows"]:
        batching = "on" if row["batching"] else "off"
        if not row["available"]:
            lines_in.append((row["label"], batching, *(["-"] * (len(header) - 2))))
            cpu_lines.append((row["label"], batching, *(["-"] * (len(cpu_header) - 2))))
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
            )
        )

        def pair(name: str, row: dict[str, Any] = row) -> str:
            return _cpu_pair(row[f"{name}_produce"], row[f"{name}_consume"])

        paced = row["paced_by"]
        cpu_lines.append(
            (
                row["label"],
                batching,
                _cell(row["server_cpu_s_per_million"], ".2f"),
                _cell(row["server_cpu_s_per_million_net_of_idle"], ".2f"),
                pair("server_cpu_cores"),
                pair("server_loop_cores"),
                str(row["clients"]),
                pair("client_cpu_cores"),
                pair("client_process_cores_max"),
                pair("client_thread_cores_max"),
                pair("machine_busy_cores"),
                f"{paced['produce'] or 'n/a'}/{paced['consume'] or 'n/a'}",
            )
        )
    out = [
        f"brokerlab bench wire: {config['message_bytes']} B messages, "
        f"{config['messages_per_row']:,} per row in {config['rounds']} interleaved round(s); "
        f"{config['client']}",
        f"brokerlab: {config['brokerlab']}; reference: {config['reference']}",
        "",
        *_table(lines_in),
        "",
        *_table(cpu_lines),
        "",
    ]
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
    for mode, ratio in result["cpu_per_message_ratios"].items():
        out.append(
            f"broker CPU per message, brokerlab / pulsar-lite ({mode}): {_cell(ratio, '.2f')}"
        )
    idle = result["idle_cpu_cores"]
    net = result["cpu_per_message_ratios_net_of_idle"]
    out.append(
        "  the same net of each server's idle CPU (brokerlab "
        f"{_cell(idle.get('brokerlab'), '.3f')} cores, pulsar-lite "
        f"{_cell(idle.get('reference'), '.3f')} cores with no work): batched "
        f"{_cell(net['batched'], '.2f')}, unbatched {_cell(net['unbatched'], '.2f')}"
    )
    target_cpu = result["cpu_target_ratio"]
    verdicts = [
        f"{mode} {'meets' if ratio <= target_cpu else 'ABOVE'}"
        for mode, ratio in result["cpu_per_message_ratios"].items()
        if ratio is not None
    ]
    if verdicts:
        out.append(
            f"broker CPU per message against the target of at most {target_cpu:.2f}: "
            + ", ".join(verdicts)
        )
    out.append(_client_check_line(result["client_check"], result["rows"]))
    out += [
        "msg/s = distinct messages / phase time (all clients together); entries/s = broker "
        "entries / phase time; dups = messages delivered more than once.",
        "server CPU s/M msg = the server's CPU seconds (all its threads and child processes) "
        "over produce and consume, per million messages; net of idle = less what the server "
        "spends with no work over the same time; cores = CPU over a phase's time: "
        "server; loop = brokerlab's event loop thread; client = all client processes; busiest "
        "client = the busiest client process over its own phase time, and its Python thread; "
        "machine = every core's busy time, other processes' included.",
        "paced by: client = a client process at >= "
        f"{CLIENT_BUSY_LIMIT:.2f} cores; server = brokerlab's event loop at >= "
        f"{LOOP_BUSY_LIMIT:.2f}; cores = the machine's {config['cpu_count']} cores at >= "
        f"{MACHINE_BUSY_LIMIT:.0%}; latency = none of those (round trips set the pace).",
        "entries: brokerlab from internalStats numberOfEntries; pulsar-lite from its "
        "metrics (pulsar_entry_size_count, growth over the row).",
    ]
    for row in result["rows"]:
        for retry in row["retries"]:
            batching = "on" if row["batching"] else "off"
            out.append(f"run again: {row['label']}, batching {batching}, {retry}")
    for error, stopped in failures.items():
        out += ["", f"not measured: {'; '.join(stopped)}: {error}"]
    return "\n".join(out)


def _client_check_line(check: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    """The printed answer to "is the client the bottleneck?", with its figures."""
    if check["client_not_bottleneck"] is None:
        return "client check: n/a (no row measured)"
    clients = sorted({row["clients"] for row in rows if row["available"]})
    figures = (
        f"{'/'.join(map(str, clients))} client processes a row; the busiest used "
        f"{check['busiest_process_cores']:.2f} cores over its phase (its Python thread "
        f"{check['busiest_thread_cores']:.2f})"
    )
    if check["client_not_bottleneck"]:
        return (
            f"client check: the client is not the bottleneck: {figures}, below "
            f"{check['limit_cores']:.2f} of a core in every row and phase (see paced by)"
        )
    return (
        f"client check: CLIENT-BOUND in {'; '.join(check['client_bound'])}: {figures}, "
        f"at or above {check['limit_cores']:.2f} of a core"
    )


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
