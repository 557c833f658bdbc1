"""A data directory written before entries took Pulsar's format is refused at start, not
misread; a new one is marked as holding Pulsar's format and starts again.

An earlier brokerlab's directory is made here as it was: topics in the metadata and no
``format/entries`` key (a broker of today writes one, then the key is deleted through
the storage API). A directory written by the brokerlab before commit e14a9cf itself is
refused the same way; that was checked by hand, as the test cannot run an old brokerlab.
"""

from __future__ import annotations

import contextlib
import pathlib
from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from broker.config import load_storage_config
from broker.dispatch.data_format import ENTRY_FORMAT, ENTRY_FORMAT_KEY, DataFormatError
from broker.http.app import create_app
from broker.ledger.managed_ledger import metadata_key
from storage_stub.bookie import MetadataStore, open_storage
from tests.conftest import CONF, BrokerProcess, BrokerProcessFactory, make_settings, unb64

TOPIC = "public/default/old-format"


@contextlib.asynccontextmanager
async def metadata_of(data_dir: pathlib.Path) -> AsyncIterator[MetadataStore]:
    """The metadata store of a data dir no broker is running on, as the broker opens it."""
    storage = await open_storage(load_storage_config(CONF / "storage.conf", {}), data_dir)
    try:
        yield storage.metadata
    finally:
        await storage.close()


async def write_topic(broker: BrokerProcess) -> str:
    """Start the broker, store one message, stop it cleanly; the message's id."""
    client = await broker.start()
    (message_id,) = await client.produce(TOPIC, ["written before"])
    assert await broker.stop() == 0
    return message_id


async def refused_start(broker: BrokerProcess) -> tuple[int, str]:
    """Start a broker that must not come up: its exit code and output."""
    with pytest.raises(RuntimeError, match="broker exited during start"):
        await broker.start()
    assert broker.process is not None
    return await broker.process.wait(), "".join(broker.output)


@pytest.mark.slow
async def test_a_data_dir_of_an_earlier_brokerlab_is_refused_with_exit_2_and_a_reason(
    broker_process: BrokerProcessFactory, tmp_path: pathlib.Path
) -> None:
    old = tmp_path / "old"
    await write_topic(broker_process(data_dir=old))
    async with metadata_of(old) as metadata:
        assert await metadata.keys_with_prefix(metadata_key("")), "the topic is recorded"
        await metadata.delete(ENTRY_FORMAT_KEY)

    code, output = await refused_start(broker_process(data_dir=old))
    assert code == 2, output
    assert f"brokerlab: cannot serve {old}: " in output
    assert "written by an earlier brokerlab" in output
    assert "Start with a new --data-dir" in output
    assert "Traceback" not in output
    async with metadata_of(old) as metadata:
        assert await metadata.get(ENTRY_FORMAT_KEY) is None, "a refused dir is not re-marked"
        assert await metadata.keys_with_prefix(metadata_key("")), "nor emptied"

    fresh = broker_process(data_dir=tmp_path / "fresh")
    client = await fresh.start()
    assert await client.produce(TOPIC, ["new"])
    assert await fresh.stop() == 0


@pytest.mark.slow
async def test_a_data_dir_of_an_unknown_entry_format_is_refused_naming_the_format(
    broker_process: BrokerProcessFactory, tmp_path: pathlib.Path
) -> None:
    data = tmp_path / "data"
    await write_topic(broker_process(data_dir=data))
    async with metadata_of(data) as metadata:
        await metadata.put(ENTRY_FORMAT_KEY, b"pulsar-99")

    code, output = await refused_start(broker_process(data_dir=data))
    assert code == 2, output
    assert f"brokerlab: cannot serve {data}: " in output
    assert "'pulsar-99'" in output


@pytest.mark.slow
async def test_a_new_data_dir_is_marked_as_pulsar_format_and_serves_again(
    broker_process: BrokerProcessFactory, tmp_path: pathlib.Path
) -> None:
    data = tmp_path / "data"
    message_id = await write_topic(broker_process(data_dir=data))
    async with metadata_of(data) as metadata:
        assert await metadata.get(ENTRY_FORMAT_KEY) == ENTRY_FORMAT == b"pulsar-1"

    again = broker_process(data_dir=data)
    client = await again.start()
    consumer = await client.subscribe(TOPIC, "reader", subscriptionInitialPosition="Earliest")
    (message,) = await client.receive_until(consumer, 1)
    assert (message["messageId"], unb64(message["payload"])) == (message_id, b"written before")
    assert await again.stop() == 0


async def test_a_refused_start_closes_the_data_dir_it_opened(tmp_path: pathlib.Path) -> None:
    async with metadata_of(tmp_path) as metadata:
        await metadata.put(metadata_key("public/default/persistent/old"), b"an old topic")

    runner = web.AppRunner(create_app(make_settings(tmp_path)), access_log=None)
    with pytest.raises(DataFormatError, match="earlier brokerlab"):
        await runner.setup()
    await runner.cleanup()
    # RocksDB holds a lock on an open database: opening it again proves it was closed
    async with metadata_of(tmp_path) as metadata:
        assert await metadata.get(ENTRY_FORMAT_KEY) is None
