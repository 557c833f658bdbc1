"""Codec processes (broker.http.codec): produce bodies encoded beside the loop give the
loop's own answers.

- A real codec process, fed bodies of every kind (valid, batched, keyed, bad JSON, bad
  base64, over a limit), answers exactly the entries ``encode_produce`` makes on the
  loop, or refuses exactly the bodies for which the loop raises.
- Concurrent requests get their own answers back.
- Over HTTP, a broker with a codec process stores what one without stores and reports
  the same errors for the same bad bodies.
- A codec process that dies fails what it had in flight with 503, and takes
  ``brokerlab serve`` down with a non-zero exit.
"""

from __future__ import annotations

import asyncio
import base64
import os
import random
import signal
import struct
from typing import Any

import orjson
import pytest

from broker.dispatch.errors import BrokerError
from broker.http import codec
from broker.http.app import PRODUCE_BODY
from broker.http.codec import (
    ANSWER,
    MIN_BODY_BYTES,
    REFUSED,
    CodecError,
    CodecPool,
    default_codec_processes,
)
from broker.http.produce_encoding import encode_produce
from tests.conftest import (
    BrokerProcessFactory,
    Client,
    LiveBroker,
    b64,
    child_processes,
    unb64,
)

MAX_MESSAGES = 50
MAX_SIZE = 2048
NOW_MS = 1_763_700_000_000
TOPIC = "public/default/codec"
#: what a codec process's command line holds
CODEC_COMMAND = "broker.http.codec"


def loop_outcome(raw: bytes) -> tuple[list[bytes], int] | None:
    """What the loop makes of ``raw``: its entries and batch size, None where it raises
    the error the route reports."""
    try:
        return encode_produce(PRODUCE_BODY.parse(raw), MAX_MESSAGES, MAX_SIZE, NOW_MS)
    except BrokerError:
        return None


def random_body(rng: random.Random) -> bytes:
    """A produce body, usually valid, sometimes wrong in one of the ways a client gets
    it wrong."""
    count = rng.choice([1, 2, 10, MAX_MESSAGES, MAX_MESSAGES + 1])
    messages: list[Any] = []
    for _ in range(count):
        message: dict[str, Any] = {"payload": b64(os.urandom(rng.choice([0, 1, 100, 1024])))}
        if rng.random() < 0.1:
            message["key"] = rng.choice(["k", "ключ", "x" * 10])
        if rng.random() < 0.05:
            message["properties"] = {"a": "b"}
        if rng.random() < 0.05:
            message["eventTime"] = rng.randrange(1 << 40)
        messages.append(message)
    fault = rng.random()
    if fault < 0.05:
        messages[rng.randrange(count)]["payload"] = "not base64!"
    elif fault < 0.08:
        messages[rng.randrange(count)]["payload"] = b64(os.urandom(MAX_SIZE + 1))
    elif fault < 0.10:
        messages[rng.randrange(count)] = {"payload": 7}
    elif fault < 0.12:
        return b'{"messages": [' + b"x" * rng.randrange(1, 100)
    elif fault < 0.13:
        return b""
    body: dict[str, Any] = {"messages": messages}
    if rng.random() < 0.3:
        body["batch"] = True
    return orjson.dumps(body)


async def test_a_codec_process_answers_what_the_loop_makes_of_every_body() -> None:
    pool = CodecPool(1)
    await pool.start()
    try:
        rng = random.Random(4021)
        bodies = [random_body(rng) for _ in range(400)]
        outcomes = [await pool.encode(raw, MAX_MESSAGES, MAX_SIZE, NOW_MS) for raw in bodies]
    finally:
        await pool.close()
    refused = 0
    for raw, outcome in zip(bodies, outcomes, strict=True):
        expected = loop_outcome(raw)
        if outcome is None:
            refused += 1
            assert expected is None, raw[:200]
        else:
            assert outcome == expected, raw[:200]
    # the mix holds both kinds, so neither half of the check is empty
    assert 20 < refused < 300
    batched = sum(1 for outcome in outcomes if outcome is not None and outcome[1] > 0)
    assert batched > 20


async def test_concurrent_requests_get_their_own_answers_from_two_processes() -> None:
    pool = CodecPool(2)
    await pool.start()
    try:
        bodies = [
            orjson.dumps(
                {"messages": [{"payload": b64(f"request {n} message {i}")} for i in range(n)]}
            )
            for n in range(1, 41)
        ]
        outcomes = await asyncio.gather(
            *(pool.encode(raw, MAX_MESSAGES, MAX_SIZE, NOW_MS) for raw in bodies)
        )
    finally:
        await pool.close()
    for raw, outcome in zip(bodies, outcomes, strict=True):
        assert outcome == loop_outcome(raw)


async def test_what_the_wire_format_cannot_carry_stays_on_the_loop() -> None:
    pool = CodecPool(1)
    await pool.start()
    try:
        raw = orjson.dumps({"messages": large_request()})
        assert await pool.encode(raw, MAX_MESSAGES, 1 << 32, NOW_MS) is None
        assert await pool.encode(raw, MAX_MESSAGES, MAX_SIZE, -1) is None
        assert (pool.encoded, pool.refused) == (0, 0)  # never sent
        assert await pool.encode(raw, MAX_MESSAGES, MAX_SIZE, NOW_MS) == loop_outcome(raw)
    finally:
        await pool.close()


async def test_an_answer_split_over_many_reads_is_joined_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """However many reads an answer takes, it is copied into one piece once, when it is
    whole (joining at every read made a 12 MiB answer cost some 300 MiB of copies)."""
    entries = [bytes([n]) * 700 for n in range(60)]
    lengths = struct.pack(f"<{len(entries)}I", *map(len, entries))
    answer = ANSWER.pack(len(lengths) + sum(map(len, entries)), 0, len(entries))
    wire = answer + lengths + b"".join(entries) + REFUSED
    joins = 0

    def counting_bytes(data: object) -> bytes:
        nonlocal joins
        joins += 1
        return bytes(data)  # type: ignore[call-overload, no-any-return]

    monkeypatch.setattr(codec, "bytes", counting_bytes, raising=False)
    connection = codec._Connection()
    loop = asyncio.get_running_loop()
    first, second = loop.create_future(), loop.create_future()
    connection.pending.extend([first, second])
    for offset in range(0, len(wire), 97):  # 97-byte reads: headers split too
        connection.data_received(wire[offset : offset + 97])
    assert first.result() == (entries, 0)
    assert second.result() is None  # the refusal that came after it
    assert joins == 1


async def test_a_request_the_wire_cannot_carry_takes_no_place_in_the_queue() -> None:
    """A publish time that is not an integer (a driven clock's float) is encoded on the
    loop; the next request still gets its own answer, not the one after it."""
    pool = CodecPool(1)
    await pool.start()
    try:
        raw = orjson.dumps({"messages": large_request()})
        assert await pool.encode(raw, MAX_MESSAGES, MAX_SIZE, 1.7e12) is None  # type: ignore[arg-type]
        (process,) = pool._processes
        assert not process.connection.pending
        assert await pool.encode(raw, MAX_MESSAGES, MAX_SIZE, NOW_MS) == loop_outcome(raw)
    finally:
        await pool.close()


async def test_closing_answers_what_was_sent_and_the_processes_exit_cleanly() -> None:
    pool = CodecPool(1)
    await pool.start()
    bodies = [orjson.dumps({"messages": large_request(count=20 + n, size=900)}) for n in range(12)]
    sent = [
        asyncio.ensure_future(pool.encode(raw, MAX_MESSAGES, MAX_SIZE, NOW_MS)) for raw in bodies
    ]
    await asyncio.sleep(0)  # every request written
    await pool.close()
    assert [task.result() for task in sent] == [loop_outcome(raw) for raw in bodies]
    (process,) = pool._processes
    assert process.process.returncode == 0  # stopped at the end of its input, not killed
    with pytest.raises(CodecError):
        await pool.encode(bodies[0], MAX_MESSAGES, MAX_SIZE, NOW_MS)


async def test_a_pool_needs_a_process() -> None:
    with pytest.raises(ValueError):
        CodecPool(0)


def large_request(count: int = 40, size: int = 600) -> list[dict[str, Any]]:
    """A body over MIN_BODY_BYTES, so the broker sends it to its codec process."""
    messages = [{"payload": b64(f"{index:04d}".encode() * (size // 4))} for index in range(count)]
    assert len(orjson.dumps({"messages": messages})) >= MIN_BODY_BYTES
    return messages


async def test_a_broker_with_a_codec_stores_and_refuses_as_one_without(
    live_broker: LiveBroker,
) -> None:
    limit = 32 * 1024  # over a batch of large_request(), under one of its payloads
    with_codec = await live_broker(httpCodecProcesses=1, maxMessageSize=limit)
    on_loop = await live_broker(httpCodecProcesses=0, maxMessageSize=limit)
    messages = large_request()
    bad_base64 = [*messages[:17], {"payload": "@@@@"}, *messages[18:]]
    too_large = [*messages[:3], {"payload": b64(os.urandom(limit + 1))}, *messages[4:]]
    bodies: list[Any] = [
        {"messages": bad_base64},
        {"messages": too_large},
        {"messages": too_large, "batch": True},
        {"messages": [*messages, {"payload": 5}]},
    ]
    for body in bodies:
        answers = [
            await client.request("POST", f"/topics/persistent/{TOPIC}", json=body)
            for client in (with_codec, on_loop)
        ]
        assert answers[0] == answers[1]
        assert answers[0][0] in (400, 413), answers[0]
    for client in (with_codec, on_loop):
        consumer = await client.subscribe(TOPIC, "sub", subscriptionType="Exclusive")
        status, body = await client.request(
            "POST", f"/topics/persistent/{TOPIC}", json={"messages": messages}
        )
        assert status == 200, body
        assert [r["messageId"] for r in body["messagePublishResults"]] == [
            f"0:{i}" for i in range(len(messages))
        ]
        status, body = await client.request(
            "POST", f"/topics/persistent/{TOPIC}", json={"messages": messages, "batch": True}
        )
        assert status == 200, body
        got = await client.receive_until(consumer, 2 * len(messages))
        assert [unb64(m["payload"]) for m in got] == [
            base64.b64decode(m["payload"]) for m in messages
        ] * 2
        assert got[-1]["messageId"] == f"0:{len(messages)}:{len(messages) - 1}"
    # the codec broker's bodies went to its process: the four bad ones refused there
    assert await codec_requests(with_codec) == {"encoded": 2.0, "refused": 4.0}
    assert await codec_requests(on_loop) == {}


async def codec_requests(client: Client) -> dict[str, float]:
    """brokerlab_http_codec_requests_total by outcome, from /metrics."""
    status, text = await client.request("GET", "/metrics")
    assert status == 200
    found = {}
    for line in text.splitlines():
        if line.startswith("brokerlab_http_codec_requests_total{"):
            outcome = line.split('outcome="')[1].split('"')[0]
            found[outcome] = float(line.rsplit(" ", 1)[1])
    return found


async def test_a_dead_codec_process_fails_produce_with_503() -> None:
    pool = CodecPool(1)
    await pool.start()
    try:
        raw = orjson.dumps({"messages": large_request()})
        assert await pool.encode(raw, MAX_MESSAGES, MAX_SIZE, NOW_MS) == loop_outcome(raw)
        (process,) = pool._processes
        process.process.send_signal(signal.SIGKILL)
        reason = await asyncio.wait_for(pool.died, 30)
        assert f"codec process {process.process.pid} exited" in reason
        with pytest.raises(CodecError):
            await pool.encode(raw, MAX_MESSAGES, MAX_SIZE, NOW_MS)
    finally:
        await pool.close()


@pytest.mark.slow
async def test_brokerlab_serve_stops_when_its_codec_process_dies(
    broker_process: BrokerProcessFactory,
) -> None:
    broker = broker_process("--set", "httpCodecProcesses=1")
    client = await broker.start()
    assert broker.process is not None
    messages = large_request()
    status, body = await client.request(
        "POST", f"/topics/persistent/{TOPIC}", json={"messages": messages}
    )
    assert status == 200, body
    assert await broker.exit_code_after_killing(CODEC_COMMAND) == 1
    assert any("codec process" in line and "shutting down" in line for line in broker.output)


@pytest.mark.slow
async def test_ctrl_c_reaching_the_codec_process_leaves_the_broker_to_stop_it(
    broker_process: BrokerProcessFactory,
) -> None:
    """Ctrl-C in a terminal signals the foreground process group: the codec process is
    in a group of its own, ignores SIGINT and SIGTERM anyway, goes on encoding, and
    stops when the broker closes its socket (exit code 0)."""
    broker = broker_process("--set", "httpCodecProcesses=1")
    client = await broker.start()
    assert broker.process is not None
    (child,) = child_processes(broker.process.pid, CODEC_COMMAND)
    assert os.getpgid(child) != os.getpgid(broker.process.pid)
    messages = large_request()
    for _ in range(2):
        status, body = await client.request(
            "POST", f"/topics/persistent/{TOPIC}", json={"messages": messages}
        )
        assert status == 200, body
        # the process has started (it answered): now the signals find it running
        os.kill(child, signal.SIGINT)
        os.kill(child, signal.SIGTERM)
    assert await codec_requests(client) == {"encoded": 2.0, "refused": 0.0}
    assert await broker.stop() == 0
    assert not any("codec process" in line for line in broker.output), broker.output
    assert not _alive(child)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ")[1][0] != "Z"
    except OSError:
        return False


@pytest.mark.parametrize(("cores", "processes"), [(1, 0), (2, 0), (3, 1), (64, 1)])
def test_the_default_takes_a_process_only_where_a_core_is_free(
    monkeypatch: pytest.MonkeyPatch, cores: int, processes: int
) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(cores)))
    assert default_codec_processes() == processes
