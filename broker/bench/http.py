"""``brokerlab bench http``: produce throughput over HTTP, as a fraction of the stack's
ceiling.

Rows, all for 1 KiB messages sent 100 to a request by 16 concurrent producers, each
keeping 4 requests in flight as a Pulsar producer keeps sends pending (``BenchConfig``):

- ``ceiling``: a bare aiohttp endpoint on uvloop (``broker.bench.bare_server``) doing the
  produce work the contract asks of any broker and nothing else: it parses the same JSON
  with the parser the broker's validation runs on (pydantic-core's, faster here than
  orjson), base64-decodes every payload and answers one message id per message, the
  decoding and the answer done by the broker's own functions, so a speed-up of work
  every broker does lifts both sides of the ratio;
- ``ceiling_produce_consume``: the same bare server with one consumer built the same way:
  produces keep their decoded payloads in memory, and the consumer's long polls get them
  back encoded as the broker encodes them (base64 payload, id, properties, times); the
  consumer acks as below;
- ``produce``: the real broker (``brokerlab serve``, on-disk storage in a temporary data
  directory) with ``syncMode=none`` (the headline) and ``syncMode=batch`` (the default,
  so the cost of fsync shows);
- ``produce+consume``: the ``syncMode=none`` broker with one Exclusive consumer that
  long-polls and acks cumulatively while the producers run; its rate is messages
  consumed per second until every produced message was consumed;
- ``produce+consume, traced``: the same on a broker recording its access trace
  (``brokerlabTraceDir``): an add, a read and a release per message. Its rate over the
  untraced row is what tracing costs;
- ``produce, batched`` and ``produce+consume, batched``: the ``syncMode=none`` rows with
  ``"batch": true`` in every request, so its 100 messages are stored as one batched
  entry, as a Pulsar producer with batching on (the client's default) sends them. The
  ceilings are the same: the bare server parses the same JSON and ignores the flag.

The headlines are ``produce / ceiling`` (target >= 0.6, for syncMode=none and for
syncMode=batch alike) and ``produce+consume / ceiling_produce_consume`` (target >= 0.5),
measured in one run, never an absolute time:
the client runs in this process and the servers in child processes on a shared, noisy
machine. The rows run in rounds, and within a round every row's slice sits between two
slices of its ceiling (``C r1 C r2 C ...``): a row's ratio in a round is its rate over
the mean of those two ceiling rates, taken seconds apart from its own, and a row's ratio
is the median of its rounds' ratios, printed with a distribution-free interval for that
median (order statistics of the rounds), so neither the machine's load drifting over the
run nor one disturbed slice moves the headline. All traffic goes to 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import base64
import collections
import contextlib
import math
import os
import pathlib
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import asdict, dataclass, field
from typing import Any

import aiohttp
import orjson
import uvloop

import broker
from broker.bench.bare_server import READY_PREFIX as BARE_READY_PREFIX
from broker.http.b64_entries import compiled_base64_encoder
from broker.http.codec import default_codec_processes
from broker.ledger.entry import compiled_encoder
from storage_stub.bookie.direct_writer import thread_writer_crc
from storage_stub.bookie.frame import compiled_frames

HOST = "127.0.0.1"
BROKER_READY_PREFIX = "brokerlab listening on "
STARTUP_DEADLINE_S = 60.0
STOP_DEADLINE_S = 30.0
REQUEST_TIMEOUT_S = 60.0
CONSUMER_STALL_S = 30.0  # no message for this long while some are missing: give up
TARGET_PRODUCE_RATIO = 0.6
TARGET_PRODUCE_CONSUME_RATIO = 0.5
CEILING = "ceiling"
CEILING_PRODUCE_CONSUME = "ceiling_produce_consume"
TENANT_NAMESPACE = "bench/http"
SUBSCRIPTION = "bench"


CEILING_DOES = (
    "bare aiohttp+uvloop produce endpoint: parses the same JSON (pydantic-core's parser, "
    "the broker's), base64-decodes "
    "every payload and answers one message id per message with the broker's own "
    "functions (pybase64; the answer formatted directly); no storage"
)
CEILING_PRODUCE_CONSUME_DOES = (
    "the bare produce endpoint keeping decoded payloads in memory, and a bare consumer "
    "whose long polls return them base64-encoded with the broker's fields; acks parsed, "
    "answered 204"
)


class BenchError(Exception):
    """The benchmark could not run to the end (a server failed, a request was refused)."""


@dataclass(frozen=True, slots=True)
class BenchConfig:
    #: measured produce requests per row, over all rounds (a ceiling row sends one such
    #: slice before its first row and one after each of its rows, every round)
    requests_per_row: int
    rounds: int  # rows run interleaved, one slice of requests per round
    warmup_requests: int  # unmeasured requests sent to each server first
    messages_per_request: int = 100
    message_bytes: int = 1024
    #: concurrent producers. With 4 (one request in flight each), the broker's loop
    #: idled whenever all of them waited on the same storage write.
    producers: int = 16
    #: produce requests each producer keeps in flight (one pooled connection each): a
    #: Pulsar producer does not wait for one send's receipt before the next, it keeps
    #: up to ``maxPendingMessages`` pending (the official Python client's default:
    #: 1,000, ten of these requests); 4 keeps 400 (10 made a run erratic: 160
    #: connections, docs/benchmarks.md). With one in flight (the bench until 2026-11-29)
    #: a producer was a synchronous one, and a durable broker's rate was its group
    #: commit's latency (16 requests over 12-18 ms from arrival to receipt on an idle
    #: machine), whatever the broker's capacity.
    pending_per_producer: int = 4
    receiver_queue_size: int = 1000
    max_poll_messages: int = 1000
    poll_timeout_ms: int = 1000

    @property
    def in_flight(self) -> int:
        """Produce requests in flight at once over all producers."""
        return self.producers * self.pending_per_producer

    def requests_in_round(self, round_index: int) -> int:
        base, extra = divmod(self.requests_per_row, self.rounds)
        return base + (1 if round_index < extra else 0)


#: --quick checks that every row runs and reports (the suite runs it): 48 requests of 100
#: messages, fewer than the producers' windows hold (each goes out at once, and a slice is
#: timed whole), enough for a rate and a CPU figure per row (4,800
#: messages: tens of milliseconds of a server's loop, several clock ticks); each row's
#: broker start costs more CPU than its requests
QUICK = BenchConfig(requests_per_row=48, rounds=1, warmup_requests=10)
#: eight rounds: slices of 500 requests (a second or two a row), so a drift of the shared
#: machine's speed lands on every row; with four, two runs' ceilings differed by 37%.
#: Eight rounds also give the median's interval a coverage of 93% (the 2nd and 7th of
#: the eight ratios, see :func:`median_interval`)
FULL = BenchConfig(requests_per_row=4000, rounds=8, warmup_requests=40)
#: the coverage :func:`median_interval` aims at (at least this, as close as it can)
INTERVAL_COVERAGE = 0.9


# ---------------------------------------------------------------------- server processes


def _conf_dir() -> pathlib.Path | None:
    conf = pathlib.Path(broker.__file__).resolve().parent.parent / "conf"
    return conf if (conf / "broker.conf").is_file() else None


def _cpu_seconds(pid: int) -> float | None:
    """User + system CPU time of a process (its threads included) and its live
    children, the broker's codec processes (Linux /proc; None elsewhere)."""
    own = _own_cpu_seconds(pid)
    if own is None:
        return None
    return own + sum(filter(None, map(_own_cpu_seconds, child_pids(pid))))


def _own_cpu_seconds(pid: int, thread: int | None = None) -> float | None:
    """One process's CPU time, or one of its threads' (``thread``)."""
    path = f"/proc/{pid}/stat" if thread is None else f"/proc/{pid}/task/{thread}/stat"
    try:
        with open(path, "rb") as stat:
            text = stat.read().decode()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()
    # fields[0] is field 3 (state); utime and stime are fields 14 and 15.
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def child_pids(pid: int) -> list[int]:
    """The live child processes of ``pid``, from every thread's children list."""
    found: list[int] = []
    with contextlib.suppress(OSError):
        for task in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(OSError), open(f"/proc/{pid}/task/{task}/children") as f:
                found += map(int, f.read().split())
    return found


class ServerProcess:
    """A server in a child process; ready when it prints its ``listening on`` line."""

    def __init__(self, label: str, argv: list[str], ready_prefix: str) -> None:
        self.label = label
        self.argv = argv
        self.ready_prefix = ready_prefix
        self.process: asyncio.subprocess.Process | None = None
        self.ready_line = ""
        self.url = ""
        self.output: collections.deque[str] = collections.deque(maxlen=200)
        self._drain: asyncio.Task[None] | None = None

    async def start(self) -> str:
        self.process = await asyncio.create_subprocess_exec(
            *self.argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        assert self.process.stdout is not None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + STARTUP_DEADLINE_S
        while True:
            try:
                line = await asyncio.wait_for(
                    self.process.stdout.readline(), max(0.0, deadline - loop.time())
                )
            except TimeoutError:
                raise BenchError(
                    f"{self.label}: not ready after {STARTUP_DEADLINE_S:.0f} s" + self.tail()
                ) from None
            if not line:
                await self.process.wait()
                raise BenchError(
                    f"{self.label}: exited with code {self.process.returncode} during start"
                    + self.tail()
                )
            text = line.decode(errors="replace").rstrip("\n")
            self.output.append(text)
            if text.startswith(self.ready_prefix):
                self.ready_line = text
                self.url = text[len(self.ready_prefix) :].split()[0]
                break
        if not self.url.startswith(f"http://{HOST}:"):
            raise BenchError(f"{self.label}: listens on {self.url}, not on {HOST}")
        self._drain = asyncio.create_task(self._drain_output())
        return self.url

    async def _drain_output(self) -> None:
        assert self.process is not None and self.process.stdout is not None
        while line := await self.process.stdout.readline():
            self.output.append(line.decode(errors="replace").rstrip("\n"))

    def cpu_seconds(self) -> float | None:
        if self.process is None or self.process.returncode is not None:
            return None
        return _cpu_seconds(self.process.pid)

    def loop_cpu_seconds(self) -> float | None:
        """The main thread's: the event loop's, whose one core bounds the server."""
        if self.process is None or self.process.returncode is not None:
            return None
        return _own_cpu_seconds(self.process.pid, self.process.pid)

    def check_alive(self) -> None:
        if self.process is not None and self.process.returncode is not None:
            raise BenchError(
                f"{self.label}: exited with code {self.process.returncode}" + self.tail()
            )

    def tail(self, lines: int = 30) -> str:
        if not self.output:
            return ""
        return f"\n--- last output of {self.label} ---\n" + "\n".join(list(self.output)[-lines:])

    async def stop(self) -> None:
        """SIGTERM (a graceful stop), SIGKILL if it does not exit in time."""
        process = self.process
        if process is None:
            return
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(process.wait(), STOP_DEADLINE_S)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
                await process.wait()
        if self._drain is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._drain, STOP_DEADLINE_S)


def bare_server(label: str) -> ServerProcess:
    argv = [sys.executable, "-m", "broker.bench.bare_server", "--host", HOST, "--port", "0"]
    return ServerProcess(label, argv, BARE_READY_PREFIX)


def broker_server(
    label: str,
    data_dir: pathlib.Path,
    sync_mode: str,
    trace_dir: pathlib.Path | None = None,
    codec_processes: int | None = None,
) -> ServerProcess:
    """``brokerlab serve`` with the shipped conf files; ``codec_processes`` overrides
    httpCodecProcesses (the shipped value picks by the machine's cores)."""
    argv = [sys.executable, "-m", "broker.cli", "serve", "--host", HOST, "--port", "0"]
    argv += ["--broker-port", "0"]  # HTTP only
    if codec_processes is not None:
        argv += ["--set", f"httpCodecProcesses={codec_processes}"]
    # A topic caches what is added for 2 x the cache TTL after it loads (Pulsar's grace
    # for consumers about to connect), then not while nobody reads. A produce-only round
    # inside that window paid for caching, later rounds did not; without the grace every
    # round measures the same path (produce+consume rows cache anyway: they have a
    # reader).
    argv += ["--set", "managedLedgerContinueCachingAddedEntriesAfterLastActiveCursorLeavesMillis=0"]
    # the bench's consumers poll only in the rows that consume: on a loaded machine the
    # produce-only rows before them outlasted consumerIdleTimeoutMs (30 s), and the
    # broker closed them (404 at their first poll)
    argv += ["--set", "consumerIdleTimeoutMs=3600000"]
    if trace_dir is not None:
        argv += ["--set", f"brokerlabTraceDir={trace_dir}"]
    argv += ["--data-dir", str(data_dir)]
    conf = _conf_dir()
    if conf is not None:
        argv += ["--config", str(conf / "broker.conf")]
        argv += ["--storage-config", str(conf / "storage.conf")]
    argv += ["--storage-set", "storageMode=disk", "--storage-set", f"syncMode={sync_mode}"]
    return ServerProcess(label, argv, BROKER_READY_PREFIX)


# ---------------------------------------------------------------------- client work


@dataclass(slots=True)
class Workload:
    config: BenchConfig
    body: bytes  # one produce request, built once and sent by every producer
    batched_body: bytes  # the same with "batch": true (one batched entry a request)
    payload: str  # the base64 payload of every message

    @classmethod
    def build(cls, config: BenchConfig) -> Workload:
        payload = base64.b64encode(os.urandom(config.message_bytes)).decode("ascii")
        messages = [{"payload": payload}] * config.messages_per_request
        return cls(
            config,
            orjson.dumps({"messages": messages}),
            orjson.dumps({"messages": messages, "batch": True}),
            payload,
        )


async def _all(coroutines: list[Coroutine[Any, Any, None]]) -> None:
    """Run concurrently; the first failure cancels the others and is raised as itself."""
    try:
        async with asyncio.TaskGroup() as group:
            for coroutine in coroutines:
                group.create_task(coroutine)
    except BaseExceptionGroup as failures:
        first = failures.exceptions[0]
        while isinstance(first, BaseExceptionGroup):
            first = first.exceptions[0]
        raise first from None


async def _check(response: aiohttp.ClientResponse, expected: int, what: str) -> bytes:
    raw = await response.read()
    if response.status != expected:
        text = raw[:300].decode(errors="replace")
        raise BenchError(f"{what}: HTTP {response.status} (expected {expected}): {text}")
    return raw


async def produce_requests(
    session: aiohttp.ClientSession,
    url: str,
    work: Workload,
    requests: int,
    batched: bool = False,
    completions: list[float] | None = None,
    in_flight: int | None = None,
) -> None:
    """Send ``requests`` produce requests, ``in_flight`` at a time (default
    ``work.config.in_flight``: every producer's pending window); ``completions`` gets
    each receipt's ``time.perf_counter()``."""
    remaining = requests
    per_request = work.config.messages_per_request
    body = work.batched_body if batched else work.body

    async def sender() -> None:
        nonlocal remaining
        while remaining > 0:
            remaining -= 1
            async with session.post(url, data=body) as response:
                raw = await _check(response, 200, f"POST {url}")
            results = orjson.loads(raw)["messagePublishResults"]
            if len(results) != per_request or results[-1].get("errorCode") != 0:
                raise BenchError(f"POST {url}: unexpected answer {raw[:300]!r}")
            if completions is not None:
                completions.append(time.perf_counter())

    senders = work.config.in_flight if in_flight is None else in_flight
    await _all([sender() for _ in range(min(senders, requests))])


def steady_rate(completions: list[float], in_flight: int, per_request: int) -> float | None:
    """Messages a second while every sender was busy: from the ``in_flight``-th
    completion to the ``in_flight``-th from the end, so neither the slice's start (no
    receipt until the first requests' latency has passed) nor its end (fewer requests
    in flight as senders run out) is counted. None when the slice is too short for it
    (fewer than ``4 * in_flight`` requests). O(1)."""
    requests = len(completions)
    if in_flight < 1 or requests < 4 * in_flight:
        return None
    first, last = completions[in_flight - 1], completions[requests - in_flight - 1]
    if last <= first:
        return None
    return (requests - 2 * in_flight) * per_request / (last - first)


@dataclass(slots=True)
class ConsumerState:
    consumer_url: str
    ids: set[str] = field(default_factory=set)
    received: int = 0  # messages received, duplicates included


async def consume_until(
    session: aiohttp.ClientSession, state: ConsumerState, work: Workload, count: int
) -> None:
    """Long-poll until ``count`` more messages arrived, acking each batch cumulatively."""
    config = work.config
    poll_url = f"{state.consumer_url}/messages"
    ack_url = f"{state.consumer_url}/ack"
    params = {
        "maxMessages": str(config.max_poll_messages),
        "timeoutMs": str(config.poll_timeout_ms),
    }
    loop = asyncio.get_running_loop()
    target = state.received + count
    last_progress = loop.time()
    while state.received < target:
        async with session.get(poll_url, params=params) as response:
            raw = await _check(response, 200, f"GET {poll_url}")
        messages = orjson.loads(raw)["messages"]
        if not messages:
            if loop.time() - last_progress > CONSUMER_STALL_S:
                raise BenchError(
                    f"consumer stalled: {target - state.received} messages never arrived"
                )
            continue
        last_progress = loop.time()
        if messages[0]["payload"] != work.payload:
            raise BenchError(f"consumer got a payload that was never produced: {raw[:200]!r}")
        state.received += len(messages)
        state.ids.update(message["messageId"] for message in messages)
        ack = orjson.dumps({"messageIds": [messages[-1]["messageId"]], "ackType": "Cumulative"})
        async with session.post(ack_url, data=ack) as response:
            await _check(response, 204, f"POST {ack_url}")


async def drain_extra(session: aiohttp.ClientSession, state: ConsumerState) -> None:
    """After a round: anything more (a duplicate, a redelivery) is counted, not timed."""
    async with session.get(
        f"{state.consumer_url}/messages", params={"maxMessages": "1000", "timeoutMs": "200"}
    ) as response:
        raw = await _check(response, 200, "GET messages (drain)")
    messages = orjson.loads(raw)["messages"]
    state.received += len(messages)
    state.ids.update(message["messageId"] for message in messages)


async def create_consumer(
    session: aiohttp.ClientSession, base_url: str, topic: str, config: BenchConfig
) -> str:
    url = f"{base_url}/consumers/persistent/{TENANT_NAMESPACE}/{topic}/{SUBSCRIPTION}"
    options = {
        "subscriptionType": "Exclusive",
        "receiverQueueSize": config.receiver_queue_size,
        "subscriptionInitialPosition": "Earliest",
    }
    async with session.post(url, data=orjson.dumps(options)) as response:
        raw = await _check(response, 200, f"POST {url}")
    consumer_id = orjson.loads(raw)["consumerId"]
    return f"{base_url}/consumers/{consumer_id}"


# ---------------------------------------------------------------------- rows


@dataclass(slots=True)
class Row:
    key: str
    label: str
    server: ServerProcess
    sync_mode: str | None
    ceiling: str  # the key of the row this one is a fraction of
    batched: bool = False  # its requests ask for one batched entry ("batch": true)
    #: produce requests in flight at once, where not the config's (``in_flight``)
    in_flight: int | None = None
    messages: int = 0  # measured: produced (produce rows) or consumed (produce+consume)
    produced: int = 0
    elapsed_s: float = 0.0
    server_cpu_s: float | None = 0.0
    loop_cpu_s: float | None = 0.0
    client_cpu_s: float = 0.0
    #: the rate of each slice measured, in order (a ceiling: several a round)
    round_rates: list[float] = field(default_factory=list)
    #: the row's ratio in each round, over the ceiling slices either side of its slice
    #: (:func:`interleaved_round`; a ceiling's own: 1.0)
    round_ratios: list[float] = field(default_factory=list)

    def rate(self) -> float:
        return self.messages / self.elapsed_s if self.elapsed_s > 0 else 0.0

    async def measure(
        self,
        run: Callable[[], Awaitable[int]],
        produced: int,
        steady: Callable[[], float | None] | None = None,
    ) -> float:
        """Time one slice of this row: ``run`` returns the messages it counts. Returns
        the slice's rate (msgs/s): ``steady()``'s after the run where it gives one (the
        rate while the window was full, see :func:`steady_rate`), else counted over the
        whole slice. The row's totals (msgs/s over the run, CPU) are whole slices'."""
        self.server.check_alive()
        server_before = self.server.cpu_seconds()
        loop_before = self.server.loop_cpu_seconds()
        client_before = time.process_time()
        start = time.perf_counter()
        counted = await run()
        elapsed = time.perf_counter() - start
        client_after = time.process_time()
        server_after = self.server.cpu_seconds()
        loop_after = self.server.loop_cpu_seconds()
        self.messages += counted
        self.produced += produced
        self.elapsed_s += elapsed
        rate = counted / elapsed if elapsed > 0 else 0.0
        steady_value = None if steady is None else steady()
        if steady_value is not None:
            rate = steady_value
        self.round_rates.append(rate)
        self.client_cpu_s += client_after - client_before
        self.server_cpu_s = _added(self.server_cpu_s, server_before, server_after)
        self.loop_cpu_s = _added(self.loop_cpu_s, loop_before, loop_after)
        return rate


async def interleaved_round(
    ceiling: Row, members: list[Row], measure: Callable[[Row], Awaitable[float]]
) -> None:
    """One round of a ceiling and the rows measured against it, run as ``C r1 C r2 ...
    r_n C`` (``measure(row)`` runs one slice of ``row`` and returns its rate): each
    member's ratio this round is its rate over the mean of the two ceiling slices
    either side of it, measured just before and just after it, so the machine's load
    drifting between rows cancels out. n + 1 ceiling slices for n rows."""
    before = await measure(ceiling)
    for member in members:
        own = await measure(member)
        after = await measure(ceiling)
        around = (before + after) / 2
        member.round_ratios.append(own / around if around > 0 else 0.0)
        before = after
    ceiling.round_ratios.append(1.0)


def median(values: list[float]) -> float:
    """The median (the mean of the middle two for an even count). O(n log n)."""
    ordered = sorted(values)
    middle = len(ordered) // 2
    if len(ordered) % 2:
        return ordered[middle]
    return (ordered[middle - 1] + ordered[middle]) / 2


def median_interval(
    values: list[float], coverage: float = INTERVAL_COVERAGE
) -> tuple[float, float, float]:
    """A distribution-free confidence interval for the median of what ``values`` are
    drawn from: the k-th lowest and k-th highest value, with the largest k whose
    coverage, 1 - 2 P(Binomial(n, 1/2) < k), is still at least ``coverage`` (n = 8:
    the 2nd and 7th, 93%). With too few values for ``coverage`` (n < 5 at 0.9): the
    lowest and highest, and their own coverage (0 for one value). Returns (low, high,
    coverage). O(n log n); assumes the rounds independent, which a shared machine's
    load only approximates."""
    ordered = sorted(values)
    n = len(ordered)
    if n == 0:
        raise ValueError("no values")

    def covered(k: int) -> float:  # P(X_(k) <= median <= X_(n+1-k))
        below = sum(math.comb(n, i) for i in range(k))
        return 1.0 - 2.0 * below / 2**n

    k = 1
    while k + 1 <= (n + 1) // 2 and covered(k + 1) >= coverage:
        k += 1
    return ordered[k - 1], ordered[n - k], covered(k)


def _added(total: float | None, before: float | None, after: float | None) -> float | None:
    """``total`` plus ``after - before``; None once any of them is unknown."""
    if total is None or before is None or after is None:
        return None
    return total + after - before


def _url(base: str, topic: str) -> str:
    return f"{base}/topics/persistent/{TENANT_NAMESPACE}/{topic}"


async def run_rows(config: BenchConfig, data_root: pathlib.Path) -> dict[str, Any]:
    work = Workload.build(config)
    load_at_start = os.getloadavg()[0]
    bare = bare_server("bare aiohttp server")
    broker_none = broker_server("broker (syncMode=none)", data_root / "none", "none")
    broker_batch = broker_server("broker (syncMode=batch)", data_root / "batch", "batch")
    broker_traced = broker_server(
        "broker (syncMode=none, traced)", data_root / "traced", "none", data_root / "trace"
    )
    broker_codec = broker_server(
        "broker (syncMode=none, one codec process)", data_root / "codec", "none", None, 1
    )
    servers = [bare, broker_none, broker_batch, broker_traced, broker_codec]
    connector = aiohttp.TCPConnector(limit=0, limit_per_host=config.in_flight + 2)
    session = aiohttp.ClientSession(
        connector=connector,
        timeout=aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S),
        headers={"Content-Type": "application/json"},
    )
    try:
        bare_url, none_url, batch_url, traced_url, codec_url = await asyncio.gather(
            *(s.start() for s in servers)
        )
        for server, mode in ((broker_none, "none"), (broker_batch, "batch")):
            if f"sync: {mode})" not in server.ready_line:
                raise BenchError(f"{server.label}: started as {server.ready_line!r}")

        pc_ceiling = CEILING_PRODUCE_CONSUME
        ceiling = Row(CEILING, "ceiling: bare produce", bare, None, CEILING)
        ceiling_pc = Row(pc_ceiling, "ceiling: bare produce+consume", bare, None, pc_ceiling)
        produce_none = Row("produce_none", "produce", broker_none, "none", CEILING)
        produce_consume = Row(
            "produce_consume_none", "produce+consume", broker_none, "none", pc_ceiling
        )
        produce_batch = Row("produce_batch", "produce", broker_batch, "batch", CEILING)
        # the same broker driven by synchronous producers (one request in flight
        # each): what a durable broker does for clients that wait for every receipt
        produce_batch_sync = Row(
            "produce_batch_one_in_flight",
            "produce, 1 in flight a producer",
            broker_batch,
            "batch",
            CEILING,
            in_flight=config.producers,
        )
        produce_codec = Row(
            "produce_none_codec", "produce, codec process", broker_codec, "none", CEILING
        )
        traced = Row(
            "produce_consume_traced_none",
            "produce+consume, traced",
            broker_traced,
            "none",
            pc_ceiling,
        )
        produce_batched = Row(
            "produce_batched_none", "produce, batched", broker_none, "none", CEILING, True
        )
        produce_consume_batched = Row(
            "produce_consume_batched_none",
            "produce+consume, batched",
            broker_none,
            "none",
            pc_ceiling,
            True,
        )
        rows = [
            ceiling,
            ceiling_pc,
            produce_none,
            produce_codec,
            produce_consume,
            produce_batch,
            produce_batch_sync,
            traced,
            produce_batched,
            produce_consume_batched,
        ]

        urls = {
            CEILING: _url(bare_url, "ceiling"),
            pc_ceiling: _url(bare_url, "ceiling-produce-consume"),
            "produce_none": _url(none_url, "produce"),
            "produce_consume_none": _url(none_url, "produce-consume"),
            "produce_batch": _url(batch_url, "produce"),
            produce_batch_sync.key: _url(batch_url, "produce-one-in-flight"),
            produce_codec.key: _url(codec_url, "produce"),
            "produce_consume_traced_none": _url(traced_url, "produce-consume"),
            produce_batched.key: _url(none_url, "produce-batched"),
            produce_consume_batched.key: _url(none_url, "produce-consume-batched"),
        }
        # Consumer first (its subscription then sees every message), then warm-up:
        # connections, topic loading, ledger creation, the consume path.
        consumer = ConsumerState(
            await create_consumer(session, none_url, "produce-consume", config)
        )
        traced_consumer = ConsumerState(
            await create_consumer(session, traced_url, "produce-consume", config)
        )
        bare_consumer = ConsumerState(
            await create_consumer(session, bare_url, "ceiling-produce-consume", config)
        )
        batched_consumer = ConsumerState(
            await create_consumer(session, none_url, "produce-consume-batched", config)
        )
        consumers = {
            pc_ceiling: bare_consumer,
            produce_consume.key: consumer,
            traced.key: traced_consumer,
            produce_consume_batched.key: batched_consumer,
        }
        batched = {row.key for row in rows if row.batched}
        warm = config.warmup_requests
        for key in (
            CEILING,
            "produce_none",
            produce_codec.key,
            "produce_batch",
            produce_batch_sync.key,
            produce_batched.key,
        ):
            await produce_requests(session, urls[key], work, warm, key in batched)
        for key, warming in consumers.items():
            await _produce_and_consume(session, urls[key], work, warming, warm, key in batched)
            warming.ids.clear()
            warming.received = 0

        per_request = config.messages_per_request
        groups = (
            (
                ceiling,
                [produce_none, produce_codec, produce_batch, produce_batch_sync, produce_batched],
            ),
            (ceiling_pc, [produce_consume, traced, produce_consume_batched]),
        )
        for round_index in range(config.rounds):
            requests = config.requests_in_round(round_index)
            if requests == 0:
                continue
            produced = requests * per_request

            async def measure(
                row: Row, requests: int = requests, produced: int = produced
            ) -> float:
                url = urls[row.key]
                row_consumer = consumers.get(row.key)
                if row_consumer is not None:

                    async def run_pc(
                        url: str = url,
                        state: ConsumerState = row_consumer,
                        batched: bool = row.batched,
                    ) -> int:
                        return await _produce_and_consume(
                            session, url, work, state, requests, batched
                        )

                    rate = await row.measure(run_pc, produced)
                    await drain_extra(session, row_consumer)
                    return rate

                completions: list[float] = []
                in_flight = row.in_flight or config.in_flight

                async def run_p(url: str = url, batched: bool = row.batched) -> int:
                    await produce_requests(
                        session, url, work, requests, batched, completions, in_flight
                    )
                    return requests * per_request

                def steady() -> float | None:
                    return steady_rate(completions, in_flight, per_request)

                return await row.measure(run_p, produced, steady)

            for group_ceiling, members in groups:
                await interleaved_round(group_ceiling, members, measure)
        for server in servers:
            server.check_alive()
        return _report(config, rows, consumers, (load_at_start, os.getloadavg()[0]))
    finally:
        await session.close()
        await asyncio.gather(*(server.stop() for server in servers), return_exceptions=True)


async def _produce_and_consume(
    session: aiohttp.ClientSession,
    url: str,
    work: Workload,
    consumer: ConsumerState,
    requests: int,
    batched: bool = False,
) -> int:
    """Produce ``requests`` requests while the consumer drains them all; messages consumed."""
    before = consumer.received
    count = requests * work.config.messages_per_request
    await _all(
        [
            consume_until(session, consumer, work, count),
            produce_requests(session, url, work, requests, batched),
        ]
    )
    return consumer.received - before


def _per_message(cpu_s: float | None, messages: int) -> float | None:
    """Microseconds of CPU per message, None where unknown."""
    return None if cpu_s is None or messages <= 0 else round(cpu_s / messages * 1e6, 2)


def _report(
    config: BenchConfig,
    rows: list[Row],
    consumers: dict[str, ConsumerState],
    load: tuple[float, float] | None = None,
) -> dict[str, Any]:
    """The run's figures. ``load``: the machine's 1-minute load average at the run's
    start and end."""
    ceilings = {row.key: row.rate() for row in rows if row.key == row.ceiling}
    for key, rate in ceilings.items():
        if rate <= 0:
            raise BenchError(f"the {key} row measured no throughput")
    by_key: dict[str, dict[str, Any]] = {}
    for row in rows:
        rate = row.rate()
        if not row.round_ratios:
            raise BenchError(f"the {row.key} row measured no round")
        # the row's ratio in each round, over the ceiling slices either side of its own
        round_ratios = sorted(row.round_ratios)
        low, high, coverage = median_interval(round_ratios)
        by_key[row.key] = {
            "row": row.key,
            "label": row.label,
            "syncMode": row.sync_mode,
            "ceiling": row.ceiling,
            "messages": row.messages,
            "produced": row.produced,
            "rate_msgs_per_s": round(rate, 1),
            # the median of the rounds' ratios: the headline
            "ratio": round(median(round_ratios), 4),
            # a distribution-free interval for that median, and its coverage
            "ratio_interval": [round(low, 4), round(high, 4)],
            "ratio_interval_coverage": round(coverage, 4),
            # the row's rate over the run over its ceiling's (every slice pooled): how
            # this bench reported a ratio before 2026-11-29's fourth session
            "ratio_of_totals": round(rate / ceilings[row.ceiling], 4),
            "round_ratios": [round(ratio, 4) for ratio in round_ratios],
            "server_cpu_cores": (
                None
                if row.server_cpu_s is None or row.elapsed_s <= 0
                else round(row.server_cpu_s / row.elapsed_s, 3)
            ),
            "client_cpu_cores": (
                round(row.client_cpu_s / row.elapsed_s, 3) if row.elapsed_s > 0 else None
            ),
            # the server's CPU (all its processes) per message the row counts
            "server_cpu_us_per_msg": _per_message(row.server_cpu_s, row.messages),
            # the event loop's thread alone: its one core bounds the server's rate
            "loop_cpu_us_per_msg": _per_message(row.loop_cpu_s, row.messages),
        }
    for key, state in consumers.items():
        by_key[key]["consumed"] = state.received
        by_key[key]["consumed_distinct"] = len(state.ids)
        # ids "ledger:entry:index" are messages of batched entries
        by_key[key]["consumed_from_batches"] = sum(i.count(":") == 2 for i in state.ids)
    pc = by_key["produce_consume_none"]
    traced_row = by_key["produce_consume_traced_none"]
    cpu_count = os.cpu_count() or 0
    return {
        "bench": "http",
        "config": {
            **asdict(config),
            "storageMode": "disk",
            "host": HOST,
            "cpu_count": cpu_count,
            "codec_processes_default": default_codec_processes(),
            # entries built by broker.ledger._entries (compiled at install) or in Python;
            # likewise frames by storage_stub.bookie._frames
            "entry_encoder": entry_encoder(),
            "frame_builder": "compiled" if compiled_frames() else "python",
            "entry_log_writer": thread_writer_crc() or "python",
            "client": "aiohttp ClientSession in the bench process (uvloop)",
            "servers": (
                "child processes: bare aiohttp+uvloop; brokerlab serve x4, one with "
                "httpCodecProcesses=1 (the others: the shipped broker.conf)"
            ),
            "ceiling": CEILING_DOES,
            "ceiling_produce_consume": CEILING_PRODUCE_CONSUME_DOES,
            "load_average": None if load is None else [round(value, 2) for value in load],
        },
        "rows": list(by_key.values()),
        "ceiling_msgs_per_s": by_key[CEILING]["rate_msgs_per_s"],
        "ceiling_produce_consume_msgs_per_s": by_key[CEILING_PRODUCE_CONSUME]["rate_msgs_per_s"],
        "produce_ratio": by_key["produce_none"]["ratio"],
        "produce_batch_ratio": by_key["produce_batch"]["ratio"],
        "produce_batch_interval": by_key["produce_batch"]["ratio_interval"],
        "produce_batch_one_in_flight_ratio": by_key["produce_batch_one_in_flight"]["ratio"],
        "produce_codec_ratio": by_key["produce_none_codec"]["ratio"],
        "produce_consume_ratio": pc["ratio"],
        "produce_batched_ratio": by_key["produce_batched_none"]["ratio"],
        "produce_consume_batched_ratio": by_key["produce_consume_batched_none"]["ratio"],
        # the same row over the produce ceiling, as this bench reported it before
        "produce_consume_over_produce_ceiling": round(
            pc["rate_msgs_per_s"] / by_key[CEILING]["rate_msgs_per_s"], 4
        ),
        # what recording the access trace costs: traced over untraced, same workload
        "traced_over_untraced": (
            round(traced_row["rate_msgs_per_s"] / pc["rate_msgs_per_s"], 4)
            if pc["rate_msgs_per_s"] > 0
            else None
        ),
        "produced": pc["produced"],
        "consumed": pc["consumed"],
        "target_produce_ratio": TARGET_PRODUCE_RATIO,
        "target_produce_consume_ratio": TARGET_PRODUCE_CONSUME_RATIO,
    }


# ---------------------------------------------------------------------- output


def _interval(row: dict[str, Any]) -> str:
    """A row's interval for its median ratio, with its coverage ("-" for one round)."""
    if len(row["round_ratios"]) < 2:
        return "-"
    low, high = row["ratio_interval"]
    return f"{low:.2f}-{high:.2f} ({row['ratio_interval_coverage']:.0%})"


def _spread(ratios: list[float]) -> str:
    """Lowest-highest of a row's ratios round by round ("-" for a single round)."""
    if len(ratios) < 2:
        return "-"
    return f"{min(ratios):.2f}-{max(ratios):.2f}"


def entry_encoder() -> str:
    """How this interpreter's broker package builds produce entries: a key of
    :data:`_ENCODERS`."""
    if compiled_base64_encoder():
        return "compiled+base64"
    return "compiled" if compiled_encoder() else "python"


_ENCODERS = {
    "compiled+base64": (
        "the compiled loop (broker.ledger._entries), payloads base64-decoded straight "
        "into their entries (pybase64's libbase64)"
    ),
    "compiled": "the compiled loop (broker.ledger._entries)",
    "python": "entry.py's Python loop (broker.ledger._entries was not built here)",
}
_FRAMES = {
    "compiled": "compiled (storage_stub.bookie._frames)",
    "python": "frame.py's Python (storage_stub.bookie._frames was not built here)",
}
_WRITERS = {
    "isa-l": "the compiled writer thread (storage_stub.bookie._writer; ISA-L's CRC-32)",
    "zlib": "the compiled writer thread (storage_stub.bookie._writer; zlib's CRC-32, "
    "slower: isal's library has no crc32_gzip_refl)",
    "python": "copied on the loop, sealed and written on the bookie's writer thread "
    "(storage_stub.bookie._writer was not built here)",
}


def format_table(result: dict[str, Any]) -> str:
    config = result["config"]
    header = (
        "row", "sync", "msgs/s", "ratio", "interval", "rounds", "server CPU", "us/msg",
        "loop us/msg", "client CPU",
    )  # fmt: skip
    lines_in: list[tuple[str, ...]] = [header]
    for row in result["rows"]:
        server_cpu = row["server_cpu_cores"]
        client_cpu = row["client_cpu_cores"]
        per_message = row["server_cpu_us_per_msg"]
        loop_per_message = row["loop_cpu_us_per_msg"]
        lines_in.append(
            (
                row["label"],
                row["syncMode"] or "-",
                f"{row['rate_msgs_per_s']:,.0f}",
                f"{row['ratio']:.2f}",
                _interval(row),
                _spread(row["round_ratios"]),
                "?" if server_cpu is None else f"{server_cpu:.2f}",
                "?" if per_message is None else f"{per_message:.1f}",
                "?" if loop_per_message is None else f"{loop_per_message:.1f}",
                "?" if client_cpu is None else f"{client_cpu:.2f}",
            )
        )
    widths = [max(len(line[i]) for line in lines_in) for i in range(len(header))]
    out = [
        "brokerlab bench http: "
        f"{config['message_bytes']} B messages, {config['messages_per_request']} per request, "
        f"{config['producers']} producers with {config['pending_per_producer']} requests "
        f"in flight each, {config['requests_per_row']} requests per row "
        f"in {config['rounds']} interleaved round(s), storage {config['storageMode']}"
        + _load_text(config["load_average"]),
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
    batch_row = next(row for row in result["rows"] if row["row"] == "produce_batch")
    rounds = len(batch_row["round_ratios"])
    batch_spread = (
        f"median of {rounds} rounds, interval {_interval(batch_row)}; " if rounds > 1 else ""
    )
    target = result["target_produce_ratio"]
    verdict = "meets" if result["produce_ratio"] >= target else "BELOW"
    batch_verdict = "meets" if result["produce_batch_ratio"] >= target else "BELOW"
    pc_target = result["target_produce_consume_ratio"]
    pc_verdict = "meets" if result["produce_consume_ratio"] >= pc_target else "BELOW"
    out += [
        "",
        f"ceiling: {config['ceiling']}.",
        f"ceiling_produce_consume: {config['ceiling_produce_consume']}.",
        "",
        f"produce / produce ceiling (syncMode=none): {result['produce_ratio']:.2f} "
        f"({verdict} the target {target:.2f})",
        f"produce / produce ceiling (syncMode=batch): {result['produce_batch_ratio']:.2f} "
        f"({batch_verdict} the target {target:.2f}; {batch_spread}"
        "fsynced group commit, pipelined)",
        "produce+consume / produce+consume ceiling (syncMode=none): "
        f"{result['produce_consume_ratio']:.2f} ({pc_verdict} the target {pc_target:.2f}; "
        f"{result['produce_consume_over_produce_ceiling']:.2f} of the produce ceiling)",
        "produce (syncMode=batch) with one request in flight a producer: "
        f"{result['produce_batch_one_in_flight_ratio']:.2f} of the produce ceiling (its "
        "producers wait for each receipt, so its rate is the group commit's latency: "
        f"{config['producers']} requests a round trip)",
        f'batched ("batch": true, one entry a request): produce '
        f"{result['produce_batched_ratio']:.2f}, produce+consume "
        f"{result['produce_consume_batched_ratio']:.2f} of the same ceilings",
        "produce with one codec process (httpCodecProcesses=1; the shipped default "
        f"picks {config['codec_processes_default']} here): "
        f"{result['produce_codec_ratio']:.2f} of the produce ceiling",
        f"produce+consume: consumed {result['consumed']:,} of {result['produced']:,} produced",
        f"entries built by: {_ENCODERS[config['entry_encoder']]}; entry log frames: "
        f"{_FRAMES[config['frame_builder']]}; direct writes: "
        f"{_WRITERS[config['entry_log_writer']]}",
        f"produce+consume traced / untraced: {result['traced_over_untraced']:.2f} "
        "(what recording the access trace costs)",
        "ratio = the median over the rounds of a row's msgs/s over its ceiling's (a "
        "produce slice's rate: while every producer's window was full, see steady_rate; "
        "produce "
        "rows: the produce ceiling; produce+consume rows: the produce+consume ceiling), "
        "each round's taken against the mean of the ceiling slices run just before and "
        "just after the row's; interval: a distribution-free interval for that median "
        "(order statistics of the rounds' ratios) and its coverage; rounds: the lowest "
        "and highest of the rounds' ratios; msgs/s: over the whole run; CPU columns are "
        "cores busy during the row (server: its process, the entry log writer thread "
        "included, and its codec processes; client: this "
        "process); us/msg: server CPU per message counted; loop us/msg: its event loop "
        "thread's, which runs on one core and so bounds the server's rate.",
    ]
    if config["cpu_count"] <= 2:
        out.append(
            f"note: {config['cpu_count']} CPU core(s) shared by the client and the servers; "
            "if the client is busy near a full core on the ceiling row, the ceiling is "
            "client-bound and every ratio reads high; codec processes compete with the "
            "client for the second core."
        )
    return "\n".join(out)


def _load_text(load: list[float] | None) -> str:
    if load is None:
        return ""
    return f"; load average {load[0]:.1f} at the start, {load[1]:.1f} at the end"


def main(quick: bool = False, as_json: bool = False) -> int:
    config = QUICK if quick else FULL
    data_root = pathlib.Path(tempfile.mkdtemp(prefix="brokerlab-bench-http-"))
    try:
        result = uvloop.run(run_rows(config, data_root))
    except (BenchError, aiohttp.ClientError, OSError) as error:
        print(f"brokerlab bench http: {type(error).__name__}: {error}", file=sys.stderr)
        return 1
    finally:
        shutil.rmtree(data_root, ignore_errors=True)
    result["quick"] = quick
    if as_json:
        print(orjson.dumps(result).decode())
    else:
        print(format_table(result))
    return 0
