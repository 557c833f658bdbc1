"""The load generator's tests start their brokers forked from a warm interpreter
(``tests/loadgen/forked.py``): the same ``brokerlab serve`` command, without a fresh
interpreter's imports at every run and restart."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import loadgen.broker_process
from tests.loadgen.forked import EXEC_BROKERS, LazyForkServer


@pytest.fixture(scope="session")
def lazy_fork_server() -> Iterator[LazyForkServer]:
    server = LazyForkServer()
    yield server
    server.close()


@pytest.fixture(autouse=True)
def forked_loadgen_brokers(
    lazy_fork_server: LazyForkServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not EXEC_BROKERS:
        monkeypatch.setattr(loadgen.broker_process, "launcher", lazy_fork_server.launch)
