"""The load generator's pulsar driver: a scenario through the official Pulsar client over
the binary protocol, against pulsar-lite (a Pulsar-compatible server) started here on
free ports, with the HTTP driver's results; and how the load generator finds a started
brokerlab's binary protocol."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import pathlib
import re
import shutil
import signal
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Iterator

import pytest
import uvloop

from broker.cli import main
from loadgen.broker_process import BrokerProcess
from loadgen.results import validate_results
from loadgen.runner import RunOptions, run_scenario
from loadgen.scenario import Scenario, ScenarioError, load_scenario
from tests.harness import eventually

READY_DEADLINE_S = 30.0
BROKER_DEADLINE_S = 15.0
DRAIN_S = 20.0
BACKLOG = re.compile(r"^pulsar_subscription_back_log\{([^}]*)\} (\S+)$", re.MULTILINE)
STORED = re.compile(r"^pulsar_in_messages_total\{([^}]*)\} (\S+)$", re.MULTILINE)


@dataclasses.dataclass
class PulsarLite:
    service_url: str
    metrics_url: str

    def metrics(self, pattern: re.Pattern[str], topic_part: str) -> list[float]:
        """The values of a metric for the topics whose name holds ``topic_part``."""
        with urllib.request.urlopen(self.metrics_url, timeout=5) as response:
            text = response.read().decode()
        return [
            float(value)
            for labels, value in pattern.findall(text)
            if f'topic="{topic_part}' in labels
        ]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _pulsar_lite_binary() -> str | None:
    found = shutil.which("pulsar-lite")
    if found:
        return found
    try:
        from pulsar_lite.binary_finder import find_pulsar_lite_binary
    except ImportError:
        return None
    try:
        return str(find_pulsar_lite_binary())
    except FileNotFoundError:
        return None


@pytest.fixture
def pulsar_lite(tmp_path: pathlib.Path) -> Iterator[PulsarLite]:
    binary = _pulsar_lite_binary()
    if binary is None:
        pytest.skip("pulsar-lite is not installed")
    port, metrics_port = _free_port(), _free_port()
    config = tmp_path / "pulsar-lite.toml"
    # its metrics on loopback and a port of its own (the default is 0.0.0.0:8080)
    config.write_text(f'[metrics]\naddr = "127.0.0.1:{metrics_port}"\n')
    command = [binary, "--config", str(config), "--addr", f"127.0.0.1:{port}"]
    command += ["--db-path", str(tmp_path / "pulsar-lite-db")]
    with (tmp_path / "pulsar-lite.log").open("wb") as log:
        process = subprocess.Popen(
            command,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=tmp_path,
        )

    def listening() -> bool:
        assert process.poll() is None, (tmp_path / "pulsar-lite.log").read_text()
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
        except OSError:
            return False
        return True

    try:
        eventually(listening, "pulsar-lite to listen", READY_DEADLINE_S)
        yield PulsarLite(f"pulsar://127.0.0.1:{port}", f"http://127.0.0.1:{metrics_port}/metrics")
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def scenario(name: str, **fields: object) -> Scenario:
    base: dict[str, object] = {
        "name": name,
        "topics": 2,
        "messageSize": 200,
        "producerRate": 1000,
        "subscriptionsPerTopic": 2,
        "consumerPerSubscription": 2,
        "subscriptionType": "Shared",
        "testDurationSeconds": 2,
        "driver": "pulsar",
        "seed": 5,
    }
    return Scenario.model_validate({**base, **fields})


def run(lite: PulsarLite, chosen: Scenario, out: pathlib.Path) -> dict:
    options = RunOptions(service_url=lite.service_url, out_dir=out, drain_s=DRAIN_S)
    return uvloop.run(run_scenario(chosen, options))


def broker_caught_up(lite: PulsarLite, name: str, subscriptions: int) -> list[float]:
    """The broker's backlog of each subscription of the run's topics, once every one is
    empty (polled until the acknowledgements, sent in groups, have all arrived)."""
    backlogs: list[float] = []

    def caught_up() -> list[float] | None:
        backlogs[:] = lite.metrics(BACKLOG, name)
        return backlogs if len(backlogs) == subscriptions and not any(backlogs) else None

    return eventually(
        caught_up,
        lambda: f"{subscriptions} empty backlogs of {name} (last: {backlogs})",
        BROKER_DEADLINE_S,
        every_s=0.05,
    )


# ----------------------------------------------------------------------------- runs


@pytest.mark.slow
@pytest.mark.parametrize("batching", [True, False], ids=["batching", "no-batching"])
def test_every_produced_message_reaches_every_subscription_and_is_acknowledged(
    pulsar_lite: PulsarLite, tmp_path: pathlib.Path, batching: bool, request: pytest.FixtureRequest
) -> None:
    name = f"pulsar-{'batch' if batching else 'single'}"
    chosen = scenario(name, pulsar={"batchingEnabled": batching})
    asked = None if batching else request.getfixturevalue("no_run_charts")
    results = run(pulsar_lite, chosen, tmp_path)

    assert validate_results(results) == []
    written = json.loads((tmp_path / "results.json").read_text())
    assert written["scenario"]["driver"] == "pulsar"
    assert written["scenario"]["pulsar"]["batchingEnabled"] is batching
    if asked is None:
        for plot in ("rates.png", "latency.png", "hit-ratio.png"):
            assert (tmp_path / plot).read_bytes().startswith(b"\x89PNG")
    else:
        assert asked == [tmp_path]
    assert (tmp_path / "pulsar-client.log").exists()

    totals = results["totals"]
    assert totals["publishedMessages"] > 0 and totals["publishErrors"] == 0
    assert totals["consumedMessages"] > 0 and totals["consumeErrors"] == 0
    assert totals["publishRateAvg"] > 0 and totals["consumeRateAvg"] > 0
    assert sum(results["publishRate"]) > 0 and sum(results["consumeRate"]) > 0
    for prefix in ("aggregatedPublishLatency", "aggregatedEndToEndLatency"):
        for suffix in ("Avg", "50pct", "99pct", "Max"):
            assert results[prefix + suffix] > 0, prefix + suffix

    # every message stored reached both subscriptions once, and was acknowledged
    drain = results["drain"]
    assert drain["caughtUp"], drain
    assert drain["firstDeliveries"] == drain["publishedMessages"] * 2
    # ... each message, by the identity it carried through the client and back
    assert drain["distinctDeliveries"] == drain["firstDeliveries"] and drain["missing"] == 0
    assert drain["ackedMessages"] >= drain["firstDeliveries"]
    # ... as the broker saw it: what it stored is what the producers counted, and no
    # subscription has anything left
    assert sum(pulsar_lite.metrics(STORED, name)) == drain["publishedMessages"]
    assert broker_caught_up(pulsar_lite, name, subscriptions=4) == [0.0] * 4

    # no brokerlab behind this service URL: the run says so instead of inventing stats
    broker = results["broker"]
    assert broker["serviceUrl"] == pulsar_lite.service_url and broker["url"] is None
    assert "no HTTP admin" in broker["statsUnavailable"]
    assert results["cache"]["hitRatio"] is None


@pytest.mark.slow
def test_keyed_messages_on_partitions_reach_a_key_shared_subscription(
    pulsar_lite: PulsarLite, tmp_path: pathlib.Path, no_run_charts: list[pathlib.Path]
) -> None:
    chosen = scenario(
        "pulsar-keyed",
        topics=1,
        partitionsPerTopic=2,
        subscriptionsPerTopic=1,
        subscriptionType="Key_Shared",
        keyDistributor="ZIPF",
        keys=50,
        pulsar={"batchingMaxPublishDelayMs": 5, "pendingQueueSize": 100},
    )
    results = run(pulsar_lite, chosen, tmp_path)
    assert validate_results(results) == []
    drain = results["drain"]
    assert drain["caughtUp"], drain
    assert drain["firstDeliveries"] == drain["publishedMessages"] == drain["ackedMessages"]
    assert drain["distinctDeliveries"] == drain["publishedMessages"] and drain["missing"] == 0
    # both partitions had messages, and neither has any left
    stored = pulsar_lite.metrics(STORED, "pulsar-keyed")
    assert len(stored) == 2 and all(stored) and sum(stored) == drain["publishedMessages"]
    assert broker_caught_up(pulsar_lite, "pulsar-keyed", subscriptions=2) == [0.0] * 2


@pytest.mark.slow
def test_nacked_messages_come_back_and_are_acknowledged(
    pulsar_lite: PulsarLite, tmp_path: pathlib.Path, no_run_charts: list[pathlib.Path]
) -> None:
    # a Shared subscription of an unpartitioned topic: pulsar-lite 0.2 redelivers no
    # nacked message of a "-partition-N" topic, and stalls a nacked Key_Shared one
    chosen = scenario(
        "pulsar-nack",
        topics=1,
        subscriptionsPerTopic=1,
        consumers={"nackRatio": 0.1, "negativeAckRedeliveryDelayMs": 100},
    )
    results = run(pulsar_lite, chosen, tmp_path)
    assert validate_results(results) == []
    totals = results["totals"]
    assert totals["nackedMessages"] > 0 and totals["redeliveredMessages"] > 0
    drain = results["drain"]
    assert drain["caughtUp"], drain
    assert drain["firstDeliveries"] == drain["publishedMessages"]
    assert drain["distinctDeliveries"] == drain["publishedMessages"] and drain["missing"] == 0
    # each nacked message was acknowledged when it came back (with the rest of its
    # batch, which the broker redelivers whole)
    assert drain["ackedMessages"] >= drain["firstDeliveries"]
    assert broker_caught_up(pulsar_lite, "pulsar-nack", subscriptions=1) == [0.0]


@pytest.mark.slow
def test_the_cli_drives_a_foreign_broker_and_says_there_are_no_cache_stats(
    pulsar_lite: PulsarLite,
    tmp_path: pathlib.Path,
    capsys: pytest.CaptureFixture[str],
    no_run_charts: list[pathlib.Path],
) -> None:
    """A preset written for HTTP, run through the pulsar driver at a service URL."""
    out = tmp_path / "out"
    args = ["loadgen", "--scenario", "tailing-fanout", "--driver", "pulsar"]
    args += ["--service-url", pulsar_lite.service_url, "--duration", "2", "--drain", "20"]
    status = main([*args, "--out", str(out), "--no-progress"])
    assert status == 0
    err = " ".join(capsys.readouterr().err.split())
    assert "pulsar driver" in err and "no HTTP admin" in err and "drain: caught up" in err
    results = json.loads((out / "results.json").read_text())
    assert results["scenario"]["driver"] == "pulsar"
    assert validate_results(results) == []
    assert results["totals"]["consumedMessages"] > 0


@pytest.mark.slow
def test_on_a_started_brokerlab_it_speaks_its_binary_protocol_and_keeps_its_stats(
    tmp_path: pathlib.Path, no_run_charts: list[pathlib.Path]
) -> None:
    """No service URL: the run starts brokerlab and connects where it says its binary
    protocol is; the cache stats come over HTTP as with the HTTP driver, and the clients
    reconnect by themselves after an unload and a restart (on the same port)."""
    chosen = scenario(
        "pulsar-own",
        subscriptionType="Failover",
        consumerPerSubscription=1,
        # room for a restart on a loaded machine (one took 3.5 s); a quarter of the
        # default rate: what is checked (reconnection, stats, redelivery of acks the
        # restart lost) does not grow with the messages, the run's CPU does
        producerRate=250,
        testDurationSeconds=8,
        consumers={"ackMode": "cumulative"},
        events=[{"at": 0.5, "type": "unload"}, {"at": 1, "type": "restart"}],
    )
    options = RunOptions(out_dir=tmp_path, drain_s=DRAIN_S)
    results = uvloop.run(run_scenario(chosen, options))
    assert validate_results(results) == []
    broker = results["broker"]
    assert broker["startedByLoadgen"] and broker["restarts"] == 1, results["events"]
    assert broker["serviceUrl"].startswith("pulsar://") and broker["statsUnavailable"] is None
    assert all(event["ok"] for event in results["events"]), results["events"]
    assert results["cache"]["hits"] + results["cache"]["misses"] > 0
    assert results["broker"]["implementation"] == "pip430"
    # acks not yet stored when the broker stopped come again, as first deliveries of
    # the new broker: at least every message once per subscription. Such a repeat would
    # hide a message the broker lost from those counts; not from the distinct ones:
    # every message acknowledged on publish reached both subscriptions
    drain = results["drain"]
    assert drain["caughtUp"], drain
    assert drain["firstDeliveries"] >= drain["publishedMessages"] * 2 > 0
    assert drain["missing"] == 0, drain
    assert drain["distinctDeliveries"] == drain["publishedMessages"] * 2, drain
    log = (tmp_path / "broker.log").read_text()
    assert log.count(f"binary protocol on {broker['serviceUrl']}") == 2


def test_delayed_messages_are_sent_with_deliver_after_and_all_arrive(
    tmp_path: pathlib.Path, no_run_charts: list[pathlib.Path]
) -> None:
    """delayedRatio through the official client: the started brokerlab (strict) holds
    the delayed half for their delay, and the drain gets every message once."""
    chosen = scenario(
        "pulsar-delayed",
        topics=1,
        subscriptionsPerTopic=1,
        delayedRatio=0.5,
        deliverAfterMs=1500,
        testDurationSeconds=2,
        broker={"isDelayedDeliveryDeliverAtTimeStrict": True},
    )
    options = RunOptions(out_dir=tmp_path, drain_s=DRAIN_S)
    results = uvloop.run(run_scenario(chosen, options))
    assert validate_results(results) == []
    drain = results["drain"]
    assert drain["caughtUp"], drain
    assert drain["firstDeliveries"] == drain["publishedMessages"] > 0
    assert drain["distinctDeliveries"] == drain["publishedMessages"] and drain["missing"] == 0
    # the delayed half came no sooner than its delay after its publish (in the run or,
    # on a slow start, in the drain), the other half at once
    assert drain["endToEndLatencyMaxMs"] >= 1500, drain
    assert results["aggregatedEndToEndLatency50pct"] < 1500


# ----------------------------------------------------------------- scenario options


def test_the_pulsar_table_takes_the_omb_producer_options(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "omb.toml"
    path.write_text(
        'topics = 1\ndriver = "pulsar"\n[pulsar]\nserviceUrl = "pulsar://127.0.0.1:6650"\n'
        "batchingEnabled = false\nbatchingMaxPublishDelayMs = 10\nbatchingMaxBytes = 131072\n"
        "batchingMaxMessages = 500\nblockIfQueueFull = false\npendingQueueSize = 5000\n"
        "[consumers]\nreceiverQueueSize = 10\nnackRatio = 0.5\n"
    )
    loaded = load_scenario(str(path))
    assert loaded.driver == "pulsar"
    assert loaded.pulsar.batchingMaxMessages == 500 and not loaded.pulsar.blockIfQueueFull
    assert loaded.consumers.receiverQueueSize == 10
    # OMB's defaults
    defaults = Scenario(name="d", topics=1).pulsar
    assert defaults.batchingEnabled and defaults.blockIfQueueFull
    assert (defaults.batchingMaxPublishDelayMs, defaults.batchingMaxBytes) == (1, 1024 * 1024)
    assert defaults.pendingQueueSize == 0


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ('topics = 1\ndriver = "kafka"\n', "driver"),
        ("topics = 1\n[pulsar]\nbatchingEnabledd = true\n", "pulsar.batchingEnabledd"),
        ('topics = 1\n[pulsar]\nserviceUrl = "http://x:8080"\n', "pulsar.serviceUrl"),
        ("topics = 1\n[consumers]\nnackRatio = 2\n", "consumers.nackRatio"),
        ('topics = 1\n[consumers]\nnackRatio = 0.1\nackMode = "cumulative"\n', "nackRatio"),
    ],
)
def test_a_bad_driver_option_names_the_file_and_field(
    tmp_path: pathlib.Path, text: str, field: str
) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(ScenarioError) as error:
        load_scenario(str(path))
    assert str(path) in str(error.value) and field in str(error.value)


def test_a_service_url_is_refused_for_the_http_driver() -> None:
    options = RunOptions(service_url="pulsar://127.0.0.1:9", duration_s=1)
    with pytest.raises(ScenarioError, match="pulsar driver"):
        uvloop.run(run_scenario(Scenario(name="h", topics=1), options))


# ----------------------------------------------- a started broker's binary protocol

FAKE_BROKER = """
import signal, sys
port = sys.argv[sys.argv.index("--port") + 1]
port = "18123" if port == "0" else port
binary = sys.argv[sys.argv.index("--broker-port") + 1]
binary = "16123" if binary == "-1" else binary
where = sys.argv[sys.argv.index("--where") + 1]
line = f"brokerlab binary protocol on pulsar://127.0.0.1:{binary}"
if where == "before":
    print(line, flush=True)
print(f"brokerlab listening on http://127.0.0.1:{port} (data: x)", flush=True)
if where == "after":
    print("some log line", flush=True)
    print(line, flush=True)
def stop(*_):
    raise SystemExit(0)
# not an Event set from the handler: a SIGTERM that lands while Event.wait holds its
# condition's lock runs the handler in the same thread, which then waits on that lock
# for good (the restart then waited its 30 s stop timeout)
signal.signal(signal.SIGTERM, stop)
while True:
    signal.pause()
"""


class FakeBroker(BrokerProcess):
    """Prints what ``brokerlab serve`` prints, the binary protocol line where asked."""

    def __init__(self, tmp_path: pathlib.Path, where: str) -> None:
        super().__init__(tmp_path / "data", log_path=tmp_path / "broker.log")
        self.where = where
        self.commands: list[list[str]] = []

    def command(self, port: int) -> list[str]:
        real = super().command(port)
        self.commands.append(real)
        binary_port = real[real.index("--broker-port") + 1]
        fake = [sys.executable, "-c", FAKE_BROKER, "--port", str(port)]
        return [*fake, "--broker-port", binary_port, "--where", self.where]


@pytest.mark.parametrize("where", ["before", "after"])
def test_the_binary_protocol_line_is_found_before_or_after_the_http_one(
    tmp_path: pathlib.Path, where: str
) -> None:
    async def scenario_of_restarts() -> None:
        broker = FakeBroker(tmp_path, where)
        try:
            assert await broker.start() == "http://127.0.0.1:18123"
            url = await broker.wait_service_url(BROKER_DEADLINE_S)
            assert url == "pulsar://127.0.0.1:16123" == broker.service_url
            # a restart asks for the same binary port, so clients reconnect to it
            await broker.restart()
            assert broker.commands[0][broker.commands[0].index("--broker-port") + 1] == "-1"
            assert broker.commands[1][broker.commands[1].index("--broker-port") + 1] == "16123"
            assert await broker.wait_service_url(BROKER_DEADLINE_S) == url
        finally:
            assert await broker.stop() in (0, -signal.SIGTERM)

    asyncio.run(scenario_of_restarts())
    assert "binary protocol on pulsar://" in (tmp_path / "broker.log").read_text()


def test_a_broker_without_the_binary_protocol_has_no_service_url(tmp_path: pathlib.Path) -> None:
    async def start_and_stop() -> str:
        broker = FakeBroker(tmp_path, "never")
        await broker.start()
        try:
            return broker.service_url
        finally:
            await broker.stop()

    assert asyncio.run(start_and_stop()) == ""
