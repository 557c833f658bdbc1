"""Integration tests start ``brokerlab serve`` processes forked from a warm server
(``forkserver``): the same command, main and data dir, without a fresh interpreter's
imports at every start and restart."""

from __future__ import annotations

import os
import pathlib
from collections.abc import AsyncIterator, Iterator

import pytest

from tests.conftest import BrokerProcessFactory
from tests.harness import BrokerProcess
from tests.integration.forkserver import ForkServer

EXEC_BROKERS = os.environ.get("BROKERLAB_TEST_EXEC_BROKERS") == "1"


@pytest.fixture(scope="session")
def fork_server() -> Iterator[ForkServer | None]:
    if EXEC_BROKERS:
        yield None
        return
    server = ForkServer()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
async def broker_process(
    tmp_path: pathlib.Path, fork_server: ForkServer | None
) -> AsyncIterator[BrokerProcessFactory]:
    """Make broker processes over data dirs under tmp_path; all are killed at the end."""
    made: list[BrokerProcess] = []

    def make(*args: str, data_dir: pathlib.Path | None = None) -> BrokerProcess:
        where = data_dir or tmp_path / "data"
        spawn = None if fork_server is None else fork_server.spawn
        process = BrokerProcess(where, list(args), spawn)
        made.append(process)
        return process

    yield make
    for process in made:
        if process.served.running:
            await process.kill()
