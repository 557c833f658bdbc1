"""The bench's ceilings do the work the contract asks of a broker: the bare produce
endpoint really decodes every payload (a payload that is not base64 gets 400, as from
the broker) and the bare consumer hands back what was produced, encoded as the broker
encodes it."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from aiohttp import web

from broker.bench.bare_server import create_app
from tests.conftest import Client, b64, in_process_broker, unb64


@contextlib.asynccontextmanager
async def bare_server() -> AsyncIterator[Client]:
    runner = web.AppRunner(create_app(), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    client = Client(f"http://127.0.0.1:{runner.addresses[0][1]}")
    try:
        yield client
    finally:
        await client.close()
        await runner.cleanup()


async def test_bare_produce_refuses_a_payload_that_is_not_base64_as_the_broker_does() -> None:
    # "QQ==\n": only a strict decoder refuses the line break; a lenient one reads "A"
    async with bare_server() as bare, in_process_broker() as broker:
        for client in (bare, broker):
            for bad in ("not base64!", "QQ==\n"):
                request = {"messages": [{"payload": b64("fine")}, {"payload": bad}]}
                status, _ = await client.request(
                    "POST", "/topics/persistent/public/default/t", json=request
                )
                assert status == 400, bad


async def test_bare_produce_answers_one_id_per_message_in_the_brokers_shape() -> None:
    """Ids are ``L:E`` with entry ids counting up across requests, as the broker's."""
    request = {"messages": [{"payload": b64(f"m{i}")} for i in range(3)]}
    async with bare_server() as bare, in_process_broker() as broker:
        for client in (bare, broker):
            entry_ids: list[int] = []
            for _ in range(2):
                status, body = await client.request(
                    "POST", "/topics/persistent/public/default/t", json=request
                )
                assert status == 200
                results = body["messagePublishResults"]
                assert [result["errorCode"] for result in results] == [0, 0, 0]
                ledgers = {result["messageId"].split(":")[0] for result in results}
                assert len(ledgers) == 1
                entry_ids += [int(result["messageId"].split(":")[1]) for result in results]
            first = entry_ids[0]
            assert entry_ids == list(range(first, first + 6))


async def test_bare_consumer_gets_what_was_produced_with_the_brokers_fields() -> None:
    async with bare_server() as bare, in_process_broker() as broker:
        fields = []
        for client in (bare, broker):
            consumer = await client.subscribe(
                "public/default/t",
                "s",
                subscriptionType="Exclusive",
                subscriptionInitialPosition="Earliest",
            )
            ids = await client.produce("public/default/t", ["one", "two"])
            ids += await client.produce("public/default/t", ["three"])
            messages = await client.receive_until(consumer, 3)
            assert [unb64(m["payload"]) for m in messages] == [b"one", b"two", b"three"]
            assert [m["messageId"] for m in messages] == ids
            await client.ack(consumer, [ids[-1]], "Cumulative")
            fields.append({key for message in messages for key in message})
        assert fields[0] == fields[1]
