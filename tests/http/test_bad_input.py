"""Hostile and malformed input over HTTP, against a real broker on a real port.

Every case checks the status and code docs/api.md gives it, that the body is the
documented ``{"reason", "code"}`` (never a 500, never a traceback), and that the rejected
request changed nothing: no topic created, the seeded topic's ledger, cursors, backlogs
and pending messages as they were. Every error answer is also checked against the
declaration of the operation the request reached (broker/http/app.py and
pulsar_admin.py, from which docs/api.md and /openapi.json are rendered): its status
must be one the operation lists.

Paths are sent byte for byte (``..``, ``%2e%2e``, ``%2F`` reach the server as written),
each request on its own connection so that one the server drops cannot spoil the next.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
import pytest
from yarl import URL

from broker.http.app import contract
from broker.http.contract import Operation
from tests.conftest import Client, LiveBroker, b64, unb64

TENANT = "bad"
NAMESPACE = "input"
EXISTING = "existing"  # seeded with three messages and the subscription "audit"
FRESH = "fresh"  # never created by a valid request
TOPIC = f"{TENANT}/{NAMESPACE}/{EXISTING}"
FRESH_TOPIC = f"{TENANT}/{NAMESPACE}/{FRESH}"
SUBSCRIPTION = "audit"
SEED_PAYLOADS = ["seed-0", "seed-1", "seed-2"]

#: small limits so that the 413 cases are cheap to build
MAX_MESSAGE_SIZE = 1024
MAX_BODY_BYTES = 65536
MAX_MESSAGES_PER_REQUEST = 10
LIMITS = {
    "maxMessageSize": MAX_MESSAGE_SIZE,
    "maxHttpRequestBodyBytes": MAX_BODY_BYTES,
    "maxMessagesPerProduceRequest": MAX_MESSAGES_PER_REQUEST,
}

KEBAB_CASE = re.compile(r"[a-z]+(?:-[a-z]+)*")
GOOD_PRODUCE = {"messages": [{"payload": b64("never stored")}]}
INT64_MAX = 2**63 - 1


# ---------------------------------------------------------------------- harness


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    content_type: str
    text: str
    body: Any  # parsed JSON, or None
    method: str = ""
    path: str = ""  # as sent, query included


def _route_pattern(template: str) -> re.Pattern[str]:
    return re.compile(re.sub(r"\\{\w+\\}", "[^/]+", re.escape(template)))


#: every operation with its path as a pattern, in the order the app's router tries them
ROUTES: list[tuple[Operation, re.Pattern[str]]] = [
    (op, _route_pattern(op.path)) for op in contract()
]


def declared_statuses(method: str, path: str) -> set[int] | None:
    """The statuses the operation ``method path`` reaches declares (success, redirect,
    errors, the shared ones included); None when no operation has that path (404 or 405,
    documented once for all routes)."""
    bare = path.split("?", 1)[0]
    for op, pattern in ROUTES:
        if op.method == method and pattern.fullmatch(bare):
            redirect = {307} if op.redirect is not None else set()
            return {op.success.status, *redirect, *op.error_statuses()}
    return None


def encode(body: Any) -> bytes | None:
    if body is None or isinstance(body, bytes):
        return body
    return json.dumps(body).encode()


async def send(
    client: Client,
    method: str,
    path: str,
    body: Any = None,
    headers: dict[str, str] | None = None,
) -> Answer:
    """One request with ``path`` (and its query) sent exactly as written. ``body`` is
    raw bytes, an async iterator of chunks (chunked encoding) or a JSON value."""
    data = body if isinstance(body, AsyncIterator) else encode(body)
    _count_request(client.base_url)
    connector = aiohttp.TCPConnector(force_close=True)
    async with (
        aiohttp.ClientSession(connector=connector, auto_decompress=False) as session,
        session.request(
            method, URL(client.base_url + path, encoded=True), data=data, headers=headers
        ) as response,
    ):
        raw = await response.read()
        text = raw.decode(errors="replace")
        parsed = json.loads(raw) if response.content_type == "application/json" and raw else None
        return Answer(
            response.status,
            dict(response.headers),
            response.content_type,
            text,
            parsed,
            method,
            path,
        )


def assert_error(answer: Answer, status: int, code: str) -> None:
    """The documented error answer: ``status`` with a JSON ``{"reason", "code"}``."""
    assert answer.status == status, (answer.status, answer.text)
    assert answer.content_type == "application/json", answer.text
    assert "Traceback" not in answer.text
    body = answer.body
    assert isinstance(body, dict) and set(body) == {"reason", "code"}, body
    assert body["code"] == code, body
    assert KEBAB_CASE.fullmatch(body["code"]), body
    assert isinstance(body["reason"], str) and body["reason"].strip(), body
    declared = declared_statuses(answer.method, answer.path)
    if declared is not None:
        assert status in declared, (
            f"{answer.method} {answer.path} answered {status}, which its operation does not "
            f"declare: {sorted(declared)}"
        )


def admin(topic: str = EXISTING) -> str:
    return f"/admin/v2/persistent/{TENANT}/{NAMESPACE}/{topic}"


RESET_PATH = f"{admin()}/subscription/{SUBSCRIPTION}/resetcursor"


async def topics(client: Client) -> list[str]:
    status, body = await client.request("GET", f"/admin/v2/persistent/{TENANT}/{NAMESPACE}")
    assert status == 200, body
    return list(body)


async def snapshot(client: Client) -> dict[str, Any]:
    """Everything a rejected request must leave alone: the namespace's topics, the seeded
    topic's ledger and cursors (internalStats) and its counters and backlogs (stats)."""
    internal = await client.internal_stats(TOPIC)
    stats = await client.stats(TOPIC)
    return {
        "topics": await topics(client),
        "entriesAddedCounter": internal["entriesAddedCounter"],
        "numberOfEntries": internal["numberOfEntries"],
        "lastConfirmedEntry": internal["lastConfirmedEntry"],
        "cursors": internal["cursors"],
        "msgInCounter": stats["msgInCounter"],
        "bytesInCounter": stats["bytesInCounter"],
        "subscriptions": {
            name: (sub["msgBacklog"], sub["unackedMessages"], len(sub["consumers"]))
            for name, sub in stats["subscriptions"].items()
        },
    }


@dataclass
class Seeded:
    client: Client
    ids: list[str]  # message ids of the seeded messages
    before: dict[str, Any]

    async def assert_unchanged(self) -> None:
        """The snapshot (and what a subclass adds) as taken after the setup; the broker
        is then known unchanged until its next request (see :func:`pristine`)."""
        await self._assert_unchanged()
        _unchanged_after[self.client.base_url] = _requests.get(self.client.base_url, 0)

    async def _assert_unchanged(self) -> None:
        assert await snapshot(self.client) == self.before

    async def unchanged(self) -> bool:
        try:
            return await snapshot(self.client) == self.before
        except AssertionError:  # the topic is gone
            return False


async def seed(client: Client) -> Seeded:
    ids = await client.produce(TOPIC, SEED_PAYLOADS, key="k")
    status, body = await client.request(
        "PUT", f"{admin()}/subscription/{SUBSCRIPTION}", messageId="earliest"
    )
    assert status == 204, body
    before = await snapshot(client)
    assert before["topics"] == [f"persistent://{TOPIC}"]
    assert before["subscriptions"] == {SUBSCRIPTION: (3, 0, 0)}
    return Seeded(client, ids, before)


#: the brokers the tests share (one configuration each: seeded, and seeded with a
#: consumer of each kind): the consumer must outlive the module, however long it runs
SHARED = {**LIMITS, "consumerIdleTimeoutMs": 3_600_000}
#: by kind: how many shared brokers of that kind a test left changed (the next test
#: gets a new one)
_changed: dict[str, int] = {}
#: by broker (its URL): what the kind's setup left there
_prepared: dict[str, Seeded] = {}
#: by broker (its URL): the requests sent to it (by :func:`send` and by the clients
#: :func:`pristine` hands out, the only ones the shared brokers get), and how many had
#: been sent when ``assert_unchanged`` last passed there
_requests: dict[str, int] = {}
_unchanged_after: dict[str, int] = {}


def _count_request(base_url: str) -> None:
    _requests[base_url] = _requests.get(base_url, 0) + 1


def counted(client: Client) -> Client:
    """``client``, its requests counted in :data:`_requests`."""
    request = client.request

    async def counting(*args: Any, **kwargs: Any) -> tuple[int, Any]:
        _count_request(client.base_url)
        return await request(*args, **kwargs)

    client.request = counting  # type: ignore[method-assign]
    return client


async def pristine(
    shared_broker: LiveBroker, kind: str, prepare: Callable[[Client], Awaitable[Seeded]]
) -> Seeded:
    """The module's broker of ``kind``, as ``prepare`` left it: checked against the
    snapshot taken then, and a new broker prepared if an earlier test changed it (a test
    that stores, acks or subscribes does; one that must change nothing asserts so). The
    snapshot is not taken again when an earlier test's ``assert_unchanged`` passed and
    no request reached the broker since (most tests end so: the check would repeat it)."""
    while True:
        name = f"{kind}-{_changed.setdefault(kind, 0)}"
        client = counted(await shared_broker(name=name, **SHARED))
        url = client.base_url
        prepared = _prepared.get(url)
        if prepared is None:
            _prepared[url] = prepared = await prepare(client)
            return prepared
        prepared = dataclasses.replace(prepared, client=client)
        if _unchanged_after.get(url) == _requests.get(url, 0) or await prepared.unchanged():
            return prepared
        _changed[kind] += 1


@pytest.fixture
async def seeded(shared_broker: LiveBroker) -> Seeded:
    """A broker with small limits and one topic holding three messages, unconsumed by
    its one subscription."""
    return await pristine(shared_broker, "seeded", seed)


@dataclass
class WithConsumer(Seeded):
    consumer: str = ""

    async def _assert_unchanged(self) -> None:
        """As for Seeded, and nothing was handed back to the consumer's receiver queue
        (as a nack or redelivery that slipped through would)."""
        await super()._assert_unchanged()
        assert await self.client.receive(self.consumer, 10, 0) == []

    async def unchanged(self) -> bool:
        return await super().unchanged() and not await self.client.receive(self.consumer, 10, 0)


async def with_consumer(client: Client, sub_type: str) -> WithConsumer:
    """The seeded broker plus a consumer of ``audit`` that holds all three messages
    pending (received, not acked): its cursor no longer moves on its own."""
    base = await seed(client)
    consumer = await client.subscribe(
        TOPIC, SUBSCRIPTION, subscriptionType=sub_type, negativeAckRedeliveryDelayMillis=0
    )
    got = await client.receive_until(consumer, len(SEED_PAYLOADS))
    assert [m["messageId"] for m in got] == base.ids
    before = await snapshot(client)
    assert before["subscriptions"] == {SUBSCRIPTION: (3, 3, 1)}
    return WithConsumer(client, base.ids, before, consumer)


async def with_consumer_of(kind: str, shared_broker: LiveBroker) -> WithConsumer:
    async def prepare(client: Client) -> WithConsumer:
        return await with_consumer(client, kind)

    prepared = await pristine(shared_broker, kind, prepare)
    assert isinstance(prepared, WithConsumer)
    return prepared


@pytest.fixture
async def exclusive(shared_broker: LiveBroker) -> WithConsumer:
    return await with_consumer_of("Exclusive", shared_broker)


@pytest.fixture
async def shared(shared_broker: LiveBroker) -> WithConsumer:
    return await with_consumer_of("Shared", shared_broker)


# ---------------------------------------------------------------------- malformed JSON

MALFORMED_JSON = [
    pytest.param(b"", id="empty-body"),
    pytest.param(b'{"messages": [{"payload": "aGk="}', id="truncated"),
    pytest.param(b'{"messages": [{"payload": "aGk=', id="truncated-in-string"),
    pytest.param(b'[{"payload": "aGk="}]', id="array"),
    pytest.param(b"[]", id="empty-array"),
    pytest.param(b'"messages"', id="string"),
    pytest.param(b"42", id="number"),
    pytest.param(b"null", id="null"),
    pytest.param(b"true", id="bool"),
    pytest.param(b'{"messages": [{"payload": "\xff\xfe"}]}', id="invalid-utf8"),
    pytest.param(b'{"messages": [{"payload": "aGk=", "key": "caf\xe9"}]}', id="latin1-byte"),
    pytest.param(b'{"messages": [{"payload": "aGk=", "key": "\\ud800"}]}', id="lone-surrogate"),
    pytest.param(b'\xef\xbb\xbf{"messages": [{"payload": "aGk="}]}', id="byte-order-mark"),
    pytest.param(b'{"messages": [{"payload": "aGk="}]} x', id="trailing-garbage"),
    pytest.param(b'{"messages": [{"payload": "aGk="}]}{}', id="two-documents"),
    pytest.param(b"{'messages': [{'payload': 'aGk='}]}", id="single-quotes"),
    pytest.param(b'{"messages": [{"payload": "aGk="},]}', id="trailing-comma"),
    pytest.param(b'{"messages": [{"payload": "aGk="}] /* c */}', id="comment"),
    pytest.param(b'{"messages": [{"payload": "aGk=", "eventTime": NaN}]}', id="nan"),
    pytest.param(b'{"messages": [{"payload": "aGk=", "eventTime": 1e999}]}', id="infinite-number"),
    pytest.param(b'{"messages": ' + b"[" * 5000 + b"]" * 5000 + b"}", id="deeply-nested"),
    pytest.param(b"\x00" * 16, id="nul-bytes"),
]


@pytest.mark.parametrize("raw", MALFORMED_JSON)
@pytest.mark.parametrize("topic", [EXISTING, FRESH])
async def test_produce_with_malformed_json_is_400_and_stores_nothing(
    seeded: Seeded, topic: str, raw: bytes
) -> None:
    answer = await send(
        seeded.client, "POST", f"/topics/persistent/{TENANT}/{NAMESPACE}/{topic}", raw
    )
    assert_error(answer, 400, "invalid-request")
    await seeded.assert_unchanged()


BODY_ROUTES = [
    pytest.param("POST", f"/consumers/persistent/{TOPIC}/newsub", id="consumer-create"),
    pytest.param("POST", RESET_PATH, id="resetcursor"),
    pytest.param("PUT", "/admin/v2/brokerlab/faults", id="faults"),
]
CONSUMER_BODY_ROUTES = [
    pytest.param("ack", id="ack"),
    pytest.param("nack", id="nack"),
]
MALFORMED_OTHER_BODIES = [
    pytest.param(b'{"messageId": "0:0"', id="truncated"),
    pytest.param(b'["0:0"]', id="array"),
    pytest.param(b'"0:0"', id="string"),
    pytest.param(b"null", id="null"),
    pytest.param(b'{"messageId": "\xff"}', id="invalid-utf8"),
]


@pytest.mark.parametrize("raw", MALFORMED_OTHER_BODIES)
@pytest.mark.parametrize(("method", "path"), BODY_ROUTES)
async def test_other_routes_reject_malformed_json(
    seeded: Seeded, method: str, path: str, raw: bytes
) -> None:
    assert_error(await send(seeded.client, method, path, raw), 400, "invalid-request")
    await seeded.assert_unchanged()
    status, faults = await seeded.client.request("GET", "/admin/v2/brokerlab/faults")
    assert (status, faults) == (200, {})


@pytest.mark.parametrize("raw", [*MALFORMED_OTHER_BODIES, pytest.param(b"", id="empty-body")])
@pytest.mark.parametrize("action", CONSUMER_BODY_ROUTES)
async def test_ack_and_nack_reject_malformed_json(
    exclusive: WithConsumer, action: str, raw: bytes
) -> None:
    answer = await send(exclusive.client, "POST", f"/consumers/{exclusive.consumer}/{action}", raw)
    assert_error(answer, 400, "invalid-request")
    await exclusive.assert_unchanged()


@pytest.mark.parametrize(
    ("method", "path"),
    [
        pytest.param("POST", RESET_PATH, id="resetcursor"),
        pytest.param("PUT", "/admin/v2/brokerlab/faults", id="faults"),
    ],
)
async def test_required_bodies_may_not_be_empty(seeded: Seeded, method: str, path: str) -> None:
    assert_error(await send(seeded.client, method, path, b""), 400, "invalid-request")
    await seeded.assert_unchanged()


async def test_corrupt_content_encoding_is_400_not_500(seeded: Seeded) -> None:
    path = f"/topics/persistent/{TOPIC}"
    for encoding in ("gzip", "deflate"):
        answer = await send(
            seeded.client, "POST", path, b"not compressed", {"Content-Encoding": encoding}
        )
        assert_error(answer, 400, "invalid-request")
    await seeded.assert_unchanged()


# ---------------------------------------------------------------------- produce fields


def one(**fields: Any) -> dict[str, Any]:
    """A produce body of one message: a valid payload and ``fields``."""
    return {"messages": [{"payload": b64("x"), **fields}]}


BAD_PRODUCE_BODIES = [
    pytest.param({}, "messages", id="messages-missing"),
    pytest.param({"messages": None}, "messages", id="messages-null"),
    pytest.param({"messages": []}, "messages", id="messages-empty"),
    pytest.param({"messages": {"payload": b64("x")}}, "messages", id="messages-object"),
    pytest.param({"messages": b64("x")}, "messages", id="messages-string"),
    pytest.param({"messages": 1}, "messages", id="messages-number"),
    pytest.param({"messages": [b64("x")]}, "messages[0]", id="message-string"),
    pytest.param({"messages": [None]}, "messages[0]", id="message-null"),
    pytest.param({"messages": [[b64("x")]]}, "messages[0]", id="message-array"),
    pytest.param({"messages": [42]}, "messages[0]", id="message-number"),
    pytest.param({"messages": [{}]}, "messages[0].payload", id="payload-missing"),
    pytest.param(
        {"messages": [{"key": "k"}]}, "messages[0].payload", id="payload-missing-with-key"
    ),
    pytest.param({"messages": [{"payload": 42}]}, "messages[0].payload", id="payload-number"),
    pytest.param({"messages": [{"payload": None}]}, "messages[0].payload", id="payload-null"),
    pytest.param({"messages": [{"payload": True}]}, "messages[0].payload", id="payload-bool"),
    pytest.param({"messages": [{"payload": [104, 105]}]}, "messages[0].payload", id="payload-list"),
    pytest.param(
        {"messages": [{"payload": {"data": "aGk="}}]}, "messages[0].payload", id="payload-object"
    ),
    pytest.param(one(key=42), "messages[0].key", id="key-number"),
    pytest.param(one(key=None), "messages[0].key", id="key-null"),
    pytest.param(one(key=True), "messages[0].key", id="key-bool"),
    pytest.param(one(key=["k"]), "messages[0].key", id="key-list"),
    pytest.param(one(properties=["a", "b"]), "messages[0].properties", id="properties-list"),
    pytest.param(one(properties="a=b"), "messages[0].properties", id="properties-string"),
    pytest.param(one(properties=None), "messages[0].properties", id="properties-null"),
    pytest.param(one(properties={"a": 1}), "messages[0].properties", id="properties-number-value"),
    pytest.param(one(properties={"a": True}), "messages[0].properties", id="properties-bool-value"),
    pytest.param(one(properties={"a": None}), "messages[0].properties", id="properties-null-value"),
    pytest.param(
        one(properties={"a": {"b": "c"}}), "messages[0].properties", id="properties-object-value"
    ),
    pytest.param(
        one(properties={"a": "b", "c": ["d"]}),
        'messages[0].properties["c"]',
        id="properties-one-bad-value",
    ),
    # keys that look like pydantic's union tags are the client's keys all the same
    pytest.param(
        one(properties={"Foo": 1}), 'messages[0].properties["Foo"]', id="properties-key-upper"
    ),
    pytest.param(
        one(properties={"str": 1}), 'messages[0].properties["str"]', id="properties-key-str"
    ),
    pytest.param(one(eventTime=-1), "messages[0].eventTime", id="eventTime-negative"),
    pytest.param(one(eventTime="1700000000000"), "messages[0].eventTime", id="eventTime-string"),
    pytest.param(one(eventTime=True), "messages[0].eventTime", id="eventTime-bool"),
    pytest.param(one(eventTime=1.5), "messages[0].eventTime", id="eventTime-float"),
    pytest.param(one(eventTime=1000.0), "messages[0].eventTime", id="eventTime-integral-float"),
    pytest.param(one(eventTime=None), "messages[0].eventTime", id="eventTime-null"),
    pytest.param(one(eventTime=2**63), "messages[0].eventTime", id="eventTime-over-int64"),
    pytest.param(one(eventTime=[1]), "messages[0].eventTime", id="eventTime-list"),
    pytest.param({**one(), "producerName": 7}, "producerName", id="producerName-number"),
    pytest.param({**one(), "producerName": ""}, "producerName", id="producerName-empty"),
    pytest.param({**one(), "producerName": "p" * 257}, "producerName", id="producerName-257-chars"),
    pytest.param({**one(), "producerName": None}, "producerName", id="producerName-null"),
    pytest.param(
        {"messages": [{"payload": b64("a")}, {"payload": b64("b")}, {"payload": 3}]},
        "messages[2].payload",
        id="last-of-three-bad",
    ),
    pytest.param(
        {"messages": [{"payload": b64("a")}, {"payload": b64("b"), "eventTime": -5}]},
        "messages[1].eventTime",
        id="second-of-two-bad",
    ),
]


@pytest.mark.parametrize(("body", "field"), BAD_PRODUCE_BODIES)
@pytest.mark.parametrize("topic", [EXISTING, FRESH])
async def test_produce_with_a_bad_field_is_400_and_stores_nothing(
    seeded: Seeded, topic: str, body: dict[str, Any], field: str
) -> None:
    """docs/api.md: a wrong type or a value out of range is 400 with a reason naming
    the field."""
    answer = await send(
        seeded.client, "POST", f"/topics/persistent/{TENANT}/{NAMESPACE}/{topic}", body
    )
    assert_error(answer, 400, "invalid-request")
    assert field in answer.body["reason"], answer.body
    await seeded.assert_unchanged()


async def test_event_time_written_with_an_exponent_is_not_an_integer(seeded: Seeded) -> None:
    raw = b'{"messages": [{"payload": "aGk=", "eventTime": 1e3}]}'
    answer = await send(seeded.client, "POST", f"/topics/persistent/{TOPIC}", raw)
    assert_error(answer, 400, "invalid-request")
    await seeded.assert_unchanged()


async def test_key_over_65535_utf8_bytes_is_400(live_broker: LiveBroker) -> None:
    seeded = await seed(await live_broker())  # default body limit: the keys fit in a body
    for key in ("k" * 65536, "\N{GRINNING FACE}" * 16384, "é" * 32767 + "ab"):
        answer = await send(seeded.client, "POST", f"/topics/persistent/{TOPIC}", one(key=key))
        assert_error(answer, 400, "invalid-request")
    await seeded.assert_unchanged()
    # at the limit it is accepted
    await seeded.client.produce(TOPIC, ["x"], key="k" * 65535)
    await seeded.client.produce(TOPIC, ["x"], key="é" * 32767 + "a")


# ---------------------------------------------------------------------- base64

BAD_BASE64 = [
    pytest.param("aGk", id="missing-padding"),
    pytest.param("aGVsbG8", id="missing-padding-long"),
    pytest.param("aGk==", id="extra-padding"),
    pytest.param("aG=k", id="padding-inside"),
    pytest.param("=aGk", id="padding-first"),
    pytest.param("aGk=aGk=", id="data-after-padding"),
    pytest.param("====", id="only-padding"),
    pytest.param("a", id="one-character"),
    pytest.param("a-k=", id="urlsafe-dash"),
    pytest.param("a_k=", id="urlsafe-underscore"),
    pytest.param("aG k=", id="space-inside"),
    pytest.param(" aGk=", id="leading-space"),
    pytest.param("aGk= ", id="trailing-space"),
    pytest.param("aGk=\n", id="trailing-newline"),
    pytest.param("aGVs\nbG8=", id="newline-inside"),
    pytest.param("aGVs\r\nbG8=", id="crlf-inside"),
    pytest.param("aGVs\tbG8=", id="tab-inside"),
    pytest.param("aGk=\x00", id="nul"),
    pytest.param("aGé=", id="non-ascii"),
    pytest.param("%61%47%6b%3d", id="percent-encoded"),
    pytest.param("aGk*", id="star"),
]


@pytest.mark.parametrize("payload", BAD_BASE64)
async def test_payload_that_is_not_strict_base64_is_400(seeded: Seeded, payload: str) -> None:
    """docs/api.md: standard alphabet with padding (RFC 4648 §4), no whitespace."""
    body = {"messages": [{"payload": b64("good")}, {"payload": payload}]}
    answer = await send(seeded.client, "POST", f"/topics/persistent/{TOPIC}", body)
    assert_error(answer, 400, "invalid-request")
    await seeded.assert_unchanged()


async def test_strict_base64_still_accepts_every_valid_payload(seeded: Seeded) -> None:
    """The control for the table above: valid payloads of every padding length, the
    empty payload and one of exactly maxMessageSize bytes are stored as sent."""
    client = seeded.client
    payloads = [b"", b"a", b"ab", b"abc", bytes(range(256)), b"\xff" * MAX_MESSAGE_SIZE]
    body = {"messages": [{"payload": b64(p)} for p in payloads]}
    answer = await send(client, "POST", f"/topics/persistent/{TOPIC}", body)
    assert answer.status == 200, answer.text
    consumer = await client.subscribe(TOPIC, SUBSCRIPTION)
    got = await client.receive_until(consumer, len(SEED_PAYLOADS) + len(payloads))
    assert [unb64(m["payload"]) for m in got[len(SEED_PAYLOADS) :]] == payloads


# ---------------------------------------------------------------------- names

#: (id, path segment as sent, status): 404 where the path can match no route
HOSTILE_NAMES = [
    ("dot", ".", 400),
    ("dotdot", "..", 400),
    ("dotdot-encoded", "%2e%2e", 400),
    ("dot-encoded", "%2E", 400),
    ("dotdot-half-encoded", ".%2e", 400),
    ("slash-encoded", "a%2Fb", 400),
    ("slash-encoded-lowercase", "a%2fb", 400),
    ("traversal-encoded", "..%2F..%2Fetc", 400),
    ("backslash", "a%5Cb", 400),
    ("129-chars", "n" * 129, 400),
    ("unicode-accent", "t%C3%B3pico", 400),
    ("unicode-emoji", "%F0%9F%98%80", 400),
    ("unicode-fullwidth", "%EF%BC%A1", 400),
    ("invalid-utf8", "%FF", 400),
    ("space-encoded", "a%20b", 400),
    ("plus", "a+b", 400),
    ("tab", "a%09b", 400),
    ("newline", "a%0Ab", 400),
    ("nul", "a%00b", 400),
    ("nul-only", "%00", 400),
    ("percent", "a%25b", 400),
    ("hash-encoded", "a%23b", 400),
    ("question-mark-encoded", "a%3Fb", 400),
    ("semicolon", "a;b", 400),
    ("star", "a*b", 400),
    ("quote", "a%22b", 400),
    ("markup", "%3Cscript%3E", 400),
    ("empty", "", 404),
]

_TOPIC = "/persistent/{tenant}/{namespace}/{topic}"
_ADMIN = "/admin/v2" + _TOPIC
_SUB = _ADMIN + "/subscription/{subscription}"
TOPIC_PARTS = ("tenant", "namespace", "topic")
ALL_PARTS = (*TOPIC_PARTS, "subscription")
NAMESPACE_PARTS = ("tenant", "namespace")
#: (id, method, path template, body, parts of the path that are names)
NAME_ROUTES = [
    ("produce", "POST", "/topics" + _TOPIC, GOOD_PRODUCE, TOPIC_PARTS),
    ("subscription-create", "PUT", _SUB, None, ALL_PARTS),
    ("subscription-delete", "DELETE", _SUB, None, ALL_PARTS),
    ("resetcursor-time", "POST", _SUB + "/resetcursor/0", None, ALL_PARTS),
    ("resetcursor-id", "POST", _SUB + "/resetcursor", {"messageId": "0:0"}, ALL_PARTS),
    ("consumer-create", "POST", "/consumers" + _TOPIC + "/{subscription}", {}, ALL_PARTS),
    ("stats", "GET", _ADMIN + "/stats", None, TOPIC_PARTS),
    ("internal-stats", "GET", _ADMIN + "/internalStats", None, TOPIC_PARTS),
    ("last-message-id", "GET", _ADMIN + "/lastMessageId", None, TOPIC_PARTS),
    ("topic-delete", "DELETE", _ADMIN, None, TOPIC_PARTS),
    ("offload-status", "GET", _ADMIN + "/offload", None, TOPIC_PARTS),
    ("topic-list", "GET", "/admin/v2/persistent/{tenant}/{namespace}", None, NAMESPACE_PARTS),
    ("unload", "POST", "/admin/v2/namespaces/{tenant}/{namespace}/unload", None, NAMESPACE_PARTS),
]  # fmt: skip
VALID_PARTS = {
    "tenant": TENANT,
    "namespace": NAMESPACE,
    "topic": EXISTING,
    "subscription": SUBSCRIPTION,
}


@pytest.mark.parametrize(
    ("method", "template", "body", "parts"),
    [pytest.param(*route[1:], id=route[0]) for route in NAME_ROUTES],
)
async def test_hostile_name_is_rejected_in_every_position(
    seeded: Seeded,
    method: str,
    template: str,
    body: Any,
    parts: tuple[str, ...],
) -> None:
    """Each name part of the route in turn gets each hostile name, the others valid
    ones (those of the seeded topic, so that only the name can be the problem); none of
    the requests changed anything. (A test per route and name, each ending on its own
    three-request snapshot, cost twice the CPU: the names go through the same code of a
    route, and an answer that is wrong names its name, part and path.)"""
    for ident, name, status in HOSTILE_NAMES:
        code = "invalid-request" if status == 400 else "not-found"
        for part in parts:
            path = template.format(**{**VALID_PARTS, part: name})
            answer = await send(seeded.client, method, path, body)
            assert answer.status == status, (ident, part, path, answer.status, answer.text)
            try:
                assert_error(answer, status, code)
            except AssertionError as wrong:
                raise AssertionError(f"{ident} as the {part}: {path}: {wrong}") from wrong
    await seeded.assert_unchanged()


@pytest.mark.parametrize(
    "name",
    [
        pytest.param("n" * 128, id="128-chars"),
        pytest.param("...", id="three-dots"),
        pytest.param(".hidden", id="leading-dot"),
        pytest.param("a..b", id="inner-dotdot"),
        pytest.param("A-Z_a-z.0=9:x", id="every-punctuation"),
        pytest.param("0", id="one-digit"),
    ],
)
async def test_names_at_the_edge_of_the_rule_are_accepted(seeded: Seeded, name: str) -> None:
    """The control for the table above: the rule rejects no more than it says."""
    client = seeded.client
    await client.produce(f"{TENANT}/{NAMESPACE}/{name}", ["x"])
    path = f"{admin(name)}/subscription/{name}"
    assert (await send(client, "PUT", path)).status == 204
    assert f"persistent://{TENANT}/{NAMESPACE}/{name}" in await topics(client)
    status, body = await client.request("GET", f"/admin/v2/persistent/{name}/{name}")
    assert (status, body) == (200, [])


@pytest.mark.parametrize(
    "segment",
    [
        pytest.param("a b", id="raw-space"),
        pytest.param("t\u00f3pico", id="raw-utf8"),
        pytest.param("\N{GRINNING FACE}", id="raw-emoji"),
    ],
)
async def test_request_target_that_is_not_http_is_400(seeded: Seeded, segment: str) -> None:
    """Not percent-encoded, these are no valid HTTP request target: aiohttp's parser
    answers 400 before the app runs, so the body is its plain text, not the JSON error."""
    path = f"/topics/persistent/{TENANT}/{NAMESPACE}/{segment}"
    answer = await send(seeded.client, "POST", path, GOOD_PRODUCE)
    assert answer.status == 400, answer.text
    assert "Traceback" not in answer.text
    await seeded.assert_unchanged()


HOSTILE_CONSUMER_IDS = [
    pytest.param("unknown", id="unknown"),
    pytest.param("..", id="dotdot"),
    pytest.param("%2e%2e", id="dotdot-encoded"),
    pytest.param("a%2Fb", id="slash-encoded"),
    pytest.param("%00", id="nul"),
    pytest.param("%F0%9F%98%80", id="emoji"),
    pytest.param("persistent", id="route-word"),
    pytest.param("c" * 300, id="300-chars"),
]
CONSUMER_ROUTES = [
    pytest.param("GET", "/messages?timeoutMs=0", None, id="receive"),
    pytest.param("POST", "/ack", {"messageIds": ["0:0"]}, id="ack"),
    pytest.param("POST", "/nack", {"messageIds": ["0:0"]}, id="nack"),
    pytest.param("POST", "/redeliverUnacknowledged", None, id="redeliver"),
    pytest.param("DELETE", "", None, id="close"),
]


@pytest.mark.parametrize("consumer_id", HOSTILE_CONSUMER_IDS)
@pytest.mark.parametrize(("method", "suffix", "body"), CONSUMER_ROUTES)
async def test_unknown_or_hostile_consumer_id_is_404(
    exclusive: WithConsumer, method: str, suffix: str, body: Any, consumer_id: str
) -> None:
    answer = await send(exclusive.client, method, f"/consumers/{consumer_id}{suffix}", body)
    assert_error(answer, 404, "not-found")
    await exclusive.assert_unchanged()


@pytest.mark.parametrize(("method", "suffix", "body"), CONSUMER_ROUTES)
async def test_closed_consumer_id_is_404(
    seeded: Seeded, method: str, suffix: str, body: Any
) -> None:
    client = seeded.client
    consumer = await client.subscribe(TOPIC, "short-lived")
    assert (await send(client, "DELETE", f"/consumers/{consumer}")).status == 204
    before = await snapshot(client)
    answer = await send(client, method, f"/consumers/{consumer}{suffix}", body)
    assert_error(answer, 404, "not-found")
    assert await snapshot(client) == before


# ---------------------------------------------------------------------- limits: 413


async def test_payload_over_max_message_size_is_413(seeded: Seeded) -> None:
    client = seeded.client
    too_big = {"payload": b64(b"x" * (MAX_MESSAGE_SIZE + 1))}
    for body in (
        {"messages": [too_big]},
        {"messages": [{"payload": b64("fits")}, too_big]},
        {"messages": [too_big, {"payload": b64("fits")}]},
    ):
        for topic in (EXISTING, FRESH):
            answer = await send(
                client, "POST", f"/topics/persistent/{TENANT}/{NAMESPACE}/{topic}", body
            )
            assert_error(answer, 413, "too-large")
    await seeded.assert_unchanged()


async def test_more_than_max_messages_per_request_is_413(seeded: Seeded) -> None:
    client = seeded.client
    body = {"messages": [{"payload": b64(f"m{i}")} for i in range(MAX_MESSAGES_PER_REQUEST + 1)]}
    for topic in (EXISTING, FRESH):
        answer = await send(
            client, "POST", f"/topics/persistent/{TENANT}/{NAMESPACE}/{topic}", body
        )
        assert_error(answer, 413, "too-large")
    await seeded.assert_unchanged()
    # exactly the limit is fine
    ids = await client.produce(TOPIC, [f"m{i}" for i in range(MAX_MESSAGES_PER_REQUEST)])
    assert len(ids) == MAX_MESSAGES_PER_REQUEST


def padded(body: dict[str, Any], size: int = MAX_BODY_BYTES + 1) -> bytes:
    """``body`` grown to ``size`` bytes with an ignored field (by default one byte over
    maxHttpRequestBodyBytes, so that only the body limit can refuse it)."""
    raw = json.dumps({**body, "pad": ""}).encode()
    return json.dumps({**body, "pad": "p" * (size - len(raw))}).encode()


FAULT = {"operation": "addEntries", "errorRate": 1.0}
OVERSIZED_BODY_ROUTES = [
    pytest.param("POST", f"/topics/persistent/{TOPIC}", GOOD_PRODUCE, id="produce-existing"),
    pytest.param("POST", f"/topics/persistent/{FRESH_TOPIC}", GOOD_PRODUCE, id="produce-fresh"),
    pytest.param("POST", f"/consumers/persistent/{TOPIC}/newsub", {}, id="consumer-create"),
    pytest.param("POST", RESET_PATH, {"messageId": "0:1"}, id="resetcursor"),
    pytest.param("PUT", "/admin/v2/brokerlab/faults", FAULT, id="faults"),
]


@pytest.mark.parametrize(("method", "path", "body"), OVERSIZED_BODY_ROUTES)
async def test_body_over_max_http_request_body_bytes_is_413(
    seeded: Seeded, method: str, path: str, body: dict[str, Any]
) -> None:
    raw = padded(body)
    assert len(raw) == MAX_BODY_BYTES + 1
    assert_error(await send(seeded.client, method, path, raw), 413, "too-large")
    await seeded.assert_unchanged()
    status, faults = await seeded.client.request("GET", "/admin/v2/brokerlab/faults")
    assert (status, faults) == (200, {})


@pytest.mark.parametrize("action", ["ack", "nack"])
async def test_oversized_ack_body_is_413(exclusive: WithConsumer, action: str) -> None:
    raw = padded({"messageIds": exclusive.ids})
    answer = await send(exclusive.client, "POST", f"/consumers/{exclusive.consumer}/{action}", raw)
    assert_error(answer, 413, "too-large")
    await exclusive.assert_unchanged()


async def test_body_limit_holds_without_content_length_and_after_decompression(
    seeded: Seeded,
) -> None:
    path = f"/topics/persistent/{TOPIC}"
    raw = padded(GOOD_PRODUCE)

    async def chunks() -> AsyncIterator[bytes]:
        for start in range(0, len(raw), 4096):
            yield raw[start : start + 4096]

    assert_error(await send(seeded.client, "POST", path, chunks()), 413, "too-large")
    bomb = gzip.compress(raw)
    assert len(bomb) < MAX_BODY_BYTES // 10
    answer = await send(seeded.client, "POST", path, bomb, {"Content-Encoding": "gzip"})
    assert_error(answer, 413, "too-large")
    await seeded.assert_unchanged()
    # a body of exactly the limit is accepted, compressed or not
    at_limit = padded(GOOD_PRODUCE, MAX_BODY_BYTES)
    assert len(at_limit) == MAX_BODY_BYTES
    assert (await send(seeded.client, "POST", path, at_limit)).status == 200
    answer = await send(
        seeded.client, "POST", path, gzip.compress(at_limit), {"Content-Encoding": "gzip"}
    )
    assert answer.status == 200, answer.text


# ---------------------------------------------------------------------- not found, conflicts


async def test_unknown_topic_is_404_and_is_not_created(seeded: Seeded) -> None:
    client = seeded.client
    missing = admin(FRESH)
    cases = [
        ("GET", f"{missing}/stats", None),
        ("GET", f"{missing}/internalStats", None),
        ("GET", f"{missing}/lastMessageId", None),
        ("DELETE", missing, None),
        ("DELETE", f"{missing}/subscription/{SUBSCRIPTION}", None),
        ("POST", f"{missing}/subscription/{SUBSCRIPTION}/resetcursor/0", None),
        ("POST", f"{missing}/subscription/{SUBSCRIPTION}/resetcursor", {"messageId": "0:0"}),
    ]
    for method, path, body in cases:
        assert_error(await send(client, method, path, body), 404, "not-found")
    await seeded.assert_unchanged()


async def test_unknown_subscription_is_404(seeded: Seeded) -> None:
    client = seeded.client
    cases = [
        ("DELETE", f"{admin()}/subscription/nosuch", None),
        ("POST", f"{admin()}/subscription/nosuch/resetcursor/0", None),
        ("POST", f"{admin()}/subscription/nosuch/resetcursor", {"messageId": "0:0"}),
    ]
    for method, path, body in cases:
        assert_error(await send(client, method, path, body), 404, "not-found")
    await seeded.assert_unchanged()


async def test_without_auto_creation_a_missing_topic_is_404_everywhere(
    live_broker: LiveBroker,
) -> None:
    client = await live_broker(allowAutoTopicCreation=False)
    cases = [
        ("POST", f"/topics/persistent/{TOPIC}", GOOD_PRODUCE),
        ("PUT", f"{admin()}/subscription/{SUBSCRIPTION}", None),
        ("POST", f"/consumers/persistent/{TOPIC}/{SUBSCRIPTION}", {}),
        ("GET", f"{admin()}/stats", None),
    ]
    for method, path, body in cases:
        assert_error(await send(client, method, path, body), 404, "not-found")
    assert await topics(client) == []


async def test_deleting_a_subscription_with_a_connected_consumer_is_412(
    exclusive: WithConsumer,
) -> None:
    client = exclusive.client
    answer = await send(client, "DELETE", f"{admin()}/subscription/{SUBSCRIPTION}")
    assert_error(answer, 412, "precondition-failed")
    await exclusive.assert_unchanged()
    # the consumer is still attached and can still ack what it holds
    await client.ack(exclusive.consumer, exclusive.ids)
    stats = await client.stats(TOPIC)
    assert stats["subscriptions"][SUBSCRIPTION]["msgBacklog"] == 0


@pytest.mark.parametrize(
    "query",
    [
        pytest.param("?force=yes", id="force-yes"),
        pytest.param("?force=1", id="force-digit"),
        pytest.param("?force=", id="force-empty"),
    ],
)
async def test_topic_delete_with_a_bad_force_is_400(exclusive: WithConsumer, query: str) -> None:
    assert_error(await send(exclusive.client, "DELETE", admin() + query), 400, "invalid-request")
    await exclusive.assert_unchanged()


async def test_force_in_capitals_is_true_as_every_boolean_of_http_and_websocket(
    exclusive: WithConsumer,
) -> None:
    """One spelling of booleans for the HTTP routes and the WebSocket handshake:
    ``true``/``false`` in any letter case."""
    answer = await send(exclusive.client, "DELETE", admin() + "?force=TRUE")
    assert answer.status == 204, (answer.status, answer.text)
    assert_error(await send(exclusive.client, "GET", admin() + "/stats"), 404, "not-found")


@pytest.mark.parametrize("query", ["", "?force=false", "?force=False"])
async def test_deleting_a_topic_with_a_connected_consumer_is_412(
    exclusive: WithConsumer, query: str
) -> None:
    answer = await send(exclusive.client, "DELETE", admin() + query)
    assert_error(answer, 412, "precondition-failed")
    await exclusive.assert_unchanged()


async def test_existing_subscription_is_409_and_keeps_its_cursor(seeded: Seeded) -> None:
    path = f"{admin()}/subscription/{SUBSCRIPTION}?messageId=latest"
    assert_error(await send(seeded.client, "PUT", path), 409, "conflict")
    await seeded.assert_unchanged()


# ---------------------------------------------------------------------- ack and nack


async def test_cumulative_ack_on_shared_is_400_and_acks_nothing(shared: WithConsumer) -> None:
    client = shared.client
    for ids in (shared.ids[-1:], shared.ids):
        body = {"messageIds": ids, "ackType": "Cumulative"}
        answer = await send(client, "POST", f"/consumers/{shared.consumer}/ack", body)
        assert_error(answer, 400, "invalid-request")
    await shared.assert_unchanged()
    # an individual ack of the same ids is fine
    await client.ack(shared.consumer, shared.ids)
    assert (await client.stats(TOPIC))["subscriptions"][SUBSCRIPTION]["msgBacklog"] == 0


async def test_cumulative_ack_of_several_ids_acks_up_to_the_greatest(
    exclusive: WithConsumer,
) -> None:
    """docs/api.md: Cumulative acknowledges everything up to the greatest id listed."""
    client = exclusive.client
    await client.ack(exclusive.consumer, [exclusive.ids[1], exclusive.ids[0]], "Cumulative")
    sub = (await client.stats(TOPIC))["subscriptions"][SUBSCRIPTION]
    assert (sub["msgBacklog"], sub["unackedMessages"]) == (1, 1)


BAD_MESSAGE_IDS: list[Any] = [
    pytest.param("abc", id="letters"),
    pytest.param("1:", id="no-entry"),
    pytest.param(":1", id="no-ledger"),
    pytest.param("1", id="no-colon"),
    pytest.param("-1:2", id="negative-ledger"),
    pytest.param("1:-2", id="negative-entry"),
    pytest.param("+1:2", id="plus-sign"),
    pytest.param("1:2:3:4", id="four-parts"),
    pytest.param("1:2:x", id="bad-batch-index"),
    pytest.param("1:2:-3", id="negative-batch-index"),
    pytest.param("1::2", id="double-colon"),
    pytest.param(" 1:2", id="leading-space"),
    pytest.param("1: 2", id="inner-space"),
    pytest.param("1:2\n", id="trailing-newline"),
    pytest.param("1.0:2", id="decimal-point"),
    pytest.param("0x1:2", id="hex"),
    pytest.param("\u0661:\u0662", id="arabic-digits"),
    pytest.param("", id="empty-string"),
    pytest.param(f"{2**63}:0", id="ledger-over-int64"),
    pytest.param(f"0:{2**63}", id="entry-over-int64"),
    pytest.param("9" * 5000 + ":1", id="5000-digits"),
    pytest.param(17, id="number"),
    pytest.param(3.5, id="float"),
    pytest.param(None, id="null"),
    pytest.param(True, id="bool"),
    pytest.param([0, 1], id="pair-list"),
    pytest.param({"ledgerId": 0, "entryId": 1}, id="object"),
]


@pytest.mark.parametrize("bad", BAD_MESSAGE_IDS)
@pytest.mark.parametrize("ack_type", ["Individual", "Cumulative", None])
async def test_ack_with_a_bad_message_id_is_400_and_acks_nothing(
    exclusive: WithConsumer, ack_type: str | None, bad: Any
) -> None:
    """The bad id comes after the real ones: none of them may be acked."""
    body: dict[str, Any] = {"messageIds": [*exclusive.ids, bad]}
    if ack_type is not None:
        body["ackType"] = ack_type
    answer = await send(exclusive.client, "POST", f"/consumers/{exclusive.consumer}/ack", body)
    assert_error(answer, 400, "invalid-request")
    await exclusive.assert_unchanged()


@pytest.mark.parametrize("bad", BAD_MESSAGE_IDS)
async def test_nack_with_a_bad_message_id_is_400_and_redelivers_nothing(
    exclusive: WithConsumer, bad: Any
) -> None:
    client = exclusive.client
    body = {"messageIds": [*exclusive.ids, bad]}
    answer = await send(client, "POST", f"/consumers/{exclusive.consumer}/nack", body)
    assert_error(answer, 400, "invalid-request")
    await exclusive.assert_unchanged()


BAD_ID_LISTS = [
    pytest.param({}, id="messageIds-missing"),
    pytest.param({"messageIds": []}, id="messageIds-empty"),
    pytest.param({"messageIds": None}, id="messageIds-null"),
    pytest.param({"messageIds": "0:0"}, id="messageIds-string"),
    pytest.param({"messageIds": {"0": "0"}}, id="messageIds-object"),
    pytest.param({"messageIds": 0}, id="messageIds-number"),
    pytest.param({"messageId": "0:0"}, id="singular-field-name"),
]


@pytest.mark.parametrize("body", BAD_ID_LISTS)
@pytest.mark.parametrize("action", ["ack", "nack"])
async def test_ack_and_nack_need_a_non_empty_list_of_ids(
    exclusive: WithConsumer, action: str, body: dict[str, Any]
) -> None:
    answer = await send(exclusive.client, "POST", f"/consumers/{exclusive.consumer}/{action}", body)
    assert_error(answer, 400, "invalid-request")
    await exclusive.assert_unchanged()


@pytest.mark.parametrize(
    "ack_type",
    [
        pytest.param("individual", id="lowercase"),
        pytest.param("CUMULATIVE", id="uppercase"),
        pytest.param("Shared", id="other-enum"),
        pytest.param("", id="empty"),
        pytest.param(None, id="null"),
        pytest.param(1, id="number"),
        pytest.param(["Individual"], id="list"),
    ],
)
async def test_ack_with_an_unknown_ack_type_is_400(exclusive: WithConsumer, ack_type: Any) -> None:
    body = {"messageIds": exclusive.ids, "ackType": ack_type}
    answer = await send(exclusive.client, "POST", f"/consumers/{exclusive.consumer}/ack", body)
    assert_error(answer, 400, "invalid-request")
    await exclusive.assert_unchanged()


async def test_acks_of_ids_not_pending_are_ignored_not_errors(exclusive: WithConsumer) -> None:
    """The control: well-formed ids this consumer does not hold change nothing, 204."""
    for ids, ack_type in (
        (["999:0", f"{INT64_MAX}:{INT64_MAX}"], "Individual"),
        (["7:7"], "Cumulative"),
    ):
        body = {"messageIds": ids, "ackType": ack_type}
        answer = await send(exclusive.client, "POST", f"/consumers/{exclusive.consumer}/ack", body)
        assert answer.status == 204, answer.text
    await exclusive.assert_unchanged()


# ---------------------------------------------------------------------- query parameters

BAD_RECEIVE_QUERIES = [
    pytest.param("maxMessages=0", id="maxMessages-0"),
    pytest.param("maxMessages=1001", id="maxMessages-1001"),
    pytest.param("maxMessages=-1", id="maxMessages-negative"),
    pytest.param("maxMessages=--1", id="maxMessages-double-minus"),
    pytest.param("maxMessages=abc", id="maxMessages-letters"),
    pytest.param("maxMessages=", id="maxMessages-empty"),
    pytest.param("maxMessages=1.5", id="maxMessages-fraction"),
    pytest.param("maxMessages=10.0", id="maxMessages-integral-fraction"),
    pytest.param("maxMessages=1e2", id="maxMessages-exponent"),
    pytest.param("maxMessages=0x10", id="maxMessages-hex"),
    pytest.param("maxMessages=%2B5", id="maxMessages-plus"),
    pytest.param("maxMessages=%205", id="maxMessages-space"),
    pytest.param("maxMessages=%D9%A5", id="maxMessages-arabic-digit"),
    pytest.param("maxMessages=" + "9" * 30, id="maxMessages-30-digits"),
    pytest.param("maxMessages=" + "9" * 5000, id="maxMessages-5000-digits"),
    pytest.param("timeoutMs=30001", id="timeoutMs-30001"),
    pytest.param("timeoutMs=-1", id="timeoutMs-negative"),
    pytest.param("timeoutMs=-0", id="timeoutMs-minus-zero"),
    pytest.param("timeoutMs=abc", id="timeoutMs-letters"),
    pytest.param("timeoutMs=1000.0", id="timeoutMs-fraction"),
    pytest.param("timeoutMs=true", id="timeoutMs-bool"),
    pytest.param("timeoutMs=" + "9" * 25, id="timeoutMs-25-digits"),
]


@pytest.mark.parametrize("query", BAD_RECEIVE_QUERIES)
async def test_receive_with_a_bad_query_parameter_is_400(
    exclusive: WithConsumer, query: str
) -> None:
    # timeoutMs=0 unless under test: a wrongly accepted request must not wait
    timeout = "" if query.startswith("timeoutMs") else "timeoutMs=0&"
    path = f"/consumers/{exclusive.consumer}/messages?{timeout}{query}"
    assert_error(await send(exclusive.client, "GET", path), 400, "invalid-request")
    await exclusive.assert_unchanged()


BAD_CONSUMER_BODIES = [
    pytest.param({"subscriptionType": "shared"}, id="type-lowercase"),
    pytest.param({"subscriptionType": "Bogus"}, id="type-unknown"),
    pytest.param({"subscriptionType": ""}, id="type-empty"),
    pytest.param({"subscriptionType": 1}, id="type-number"),
    pytest.param({"subscriptionType": None}, id="type-null"),
    pytest.param({"subscriptionType": ["Shared"]}, id="type-list"),
    pytest.param({"receiverQueueSize": 0}, id="receiverQueueSize-0"),
    pytest.param({"receiverQueueSize": -1}, id="receiverQueueSize-negative"),
    pytest.param({"receiverQueueSize": 100001}, id="receiverQueueSize-100001"),
    pytest.param({"receiverQueueSize": "10"}, id="receiverQueueSize-string"),
    pytest.param({"receiverQueueSize": 10.0}, id="receiverQueueSize-float"),
    pytest.param({"receiverQueueSize": True}, id="receiverQueueSize-bool"),
    pytest.param({"receiverQueueSize": None}, id="receiverQueueSize-null"),
    pytest.param({"subscriptionInitialPosition": "earliest"}, id="position-lowercase"),
    pytest.param({"subscriptionInitialPosition": "Oldest"}, id="position-unknown"),
    pytest.param({"subscriptionInitialPosition": 0}, id="position-number"),
    pytest.param({"priorityLevel": -1}, id="priorityLevel-negative"),
    pytest.param({"priorityLevel": 2**31}, id="priorityLevel-over-int32"),
    pytest.param({"priorityLevel": "0"}, id="priorityLevel-string"),
    pytest.param({"ackTimeoutMillis": -1}, id="ackTimeoutMillis-negative"),
    pytest.param({"ackTimeoutMillis": 2**31}, id="ackTimeoutMillis-over-int32"),
    pytest.param({"ackTimeoutMillis": 1.5}, id="ackTimeoutMillis-float"),
    pytest.param({"negativeAckRedeliveryDelayMillis": -1}, id="nackDelay-negative"),
    pytest.param({"negativeAckRedeliveryDelayMillis": "60000"}, id="nackDelay-string"),
    pytest.param({"consumerName": ""}, id="consumerName-empty"),
    pytest.param({"consumerName": "c" * 257}, id="consumerName-257-chars"),
    pytest.param({"consumerName": 5}, id="consumerName-number"),
    pytest.param({"consumerName": None}, id="consumerName-null"),
]


@pytest.mark.parametrize("body", BAD_CONSUMER_BODIES)
@pytest.mark.parametrize(
    ("topic", "subscription"),
    [
        pytest.param(EXISTING, "newsub", id="new-subscription"),
        pytest.param(EXISTING, SUBSCRIPTION, id="existing-subscription"),
        pytest.param(FRESH, "newsub", id="fresh-topic"),
    ],
)
async def test_consumer_with_a_bad_field_is_400_and_creates_nothing(
    seeded: Seeded, topic: str, subscription: str, body: dict[str, Any]
) -> None:
    (field,) = body  # each case has one field, the bad one
    path = f"/consumers/persistent/{TENANT}/{NAMESPACE}/{topic}/{subscription}"
    answer = await send(seeded.client, "POST", path, body)
    assert_error(answer, 400, "invalid-request")
    assert field in answer.body["reason"], answer.body
    await seeded.assert_unchanged()


BAD_START_IDS = [
    pytest.param("abc", id="letters"),
    pytest.param("1:", id="no-entry"),
    pytest.param("-1:2", id="negative"),
    pytest.param("1:2:3", id="three-parts"),
    pytest.param("", id="empty"),
    pytest.param("EARLIEST", id="uppercase-earliest"),
    pytest.param("Latest", id="capitalised-latest"),
    pytest.param("first", id="unknown-word"),
    pytest.param("%201:2", id="leading-space"),
    pytest.param(f"{2**63}:0", id="over-int64"),
    pytest.param("9" * 5000 + ":0", id="5000-digits"),
]


@pytest.mark.parametrize("message_id", BAD_START_IDS)
@pytest.mark.parametrize("topic", [EXISTING, FRESH])
async def test_subscription_with_a_bad_start_message_id_is_400(
    seeded: Seeded, topic: str, message_id: str
) -> None:
    path = f"{admin(topic)}/subscription/newsub?messageId={message_id}"
    assert_error(await send(seeded.client, "PUT", path), 400, "invalid-request")
    await seeded.assert_unchanged()


BAD_TIMESTAMPS = [
    pytest.param("abc", id="letters"),
    pytest.param("-1", id="negative"),
    pytest.param("1.5", id="fraction"),
    pytest.param("%2B5", id="plus"),
    pytest.param("1e3", id="exponent"),
    pytest.param("0x10", id="hex"),
    pytest.param("%D9%A5", id="arabic-digit"),
    pytest.param("%205", id="space"),
    pytest.param(str(2**63), id="over-int64"),
    pytest.param("9" * 5000, id="5000-digits"),
]


@pytest.mark.parametrize("timestamp", BAD_TIMESTAMPS)
async def test_resetcursor_with_a_bad_timestamp_is_400(
    exclusive: WithConsumer, timestamp: str
) -> None:
    path = f"{RESET_PATH}/{timestamp}"
    assert_error(await send(exclusive.client, "POST", path), 400, "invalid-request")
    await exclusive.assert_unchanged()


BAD_RESET_BODIES = [
    pytest.param({}, id="messageId-missing"),
    pytest.param({"messageId": None}, id="messageId-null"),
    pytest.param({"messageId": 5}, id="messageId-number"),
    pytest.param({"messageId": ["0:0"]}, id="messageId-list"),
    pytest.param({"messageId": "abc"}, id="messageId-letters"),
    pytest.param({"messageId": "-1:0"}, id="messageId-negative"),
    pytest.param({"messageId": "earliest"}, id="messageId-earliest"),
    pytest.param({"messageId": f"{2**63}:0"}, id="messageId-over-int64"),
]


@pytest.mark.parametrize("body", BAD_RESET_BODIES)
async def test_resetcursor_with_a_bad_message_id_is_400(
    exclusive: WithConsumer, body: dict[str, Any]
) -> None:
    path = RESET_PATH
    assert_error(await send(exclusive.client, "POST", path, body), 400, "invalid-request")
    await exclusive.assert_unchanged()


# ---------------------------------------------------------------------- fault settings

BAD_FAULT_BODIES = [
    pytest.param({}, "operation", id="operation-missing"),
    pytest.param({"operation": "nope", "errorRate": 1.0}, "operation", id="operation-unknown"),
    pytest.param(
        {"operation": "addentries", "errorRate": 1.0}, "operation", id="operation-lowercase"
    ),
    pytest.param({"operation": None, "errorRate": 1.0}, "operation", id="operation-null"),
    pytest.param({"operation": 3, "errorRate": 1.0}, "operation", id="operation-number"),
    pytest.param({"operation": "addEntries", "errorRate": 1.5}, "errorRate", id="errorRate-over-1"),
    pytest.param(
        {"operation": "addEntries", "errorRate": -0.1}, "errorRate", id="errorRate-negative"
    ),
    pytest.param({"operation": "addEntries", "errorRate": "1"}, "errorRate", id="errorRate-string"),
    pytest.param({"operation": "addEntries", "errorRate": True}, "errorRate", id="errorRate-bool"),
    pytest.param({"operation": "addEntries", "errorRate": None}, "errorRate", id="errorRate-null"),
    pytest.param({"operation": "addEntries", "delayMs": -1}, "delayMs", id="delayMs-negative"),
    pytest.param(
        {"operation": "addEntries", "delayMs": 600001}, "delayMs", id="delayMs-over-600000"
    ),
    pytest.param({"operation": "addEntries", "delayMs": "5"}, "delayMs", id="delayMs-string"),
    pytest.param({"operation": "addEntries", "delayMs": False}, "delayMs", id="delayMs-bool"),
]


@pytest.mark.parametrize(("body", "field"), BAD_FAULT_BODIES)
async def test_bad_fault_setting_is_400_and_sets_nothing(
    seeded: Seeded, body: dict[str, Any], field: str
) -> None:
    client = seeded.client
    answer = await send(client, "PUT", "/admin/v2/brokerlab/faults", body)
    assert_error(answer, 400, "invalid-request")
    assert field in answer.body["reason"], answer.body
    status, faults = await client.request("GET", "/admin/v2/brokerlab/faults")
    assert (status, faults) == (200, {})
    await client.produce(TOPIC, ["still works"])


# ---------------------------------------------------------------------- storage faults


async def test_produce_during_a_storage_fault_is_503_and_stores_nothing(seeded: Seeded) -> None:
    client = seeded.client
    fault = {"operation": "addEntries", "errorRate": 1.0}
    assert (await send(client, "PUT", "/admin/v2/brokerlab/faults", fault)).status == 204

    failed = [f"failed-{i}" for i in range(4)]
    body = {"messages": [{"payload": b64(p)} for p in failed]}
    for _attempt in range(2):  # a retry while the fault lasts fails the same way
        answer = await send(client, "POST", f"/topics/persistent/{TOPIC}", body)
        assert_error(answer, 503, "unavailable")
        retry_after = answer.headers.get("Retry-After", "")
        assert retry_after.isdigit() and int(retry_after) >= 1, answer.headers
    await seeded.assert_unchanged()
    status, faults = await client.request("GET", "/admin/v2/brokerlab/faults")
    assert status == 200 and faults["addEntries"]["injectedErrors"] == 2, faults

    assert (await send(client, "DELETE", "/admin/v2/brokerlab/faults")).status == 204
    assert await client.request("GET", "/admin/v2/brokerlab/faults") == (200, {})
    await seeded.assert_unchanged()

    # new produces work and follow the seeded messages directly
    ids = await client.produce(TOPIC, ["after-0", "after-1"])
    last_ledger, last_entry = map(int, seeded.before["lastConfirmedEntry"].split(":"))
    assert ids == [f"{last_ledger}:{last_entry + 1}", f"{last_ledger}:{last_entry + 2}"]
    internal = await client.internal_stats(TOPIC)
    assert internal["entriesAddedCounter"] == seeded.before["entriesAddedCounter"] + 2
    assert internal["lastConfirmedEntry"] == ids[-1]
    stats = await client.stats(TOPIC)
    assert stats["msgInCounter"] == len(SEED_PAYLOADS) + 2
    assert stats["subscriptions"][SUBSCRIPTION]["msgBacklog"] == len(SEED_PAYLOADS) + 2
    consumer = await client.subscribe(TOPIC, SUBSCRIPTION)
    got = await client.receive_until(consumer, len(SEED_PAYLOADS) + 2)
    assert [unb64(m["payload"]).decode() for m in got] == [*SEED_PAYLOADS, "after-0", "after-1"]


# ---------------------------------------------------------------------- routing


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        pytest.param("GET", "/nope", 404, id="unknown-path"),
        pytest.param("POST", f"/topics/persistent/{TENANT}/{NAMESPACE}", 404, id="produce-short"),
        pytest.param("POST", f"/topics/persistent/{TOPIC}/extra", 404, id="produce-long"),
        pytest.param("POST", f"/topics/non-persistent/{TOPIC}", 404, id="non-persistent"),
        pytest.param("GET", f"/topics/persistent/{TOPIC}", 405, id="produce-get"),
        pytest.param(
            "PATCH", f"{admin()}/subscription/{SUBSCRIPTION}", 405, id="subscription-patch"
        ),
    ],
)
async def test_paths_that_are_no_route_answer_json_errors(
    seeded: Seeded, method: str, path: str, status: int
) -> None:
    answer = await send(seeded.client, method, path, GOOD_PRODUCE)
    assert_error(answer, status, "not-found" if status == 404 else "method-not-allowed")
    if status == 405:
        assert answer.headers.get("Allow"), answer.headers
    await seeded.assert_unchanged()
