"""The test harness's fixtures; its plain helpers are in ``tests/harness.py``.

Which to use for what (import helpers from ``tests.harness``; the names below are
re-exported here too, for tests that import them from ``tests.conftest``):

- A broker for an async test, spoken to over HTTP: ``shared_broker(**broker_conf)``
  returns a :class:`Client` of an in-process broker shared by the tests of the module
  that ask for the same configuration (in-memory storage; it runs on a thread of its
  own, so it outlives each test's event loop). Use it unless the test needs a broker
  nobody else touched: then ``live_broker(**broker_conf)`` (fresh, in-memory unless
  ``data_dir`` is given, stopped at the end of the test), or ``in_process_broker()``
  as a context manager when the test stops and reopens a broker over a data dir
  (``in_process_node()`` also gives the broker itself, for tests that reach inside;
  ``broker_service`` is a fresh one's client and service, for a test that stores
  something directly; ``harness.in_memory_service()`` is the service alone, no HTTP,
  on a manual clock: the ``service`` fixture of tests/dispatch and tests/session).
- ``brokerlab serve`` as a process (the official client, signals, restarts, clusters):
  ``shared_served_broker(**broker_conf, storage=..., brokers=N)`` shares one per
  module and configuration (started again if a test stopped it);
  ``served_broker(...)`` starts a fresh one per test. Both give a :class:`ServedBroker`
  (blocking; ``.http_url``, ``.service_url``, ``.ok()``, ``.request()``, ``.log()`` with
  ``.mark()``, ``.stop()``, ``.kill()``, ``.start()``). A module whose tests all speak
  to one broker takes ``broker``, the module's shared one of ``broker_conf`` (``{}``; a
  module sets keys by overriding that module-scoped fixture), and ``client``, an
  official client of it closed after each test. Async tests that need the
  process use ``broker_process(*args)``, a :class:`BrokerProcess` over the same launcher.
  All three fork the process from a warm interpreter (``broker_spawn``); a test that
  builds a :class:`ServedBroker` itself passes ``spawn=broker_spawn`` for the same.
- An in-process cluster with one HTTP front end per broker: ``local_cluster()``, or
  ``in_process_cluster()`` as a context manager when the test looks at what the
  cluster left behind once closed (its trace).
- Official Pulsar clients closed at the end of the test: ``pulsar_client(service_url)``.
- Waiting for something: ``eventually(condition, what, deadline_s)`` (blocking) or
  ``await eventually_async(...)`` (either kind of condition); never a fixed sleep.
  ``what`` may be a callable naming what was last seen; ``every_s`` spaces the looks
  (0 when each look is a long poll); a passed deadline raises ``DeadlinePassed`` (an
  AssertionError), which only a reader that reports a short read itself catches.
- A topic name no other test uses: ``new_topic(prefix)`` (``tenant/ns/prefix-N``;
  ``new_topic(prefix, full=True)`` or ``persistent(topic)`` is the client's full name,
  ``new_topic_and_path`` both the client's name and the HTTP path); in a given
  bundle: ``topics_in_distinct_bundles``, ``topic_in_bundle``.

- ``brokerlab`` run to its end (tests of the command line): ``brokerlab(*argv)``.

New tests should not add other launchers, pollers or topic makers: a test that needs
something these do not give extends them with an option.
"""

from __future__ import annotations

import collections
import contextlib
import gc
import json
import pathlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import TYPE_CHECKING, Any

import pytest
from aiohttp import web

from tests.harness import (
    CONF,
    ROOT,
    STARTUP_DEADLINE_S,
    Answer,
    BrokerProcess,
    BrokerThread,
    Client,
    LocalCluster,
    ServedBroker,
    Spawn,
    b64,
    child_processes,
    eventually,
    eventually_async,
    in_process_broker,
    in_process_cluster,
    in_process_node,
    make_settings,
    new_topic,
    persistent,
    served,
    short,
    unb64,
    url_of,
)
from tests.loadgen.forked import EXEC_BROKERS, LazyForkServer
from tests.pipeline.servers import (
    SERVERS_GROUP,
    SESSION_GROUP,
    start_class_archive,
    starts_jvms,
    xdist_group,
)

# Collecting the suite (importing some 230 test modules, each rewritten by pytest's
# assertion rewriting, and what they import) builds a heap of some 260,000 objects that
# lives until the session ends. With the cycle collector on, its full passes over that
# growing heap were 2.7 of the 10 s of CPU each test process (each xdist worker)
# spent before its first test, and every pass after it (each full one during the tests,
# pytest's five at the session's end) walked it again (measured: `pytest --collect-only
# -n 0`, 10.3 s of CPU before, 6.3 s with this). So the collector is off while the suite is imported
# and collected, and what collection left alive is then frozen (``gc.freeze``: kept out
# of every later pass) once the garbage it made is collected.
gc.disable()


@pytest.hookimpl(wrapper=True)
def pytest_collection(session: pytest.Session) -> Any:
    try:
        return (yield)
    finally:
        gc.collect()
        gc.freeze()
        gc.enable()


if TYPE_CHECKING:
    import pulsar

    from broker.dispatch.service import BrokerService


def pytest_itemcollected(item: pytest.Item) -> None:
    """Under xdist, the tests that use a test process's Spark JVMs (the session, the
    standalone cluster, the Connect server: tests/pipeline/servers.py), the pipeline's
    and tests/simulation/test_spark_sweep.py's, in groups
    (``tests.pipeline.servers.xdist_group``): with ``--dist loadgroup`` one worker runs
    those of the local session (and records and analyzes the shared trace once), one
    (maybe another) those of the standalone cluster and the Connect server, each
    starting each JVM once, rather than every worker its own. Marked as each item is
    collected: xdist reads the mark in its own ``pytest_collection_modifyitems``, which
    ran before a conftest's (tryfirst or not), so a mark added there named no group and
    the Spark tests were spread over both workers, each starting its own JVMs.

    The tests of a module that shares ``brokerlab serve`` processes
    (``shared_served_broker``, one per module and configuration) are a group of their
    own, the module: each worker running some of them started the module's brokers."""
    names = getattr(item, "fixturenames", ())
    group = xdist_group(names)
    if group is None and "shared_served_broker" in names:
        group = item.nodeid.partition("::")[0]
    if group is not None:
        item.add_marker(pytest.mark.xdist_group(group))


#: the order in which xdist hands out units of work (``--no-loadscope-reorder`` in
#: pyproject.toml's addopts: in the order of each unit's first test, which
#: :func:`pytest_collection_modifyitems` sets). First the two Spark groups: each is the
#: longest chain one worker runs (its JVMs start slowly and its tests run one after
#: another), and ordered by their numbers of tests, as xdist would, the servers' four
#: came after every module's group. Then the other groups, most tests first.
FIRST_GROUPS = (SERVERS_GROUP, SESSION_GROUP)
#: then, of the single tests, these modules' (long, and collected among the last): they
#: start once the groups are out rather than near the end, where one worker ran one
#: alone while the others had nothing left (the README's commands, 11 s, were a run's
#: last test; the S3 walk-through's 26 s started a minute before the end). Not
#: test_agreement's live runs (9 s each, also late): they compare a live broker's pace
#: with virtual time, and the front of the run is its busiest stretch
LONG_FIRST = ("tests/pipeline/test_s3.py", "tests/test_readme.py")


def _group(item: pytest.Item) -> str | None:
    mark = item.get_closest_marker("xdist_group")
    if mark is None:
        return None
    return str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The run's order (a stable sort: within a group or a module, and of the rest, the
    collection's): in an xdist worker, the groups first (:data:`FIRST_GROUPS`, then the
    others by size); then :data:`LONG_FIRST`'s modules, each whole; then every other
    test. Without xdist the groups stay where they were collected (a group spanning
    modules would set a module's fixtures up again for each of its parts).

    If the tests start JVMs, the machine's class archive for them is made now unless it
    is there (``tests.pipeline.servers.start_class_archive``: the first test process
    to get here makes it, and every JVM's start waits for it)."""
    if starts_jvms(items):
        start_class_archive(config)
    worker = hasattr(config, "workerinput")
    groups = {item.nodeid: _group(item) for item in items} if worker else {}
    sizes = collections.Counter(groups.values())

    def rank(item: pytest.Item) -> tuple[int, int, int, str]:
        group = groups.get(item.nodeid)
        if group is not None:
            first = FIRST_GROUPS.index(group) if group in FIRST_GROUPS else len(FIRST_GROUPS)
            return (0, first, -sizes[group], group)
        path = item.nodeid.partition("::")[0]
        return (1, LONG_FIRST.index(path) if path in LONG_FIRST else len(LONG_FIRST), 0, "")

    items.sort(key=rank)


__all__ = [
    "CONF",
    "ROOT",
    "STARTUP_DEADLINE_S",
    "Answer",
    "BrokerProcess",
    "BrokerProcessFactory",
    "Client",
    "LiveBroker",
    "LocalCluster",
    "LocalClusterFactory",
    "ServedBroker",
    "ServedBrokerFactory",
    "b64",
    "child_processes",
    "eventually",
    "eventually_async",
    "in_process_broker",
    "make_settings",
    "new_topic",
    "persistent",
    "served",
    "short",
    "unb64",
]


def _config_key(config: dict[str, Any]) -> str:
    return json.dumps(config, sort_keys=True, default=str)


# ---------------------------------------------------------------------- in-process brokers

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
        clients.append(Client(url_of(runner)))
        return clients[-1]

    yield start
    for client in clients:
        await client.close()
    for runner in runners:
        await runner.cleanup()


@pytest.fixture
async def broker_service() -> AsyncIterator[tuple[Client, BrokerService]]:
    """A fresh in-process broker for the test (``in_process_node``, in-memory storage):
    its client and its service, for tests that put things in it past the HTTP API."""
    async with in_process_node() as (client, node):
        assert node.service is not None
        yield client, node.service


@pytest.fixture(scope="module")
def _broker_threads() -> Iterator[dict[str, BrokerThread]]:
    """The module's shared in-process brokers, by configuration."""
    threads: dict[str, BrokerThread] = {}
    yield threads
    for thread in threads.values():
        thread.stop()


@pytest.fixture
async def shared_broker(_broker_threads: dict[str, BrokerThread]) -> AsyncIterator[LiveBroker]:
    """As ``live_broker`` (in-memory storage only), but the broker is the module's one of
    that configuration (and ``name``, for brokers of one configuration kept apart),
    started by the first test that asks: use new topic names (``new_topic``), and leave
    no state other tests would trip over."""
    clients: list[Client] = []

    async def connect(
        storage: dict[str, Any] | None = None, name: str = "", **broker: Any
    ) -> Client:
        key = _config_key({"storage": storage, "name": name, **broker})
        if key not in _broker_threads:
            _broker_threads[key] = BrokerThread(make_settings(None, storage, **broker)).start()
        clients.append(Client(_broker_threads[key].url))
        return clients[-1]

    yield connect
    for client in clients:
        await client.close()


# ---------------------------------------------------------------------- broker processes

ServedBrokerFactory = Callable[..., ServedBroker]


@pytest.fixture(scope="session")
def lazy_fork_server() -> Iterator[LazyForkServer]:
    """This test process's one fork server (``tests/integration/forkserver.py``), started
    by the first broker it forks: the harness's ``brokerlab serve`` processes and the load
    generator's brokers (``tests/loadgen/forked.py``) alike."""
    server = LazyForkServer()
    yield server
    server.close()


@pytest.fixture(scope="session")
def broker_spawn(lazy_fork_server: LazyForkServer) -> Spawn | None:
    """How the fixtures below start ``brokerlab serve``: forked from a warm interpreter
    (:func:`lazy_fork_server`), the same command over the same data dir without a fresh
    interpreter's seconds of imports at every start and restart;
    ``BROKERLAB_TEST_EXEC_BROKERS=1`` starts each with a fresh interpreter instead."""
    return None if EXEC_BROKERS else lazy_fork_server.spawn


def _start_served(
    spawn: Spawn | None,
    data_dir: pathlib.Path,
    brokers: int = 1,
    storage: dict[str, object] | None = None,
    args: tuple[str, ...] = (),
    **sets: object,
) -> ServedBroker:
    served = ServedBroker(data_dir, sets, storage=storage, brokers=brokers, args=args, spawn=spawn)
    return served.start()


@pytest.fixture
def served_broker(
    tmp_path: pathlib.Path, broker_spawn: Spawn | None
) -> Iterator[ServedBrokerFactory]:
    """Start ``brokerlab serve`` processes, each over a data dir of its own:
    ``served_broker(brokers=1, storage={...}, args=(...), **broker_conf)``. All are
    killed at the end."""
    made: list[ServedBroker] = []

    def start(**options: Any) -> ServedBroker:
        made.append(_start_served(broker_spawn, tmp_path / f"served{len(made)}", **options))
        return made[-1]

    yield start
    for broker in made:
        if broker.running:
            broker.kill()


@pytest.fixture(scope="module")
def shared_served_broker(
    tmp_path_factory: pytest.TempPathFactory, broker_spawn: Spawn | None
) -> Iterator[ServedBrokerFactory]:
    """As ``served_broker``, but one process per configuration for the whole module,
    started by the first test that asks (and again if a test left it stopped)."""
    made: dict[str, ServedBroker] = {}

    def start(**options: Any) -> ServedBroker:
        key = _config_key(options)
        broker = made.get(key)
        if broker is None:
            where = tmp_path_factory.mktemp("shared-served")
            made[key] = _start_served(broker_spawn, where, **options)
        elif not broker.running:
            broker.start()
        return made[key]

    yield start
    for broker in made.values():
        if broker.running:
            broker.kill()


@pytest.fixture(scope="module")
def broker_conf() -> dict[str, Any]:
    """What ``broker`` passes to ``shared_served_broker``: nothing (the shipped conf)
    unless the module overrides this fixture, module-scoped, with its own keys."""
    return {}


@pytest.fixture
def broker(shared_served_broker: ServedBrokerFactory, broker_conf: dict[str, Any]) -> ServedBroker:
    """The module's shared ``brokerlab serve`` of ``broker_conf``, for modules whose
    tests all speak to one broker; looked up at each test, so one that a test left
    stopped is started again."""
    return shared_served_broker(**broker_conf)


@pytest.fixture
def client(broker: ServedBroker, pulsar_client: Callable[..., Any]) -> pulsar.Client:
    """An official Pulsar client of ``broker``, closed at the end of the test."""
    return pulsar_client(broker.service_url)


BrokerProcessFactory = Callable[..., BrokerProcess]


@pytest.fixture
async def broker_process(
    tmp_path: pathlib.Path, broker_spawn: Spawn | None
) -> AsyncIterator[BrokerProcessFactory]:
    """Make broker processes over data dirs under tmp_path; all are killed at the end."""
    made: list[BrokerProcess] = []

    def make(*args: str, data_dir: pathlib.Path | None = None) -> BrokerProcess:
        process = BrokerProcess(data_dir or tmp_path / "data", list(args), broker_spawn)
        made.append(process)
        return process

    yield make
    for process in made:
        if process.served.running:
            await process.kill()


# ---------------------------------------------------------------------- clusters in process

LocalClusterFactory = Callable[..., Awaitable[LocalCluster]]


@pytest.fixture
async def local_cluster() -> AsyncIterator[LocalClusterFactory]:
    """Start in-process clusters (``in_process_cluster``: in-memory storage, one HTTP
    front end per broker); keyword arguments are broker.conf keys, ``storage``
    storage.conf ones. All are closed at the end."""
    async with contextlib.AsyncExitStack() as made:

        async def start(
            brokers: int = 2, storage: dict[str, Any] | None = None, **broker: Any
        ) -> LocalCluster:
            return await made.enter_async_context(in_process_cluster(brokers, storage, **broker))

        yield start


# ---------------------------------------------------------------------- official clients


@pytest.fixture
def pulsar_client() -> Iterator[Callable[..., Any]]:
    """Official Pulsar clients of a service URL (keyword arguments go to
    ``pulsar.Client``); those still open are closed at the end."""
    import pulsar  # the C++ client's start-up cost, only in the tests that use it

    made: list[pulsar.Client] = []

    def connect(service_url: str, **options: Any) -> pulsar.Client:
        options.setdefault("operation_timeout_seconds", 20)
        options.setdefault("logger", pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
        made.append(pulsar.Client(service_url, **options))
        return made[-1]

    yield connect
    for client in made:
        with contextlib.suppress(pulsar.AlreadyClosed):
            client.close()
