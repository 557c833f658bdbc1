"""The ``brokerlab`` command."""

from __future__ import annotations

import argparse
import asyncio
import errno
import gc
import json
import logging
import pathlib
import signal
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import broker

# Only what every subcommand needs is imported here: each ``brokerlab`` process pays for
# its imports in CPU (about a second for the broker's serving modules), so ``serve``,
# ``bench``, ``token``, ``designs`` and the load generator's commands import theirs when
# they run (tests start hundreds of these processes).
if TYPE_CHECKING:
    from aiohttp import web

    from broker.cluster import Settings
    from broker.config import BrokerConfig
    from loadgen.runner import RunOptions
    from loadgen.scenario import Scenario
    from storage_stub.bookie.api import StorageFaultError

log = logging.getLogger("brokerlab")


def _sample_rate(text: str) -> float:
    try:
        rate = float(text)
    except ValueError:
        rate = -1.0
    if not 0 < rate <= 1:
        raise argparse.ArgumentTypeError(f"a sample rate is in (0, 1], not {text!r}")
    return rate


def version_text() -> str:
    """``brokerlab --version``: the package's version, the newest Pulsar binary protocol
    version it speaks, and the Python it runs on."""
    from broker.pulsar_api import PROTOCOL_VERSION

    python = ".".join(map(str, sys.version_info[:3]))
    return (
        f"brokerlab {broker.__version__} (Pulsar binary protocol v{PROTOCOL_VERSION},"
        f" Python {python})"
    )


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="brokerlab", description=__doc__)
    parser.add_argument("--version", action="version", version=version_text())
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="run the broker")
    serve.add_argument("--host", help="bind address (default: bindAddress of broker.conf)")
    serve.add_argument("--port", type=int, help="port (default: webServicePort; 0 = any free)")
    serve.add_argument(
        "--broker-port",
        type=int,
        help="Pulsar binary protocol port (default: brokerServicePort; 0 = off, -1 = any free)",
    )
    serve.add_argument(
        "--brokers",
        type=int,
        default=1,
        metavar="N",
        help="run N brokers over the same storage, each on its own ports (the given ports "
        "plus its index, or any free ones); topics are spread by namespace bundle",
    )
    serve.add_argument("--data-dir", type=pathlib.Path, default=pathlib.Path("data"))
    serve.add_argument("--config", type=pathlib.Path, help="broker.conf (default conf/broker.conf)")
    serve.add_argument(
        "--storage-config", type=pathlib.Path, help="storage.conf (default conf/storage.conf)"
    )
    serve.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a broker.conf key (repeatable)",
    )
    serve.add_argument(
        "--storage-set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a storage.conf key (repeatable)",
    )
    serve.add_argument(
        "--self-check",
        action="store_true",
        help="start, produce, consume, ack, restart over the same data, verify, exit",
    )
    bench = commands.add_parser("bench", help="run a benchmark and print ratios")
    # fmt: off
    benches = ["http", "cache", "cursors", "lac", "tiered", "wire", "replay", "simulate",
               "analyze"]
    # fmt: on
    bench.add_argument(
        "name",
        choices=benches,
    )
    bench.add_argument("--quick", action="store_true", help="seconds, not minutes (CI)")
    bench.add_argument("--json", action="store_true", help="print one JSON object")
    bench.add_argument(
        "--trace",
        metavar="DIR",
        help="replay, analyze: a recorded trace (default: record a catchup one)",
    )
    bench.add_argument(
        "--sample-rate",
        type=_sample_rate,
        default=0.01,
        help="replay: the miniature simulation's rate (default 0.01)",
    )
    bench.add_argument(
        "--presets",
        action="store_true",
        help="replay: also record every preset and report the sampling error on each",
    )
    designs = commands.add_parser(
        "designs", help="list the cache designs (managedLedgerCacheImplementation values)"
    )
    designs.add_argument("--json", action="store_true", help="print one JSON object")
    from broker.auth.cli import add_command as add_token_command

    add_token_command(commands)
    from broker.cache.designs import VARIANTS
    from loadgen.cli import add_commands

    add_commands(
        commands,
        design_names(),
        {v.name: (v.design, dict(v.settings), v.summary) for v in VARIANTS.values()},
        run_virtual,
        run_virtual_sweep,
    )
    from pipeline.cli import add_command

    add_command(commands)
    from pipeline.trace_cli import add_command as add_trace_command

    add_trace_command(commands)
    return parser


def run_virtual(scenario: Scenario, options: RunOptions, seed: int | None = None) -> dict[str, Any]:
    """The load generator's virtual-time runner (``simulation.run``), imported when a
    run asks for it."""
    from simulation.run import run_virtual as run

    return run(scenario, options, seed)


def run_virtual_sweep(
    scenario: Scenario,
    planned: Sequence[tuple[str, RunOptions, int]],
    master: str | None,
    remote: str | None,
) -> list[dict[str, Any]]:
    """The load generator's sweep on Spark (``simulation.spark``): each planned run a
    task; its failures (a run's, or Spark missing) as the load generator's RunFailed."""
    from loadgen.runner import RunFailed
    from pipeline.spark import SparkMissing
    from simulation.spark import SweepFailed, run_sweep_on_spark, sweep_task

    tasks = [
        sweep_task(
            name,
            scenario,
            seed,
            config=options.config,
            storage_config=options.storage_config,
            broker_overrides={key: str(value) for key, value in options.broker_overrides.items()},
            storage_overrides={key: str(value) for key, value in options.storage_overrides.items()},
            duration_s=options.duration_s,
        )
        for name, options, seed in planned
    ]
    try:
        return run_sweep_on_spark(tasks, master, remote)
    except (SweepFailed, SparkMissing) as error:
        raise RunFailed(str(error)) from None


def design_names() -> list[str]:
    """The registered cache designs, the default (live) one first."""
    from broker.cache.designs import DEFAULT_DESIGN, DESIGNS

    return [DEFAULT_DESIGN, *(name for name in DESIGNS if name != DEFAULT_DESIGN)]


def print_designs(as_json: bool) -> int:
    from broker.cache.designs import DEFAULT_DESIGN, DESIGNS

    if as_json:
        print(json.dumps({name: DESIGNS[name].summary for name in design_names()}))
        return 0
    for name in design_names():
        default = " (default)" if name == DEFAULT_DESIGN else ""
        print(f"{name:<10} {DESIGNS[name].summary}{default}")
    return 0


def _default_conf(given: pathlib.Path | None, file_name: str) -> pathlib.Path | None:
    if given is not None:
        return given
    candidate = pathlib.Path("conf") / file_name
    return candidate if candidate.exists() else None


def _overrides(pairs: Sequence[str]) -> dict[str, object]:
    from storage_stub.confparse import ConfigError

    result: dict[str, object] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise ConfigError(f"override {pair!r}: expected KEY=VALUE")
        result[key.strip()] = value.strip()
    return result


def load_settings(args: argparse.Namespace) -> Settings:
    from broker.cluster import Settings
    from broker.config import load_broker_config, load_storage_config

    broker_overrides = _overrides(args.set)
    if args.host is not None:
        broker_overrides["bindAddress"] = args.host
    if args.port is not None:
        broker_overrides["webServicePort"] = args.port
    if args.broker_port is not None:
        broker_overrides["brokerServicePort"] = args.broker_port
    broker = load_broker_config(_default_conf(args.config, "broker.conf"), broker_overrides)
    storage = load_storage_config(
        _default_conf(args.storage_config, "storage.conf"), _overrides(args.storage_set)
    )
    return Settings(broker=broker, storage=storage, data_dir=args.data_dir)


#: Young-generation threshold of the cyclic GC while serving (CPython's default: 700).
#: A produce request of 100 messages allocates some 200 dicts, so the default ran a
#: young collection every few requests and a full one every few seconds.
SERVE_GC_THRESHOLD = 20_000


def tune_gc_for_serving() -> None:
    """Move everything built at start-up (modules, config, the app) out of the collector's
    sight and collect young objects less often. The broker makes few reference cycles:
    almost all of its garbage is freed by reference counting, so full collections over
    the start-up objects (tens of milliseconds each here) bought nothing."""
    gc.collect()
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(SERVE_GC_THRESHOLD, older, oldest)


def warn_if_open(config: BrokerConfig) -> None:
    """Warn when the broker will listen beyond this machine with no authentication."""
    from broker.auth.service import is_loopback_address

    if not config.authenticationEnabled and not is_loopback_address(config.bindAddress):
        log.warning(
            "listening on %s with authentication off: anyone who can reach it may produce, "
            "consume, delete topics, unload and inject storage faults; set "
            "authenticationEnabled=true and authorizationEnabled=true (README, Security)",
            config.bindAddress,
        )


#: what a bind fails with: the port is taken, privileged, or the address not this machine's
LISTEN_ERRNOS = frozenset((errno.EADDRINUSE, errno.EACCES, errno.EADDRNOTAVAIL))


class StartError(Exception):
    """Start-up failed in a way the user can fix: what they read instead of a traceback,
    one or two lines with the cause and the fix."""

    @classmethod
    def data_dir(cls, error: StorageFaultError, data_dir: pathlib.Path) -> StartError:
        """The storage would not open: held by another process (named when its pid is
        in the lock file), or a fault of the directory itself."""
        from storage_stub.bookie.data_dir_lock import DataDirInUseError

        if isinstance(error, DataDirInUseError):
            holder = f"process {error.pid}" if error.pid is not None else "another process"
            return cls(
                f"brokerlab: the data directory {error.data_dir} is in use by {holder}"
                " (another brokerlab serve?)\n"
                "  stop it, or give this broker a directory of its own: --data-dir DIR"
            )
        return cls(f"brokerlab: cannot open the data directory {data_dir}: {error.detail}")

    @classmethod
    def listen(
        cls, error: OSError, config: BrokerConfig, index: int, *, binary: bool
    ) -> StartError:
        """A listener could not bind: the address, the setting that chose the port, how
        to choose another."""
        if binary:
            setting, flag, free = "brokerServicePort", "--broker-port", "-1 = any free, 0 = off"
            port = config.brokerServicePort
        else:
            setting, flag, free = "webServicePort", "--port", "0 = any free"
            port = config.webServicePort
        # with --brokers N, broker i listens on the given port + i
        which = f" of broker {index}, the given port + {index}" if index else ""
        address = f"{config.bindAddress}:{port}"
        if error.errno == errno.EADDRINUSE:
            cause = f"port {port} is already in use ({setting}{which})"
        elif error.errno == errno.EACCES:
            return cls(
                f"brokerlab: cannot listen on {address}: no permission for port {port}"
                f" ({setting}{which})\n  choose a port above 1023: {flag} PORT ({free}),"
                f" or {setting}=PORT in broker.conf"
            )
        elif error.errno == errno.EADDRNOTAVAIL:
            return cls(
                f"brokerlab: cannot listen on {address}: {config.bindAddress} is not an"
                " address of this machine\n  choose another with --host or bindAddress"
                " in broker.conf"
            )
        else:
            cause = f"{error.strerror or error} ({setting}{which})"
        return cls(
            f"brokerlab: cannot listen on {address}: {cause}\n"
            f"  stop what uses it, or choose another port: {flag} PORT ({free}),"
            f" or {setting}=PORT in broker.conf"
        )


def _write_targets(settings: Settings, http_urls: list[str]) -> bool:
    """Write the data directory's Prometheus targets; whether it was written (a full or
    read-only disk, which the broker serves on, only costs the file)."""
    from broker.scrape_targets import write_scrape_targets

    if settings.data_dir is None:
        return False
    try:
        write_scrape_targets(settings.data_dir, settings.broker.clusterName, http_urls)
    except OSError as error:
        log.warning("cannot write the Prometheus targets file: %s", error)
        return False
    return True


async def serve(settings: Settings, brokers: int = 1) -> int:
    """Run until SIGINT or SIGTERM, then close cleanly (ledgers closed, files flushed),
    and return 0; 1 after the same close if a codec process died.
    Each broker prints the address of its HTTP service and binary protocol."""
    from broker.cluster import Cluster, http_url
    from broker.heap import keep_heap_for_serving
    from broker.http.app import node_app
    from broker.http.app_state import CODEC
    from broker.http.listener import LimitedTCPSite, http_runner
    from storage_stub.bookie.api import StorageFaultError

    warn_if_open(settings.broker)
    keep_heap_for_serving()
    cluster = Cluster(settings, brokers=brokers)
    try:
        await cluster.open()
    except StorageFaultError as error:
        raise StartError.data_dir(error, settings.data_dir or pathlib.Path()) from None
    runners: list[web.AppRunner] = []
    exit_code = 0
    targets_written = False
    try:
        for node in cluster.nodes:
            config = node.config
            runner = http_runner(node_app(node), config)
            await runner.setup()
            runners.append(runner)
            try:
                await LimitedTCPSite.for_config(runner, config).start()
            except OSError as error:
                raise StartError.listen(error, config, node.index, binary=False) from None
            port = runner.addresses[0][1]
            node.address.http_url = http_url(config.advertisedAddress, port)
        try:
            await cluster.start()
        except OSError as error:
            # the node that failed is the first with a binary port and no listener
            failed = next(
                (n for n in cluster.nodes if n.protocol is None and n.config.brokerServicePort),
                None,
            )
            if failed is None or error.errno not in LISTEN_ERRNOS:
                raise
            raise StartError.listen(error, failed.config, failed.index, binary=True) from None
        tune_gc_for_serving()
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        # before the lines that say it listens: a SIGTERM right after them stops it cleanly
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop.set)
        urls = [node.address.http_url for node in cluster.nodes]
        targets_written = await asyncio.to_thread(_write_targets, settings, urls)
        for node, runner in zip(cluster.nodes, runners, strict=True):
            which = f", broker {node.index}" if brokers > 1 else ""
            print(
                f"brokerlab listening on http://{node.config.bindAddress}:{runner.addresses[0][1]}"
                f" (data: {settings.data_dir}, sync: {settings.storage.syncMode}{which})",
                flush=True,
            )
            if node.protocol is not None:
                suffix = f" (broker {node.index})" if brokers > 1 else ""
                print(
                    f"brokerlab binary protocol on {node.protocol.service_url}{suffix}", flush=True
                )
        stopped: asyncio.Future[Any] = asyncio.ensure_future(stop.wait())
        # a codec process that dies takes the broker down rather than leave it half-alive
        died: list[asyncio.Future[Any]] = [
            runner.app[CODEC].died for runner in runners if CODEC in runner.app
        ]
        try:
            await asyncio.wait([stopped, *died], return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopped.cancel()
        failure = next((future.result() for future in died if future.done()), None)
        if failure is not None:
            print(f"brokerlab: {failure}; shutting down", file=sys.stderr, flush=True)
            exit_code = 1
        else:
            print("brokerlab: shutting down", flush=True)
    finally:
        if targets_written:
            # Prometheus drops the targets rather than report them down
            _write_targets(settings, [])
        for runner in runners:
            await runner.cleanup()
        await cluster.close()
    return exit_code


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    if getattr(args, "analyze", False):
        from pipeline.cli import run

        return run(args)
    if getattr(args, "trace_export", False):
        from pipeline.trace_cli import run as run_trace

        return run_trace(args)
    if getattr(args, "handler", None):
        from loadgen.cli import run_command

        return run_command(args)
    if args.command == "designs":
        return print_designs(args.json)
    if args.command == "token":
        from broker.auth.cli import run as run_token

        return run_token(args)
    if args.command == "bench":
        from broker.bench import run_bench

        if args.name == "replay":
            from broker.bench.replay import main as replay_main

            return replay_main(args.quick, args.json, args.trace, args.sample_rate, args.presets)
        if args.name == "analyze":
            from broker.bench.analyze import main as analyze_main

            return analyze_main(args.quick, args.json, args.trace)
        if args.name == "simulate":
            from simulation.bench import main as simulate_main

            return simulate_main(quick=args.quick, as_json=args.json)
        return run_bench(args.name, quick=args.quick, as_json=args.json)
    import uvloop

    from storage_stub.confparse import ConfigError

    try:
        settings = load_settings(args)
    except ConfigError as error:
        print(f"brokerlab: configuration error:\n{error}", file=sys.stderr)
        return 2
    if args.self_check:
        from broker.selfcheck import run_self_check

        return uvloop.run(run_self_check(settings))
    from broker.dispatch.data_format import DataFormatError

    try:
        if args.brokers < 1:
            print("brokerlab: --brokers must be at least 1", file=sys.stderr)
            return 2
        return uvloop.run(serve(settings, args.brokers))
    except DataFormatError as error:
        print(f"brokerlab: cannot serve {settings.data_dir}: {error}", file=sys.stderr)
        return 2
    except StartError as error:
        print(error, file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
