"""Cluster tests use the shared harness (``tests/conftest.py``): ``served_broker(brokers=2)``
for ``brokerlab serve --brokers 2`` (the official client's calls block), ``local_cluster``
for an in-process cluster whose brokers a test stops and starts directly. Here: the
helpers only cluster tests need, and the broker processes (``served_broker``,
``shared_served_broker`` and the load generator's) forked from a warm interpreter
(``tests/loadgen/forked.py``): the same ``brokerlab serve`` command without a fresh
interpreter's imports at every start."""

from __future__ import annotations

import pathlib
from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import ServedBrokerFactory
from tests.harness import NAMESPACE, Client, ServedBroker
from tests.loadgen.charts import no_run_charts
from tests.loadgen.forked import (
    EXEC_BROKERS,
    LazyForkServer,
    forked_loadgen_brokers,
    lazy_fork_server,
)

__all__ = ["forked_loadgen_brokers", "lazy_fork_server", "no_run_charts"]


def _start(
    server: LazyForkServer,
    data_dir: pathlib.Path,
    brokers: int = 1,
    storage: dict[str, object] | None = None,
    args: tuple[str, ...] = (),
    **sets: object,
) -> ServedBroker:
    spawn = None if EXEC_BROKERS else server.spawn
    served = ServedBroker(data_dir, sets, storage=storage, brokers=brokers, args=args, spawn=spawn)
    return served.start()


@pytest.fixture
def served_broker(
    tmp_path: pathlib.Path, lazy_fork_server: LazyForkServer
) -> Iterator[ServedBrokerFactory]:
    """As ``tests/conftest.py``'s, each process forked: ``served_broker(brokers=1,
    storage={...}, args=(...), **broker_conf)``, over a data dir of its own; all are
    killed at the end."""
    made: list[ServedBroker] = []

    def start(**options: Any) -> ServedBroker:
        made.append(_start(lazy_fork_server, tmp_path / f"served{len(made)}", **options))
        return made[-1]

    yield start
    for broker in made:
        if broker.running:
            broker.kill()


@pytest.fixture(scope="module")
def shared_served_broker(
    tmp_path_factory: pytest.TempPathFactory, lazy_fork_server: LazyForkServer
) -> Iterator[ServedBrokerFactory]:
    """As ``served_broker``, but one process per configuration for the whole module,
    started by the first test that asks (and again if a test left it stopped)."""
    made: dict[str, ServedBroker] = {}

    def start(**options: Any) -> ServedBroker:
        key = repr(sorted(options.items()))
        broker = made.get(key)
        if broker is None:
            where = tmp_path_factory.mktemp("shared-served")
            made[key] = _start(lazy_fork_server, where, **options)
        elif not broker.running:
            broker.start()
        return made[key]

    yield start
    for broker in made.values():
        if broker.running:
            broker.kill()


def owner_in_listing(brokers: list[dict[str, Any]], bundle: str) -> int | None:
    """The broker whose listing holds ``public/default/<bundle>``, if any."""
    owners = [b["index"] for b in brokers if f"{NAMESPACE}/{bundle}" in b["bundles"]]
    assert len(owners) <= 1, f"bundle {bundle} owned twice: {brokers}"
    return owners[0] if owners else None


async def unfollowed(client: Client, method: str, path: str, json: Any = None) -> tuple[int, str]:
    """One request with redirects not followed: the status and the Location (or "")."""
    async with client.session.request(
        method, client.base_url + path, json=json, allow_redirects=False
    ) as response:
        await response.read()
        return response.status, response.headers.get("Location", "")
