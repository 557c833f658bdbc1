"""Limits of the HTTP front end on a real port: idle and slowloris connections are
closed after httpServerIdleTimeout, a body trickled below brokerlabHttpMinRequestDataRate
is answered 408 and cut, connections over a limit are answered 429 and closed, and count
limits answer 409 naming the setting."""

from __future__ import annotations

import asyncio
import contextlib
import json
import resource
from collections.abc import AsyncIterator
from typing import Any

import pytest

from broker.config import load_broker_config
from broker.http.listener import LimitedTCPSite
from loadgen.bounded import ADMIN_CONCURRENCY
from loadgen.run import PRODUCE_CONNECTIONS
from loadgen.runner import _connection_limit
from loadgen.scenario import load_scenario
from tests.conftest import CONF, Client, make_settings
from tests.harness import eventually_async, served_site, url_of

DEADLINE_S = 30.0


@contextlib.asynccontextmanager
async def limited_broker(**broker: Any) -> AsyncIterator[tuple[LimitedTCPSite, Client]]:
    """A broker served as ``brokerlab serve`` serves it: runner and site from config."""
    runner, site = await served_site(make_settings(None, **broker))
    client = Client(url_of(runner))
    try:
        yield site, client
    finally:
        await client.close()
        await runner.cleanup()


async def read_to_eof(reader: asyncio.StreamReader) -> bytes:
    return await asyncio.wait_for(reader.read(), DEADLINE_S)


def allow_files(count: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < count:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(count, hard), hard))


async def test_two_thousand_idle_connections_are_closed_after_the_idle_timeout() -> None:
    allow_files(2 * 2000 + 512)  # both ends of each connection live in this process
    async with limited_broker(httpServerIdleTimeout=500) as (site, _):
        connections = [await asyncio.open_connection("127.0.0.1", site.port) for _ in range(2000)]
        await eventually_async(
            lambda: site.limiter.total == 0, "the broker to close every idle connection"
        )
        for reader, writer in connections:
            assert await read_to_eof(reader) == b""  # closed by the broker, nothing said
            writer.close()


async def test_a_slowloris_client_is_cut_before_its_request_head_completes() -> None:
    head = (
        b"GET /admin/v2/brokers/health HTTP/1.1\r\nHost: 127.0.0.1\r\n" + b"X-Pad: " + b"a" * 5000
    )
    async with limited_broker(httpServerIdleTimeout=500) as (site, _):
        reader, writer = await asyncio.open_connection("127.0.0.1", site.port)
        sent = 0
        cut = False

        async def one_more_byte() -> bool:
            """Send the head's next byte; whether the client was cut or sent it all."""
            nonlocal sent, cut
            writer.write(head[sent : sent + 1])
            sent += 1
            try:
                await asyncio.wait_for(reader.read(1), 0.01)  # the client's pace
            except TimeoutError:
                pass
            except ConnectionError:
                # a byte written after the broker closed draws a reset from its kernel:
                # the cut, seen from this side as a reset (or a broken pipe) rather than
                # an end of file
                cut = True
            cut = cut or reader.at_eof()
            return cut or sent >= len(head)

        await eventually_async(one_more_byte, "the slow client to be cut", DEADLINE_S, every_s=0)
        assert cut, "the head completed before the broker cut the client"
        assert sent < len(head)
        assert site.limiter.total == 0
        writer.close()


async def test_a_request_body_that_stops_coming_is_cut_after_the_idle_timeout() -> None:
    topic = "public/default/slow-body"
    body = b'{"messages": [{"payload": "bm90IHN0b3JlZA=="}]}'
    head = (
        f"POST /topics/persistent/{topic} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode()
    async with limited_broker(httpServerIdleTimeout=500) as (site, client):
        await client.produce(topic, ["stored"])
        reader, writer = await asyncio.open_connection("127.0.0.1", site.port)
        writer.write(head + body[:10])  # then nothing more
        assert await read_to_eof(reader) == b""  # closed by the broker, nothing said
        await eventually_async(lambda: site.limiter.total == 0, "the cut connection released")
        assert (await client.stats(topic))["msgInCounter"] == 1  # the cut request stored nothing
        writer.close()


def produce_head(topic: str, length: int) -> bytes:
    return (
        f"POST /topics/persistent/{topic} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        f"Content-Type: application/json\r\nContent-Length: {length}\r\n\r\n"
    ).encode()


#: a body must come at 1000 bytes a second at least, measured over each second
MIN_RATE_1000 = {"httpServerIdleTimeout": 1000, "brokerlabHttpMinRequestDataRate": 1000}


def padded_produce_body(size: int) -> bytes:
    """A produce body of ``size`` bytes (blanks after its JSON) storing one message."""
    body = b'{"messages": [{"payload": "c3RvcmVk"}]}'
    return body + b" " * (size - len(body))


async def test_a_request_body_trickled_below_the_minimum_rate_is_answered_408_and_cut() -> None:
    topic = "public/default/trickled-body"
    body = padded_produce_body(4096)
    # the trickle sends 20 bytes a second
    async with limited_broker(**MIN_RATE_1000) as (site, client):
        await client.produce(topic, ["stored"])
        reader, writer = await asyncio.open_connection("127.0.0.1", site.port)
        writer.write(produce_head(topic, len(body)))
        sent = 0
        answer = b""

        async def one_more_byte() -> bool:
            """Send the body's next byte; whether the broker answered (or cut) or the
            whole body went."""
            nonlocal sent, answer
            try:
                writer.write(body[sent : sent + 1])  # never silent for a whole look
                sent += 1
                answer = await asyncio.wait_for(reader.read(), 0.05)  # the client's pace
            except TimeoutError:
                return sent >= len(body)
            except ConnectionError:  # cut between two of its bytes: a reset, not an EOF
                pass
            return True  # the broker answered and closed

        await eventually_async(one_more_byte, "the trickled body to be cut", DEADLINE_S, every_s=0)
        assert sent < len(body), "the whole trickled body was read"
        assert answer.startswith(b"HTTP/1.1 408 "), answer
        error = json.loads(answer.partition(b"\r\n\r\n")[2])
        assert error["code"] == "request-timeout"
        assert "brokerlabHttpMinRequestDataRate" in error["reason"]
        await eventually_async(lambda: site.limiter.total == 0, "the cut connection released")
        assert (await client.stats(topic))["msgInCounter"] == 1  # the cut request stored nothing
        writer.close()


async def test_a_request_body_above_the_minimum_rate_is_read_however_long_it_takes() -> None:
    topic = "public/default/steady-body"
    body = padded_produce_body(32 * 1024)
    # the client sends about 16 times the minimum, for 2 seconds: two of the rate's
    # one-second looks, and twice the idle timeout
    async with limited_broker(**MIN_RATE_1000) as (site, client):
        reader, writer = await asyncio.open_connection("127.0.0.1", site.port)
        writer.write(produce_head(topic, len(body)))
        answer = b""
        for start in range(0, len(body), 800):
            writer.write(body[start : start + 800])
            await writer.drain()
            with contextlib.suppress(TimeoutError):
                answer += await asyncio.wait_for(reader.read(1), 0.05)  # the client's pace
            assert not reader.at_eof(), "the broker cut a body coming faster than the minimum"
        answer += await reader.readline()
        assert answer.startswith(b"HTTP/1.1 200 "), answer
        assert (await client.stats(topic))["msgInCounter"] == 1
        writer.close()


async def test_connections_over_the_per_ip_limit_are_answered_429_and_closed() -> None:
    async with limited_broker(brokerlabHttpMaxConnectionsPerIp=2) as (site, _):
        held = [await asyncio.open_connection("127.0.0.1", site.port) for _ in range(2)]
        await eventually_async(lambda: site.limiter.total == 2, "two connections counted")
        reader, writer = await asyncio.open_connection("127.0.0.1", site.port)
        answer = await read_to_eof(reader)
        assert answer.startswith(b"HTTP/1.1 429 ")
        assert b'"code":"too-many-requests"' in answer
        assert b"Connection: close" in answer
        writer.close()
        # a held connection still works, and once one closes a new one is admitted
        held_reader, held_writer = held[0]
        held_writer.write(b"GET /admin/v2/brokers/health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert (await held_reader.readline()).startswith(b"HTTP/1.1 200")
        held[1][1].close()
        await eventually_async(lambda: site.limiter.total == 1, "the closed connection released")
        client = Client(f"http://127.0.0.1:{site.port}")
        try:
            status, _ = await client.request("GET", "/admin/v2/brokers/health")
            assert status == 200
        finally:
            await client.close()
        held_writer.close()


async def test_the_total_connection_limit_answers_429() -> None:
    async with limited_broker(maxHttpServerConnections=1) as (site, client):
        _, writer = await asyncio.open_connection("127.0.0.1", site.port)
        await eventually_async(lambda: site.limiter.total == 1, "one connection counted")
        status, body = await client.request("GET", "/admin/v2/brokers/health")
        assert (status, body["code"]) == (429, "too-many-requests")
        assert "maximum of 1 connections" in body["reason"]
        writer.close()


def test_the_default_connection_cap_leaves_room_for_the_many_topics_preset(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # the HTTP connections the load generator opens for the preset, with no file
    # descriptor limit to shrink its consumers' pool: that pool, the produce pool and
    # the admin pool (its concurrency and 8 more, as loadgen.runner sizes it)
    monkeypatch.setattr(
        resource, "getrlimit", lambda _: (resource.RLIM_INFINITY, resource.RLIM_INFINITY)
    )
    scenario = load_scenario("many-topics")
    consumers = (
        scenario.topics
        * scenario.partitionsPerTopic
        * scenario.subscriptionsPerTopic
        * scenario.consumerPerSubscription
    )
    opened = _connection_limit(consumers) + PRODUCE_CONNECTIONS + ADMIN_CONCURRENCY + 8
    assert opened > 10_000
    cap = load_broker_config(CONF / "broker.conf").maxHttpServerConnections
    assert opened < cap, "the default cap would refuse the many-topics preset's connections"
    assert load_broker_config(None).maxHttpServerConnections == cap  # the key's own default


async def test_count_limits_answer_409_naming_the_setting() -> None:
    async with limited_broker(
        maxConsumersPerSubscription=1, maxSubscriptionsPerTopic=2, maxConsumersPerTopic=2
    ) as (_, client):
        topic = "public/default/limited"
        await client.subscribe(topic, "a", subscriptionType="Shared")
        status, body = await client.request(
            "POST", f"/consumers/persistent/{topic}/a", json={"subscriptionType": "Shared"}
        )
        assert (status, body["code"]) == (409, "conflict")
        assert "maxConsumersPerSubscription" in body["reason"]
        await client.subscribe(topic, "b")
        status, body = await client.request("POST", f"/consumers/persistent/{topic}/c", json={})
        assert (status, body["code"]) == (409, "conflict")
        assert "maxSubscriptionsPerTopic" in body["reason"]
        status, body = await client.request("PUT", f"/admin/v2/persistent/{topic}/subscription/c")
        assert (status, body["code"]) == (409, "conflict")
        assert "maxSubscriptionsPerTopic" in body["reason"]


async def test_consumers_per_topic_and_topics_per_namespace_answer_409() -> None:
    async with limited_broker(maxConsumersPerTopic=1, maxTopicsPerNamespace=1) as (_, client):
        await client.subscribe("public/default/first", "a")
        status, body = await client.request(
            "POST", "/consumers/persistent/public/default/first/b", json={}
        )
        assert (status, body["code"]) == (409, "conflict")
        assert "maxConsumersPerTopic" in body["reason"]
        status, body = await client.request(
            "POST", "/topics/persistent/public/default/second", json={"messages": [{"payload": ""}]}
        )
        assert (status, body["code"]) == (409, "conflict")
        assert "maxTopicsPerNamespace" in body["reason"]
        await client.produce("public/default/first", ["still fine"])
