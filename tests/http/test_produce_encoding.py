"""The produce fast path (payload-only messages, loops in C) and the per-message path
give the same entries for the same request, and the fast path never accepts what the
per-message path refuses: on anything unusual it steps aside and the per-message path
reports the first bad message by index. Both take bodies validated by the produce
route's type (PRODUCE_BODY); a body that type refuses never reaches them. The plain path
(``encode_plain``) takes the raw body and encodes only what the type and the general
path accept, to the same entries."""

from __future__ import annotations

import base64
import json
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from broker.config import BrokerConfig
from broker.dispatch.errors import InvalidRequestError, TooLargeError
from broker.http.app import PRODUCE_BODY
from broker.http.b64_entries import HTTP_PRODUCER
from broker.http.produce_encoding import (
    _encode_each,
    _payloads_only,
    _validated,
    encode_plain,
    encode_produce,
    publish_results,
)
from broker.ledger.entry import decode_message, encode_batch, encode_payloads, messages_of
from broker.ledger.position import Position

MAX_SIZE = 64
NOW_MS = 1_763_700_000_000
LIMIT = BrokerConfig().maxMessagesPerProduceRequest


def outcome(encode: Any, messages: list[Any]) -> list[bytes] | tuple[str, str]:
    try:
        return list(encode(messages, MAX_SIZE, NOW_MS))
    except (InvalidRequestError, TooLargeError) as error:
        return (type(error).__name__, str(error))


payload_texts = st.one_of(
    st.binary(max_size=MAX_SIZE + 8).map(lambda raw: base64.b64encode(raw).decode()),
    st.sampled_from(["AAAA=", "QQ=", "Q", "QUJ\u00e9", "", "QQ==QQ=="]),
    st.integers(),
    st.none(),
)
message = st.one_of(
    st.fixed_dictionaries({"payload": payload_texts}),
    st.fixed_dictionaries({"payload": payload_texts}, optional={"key": st.text(max_size=4)}),
    st.fixed_dictionaries({}, optional={"key": st.text(max_size=2), "eventTime": st.integers()}),
    st.sampled_from(["", "a", [], ["payload"], 3, None]),
)


def whole_request(messages: list[Any], max_size: int, now_ms: int) -> list[bytes]:
    encoded, batch_size = encode_produce({"messages": messages}, LIMIT, MAX_SIZE, now_ms)
    assert batch_size == 0
    return encoded


def payload_only(messages: list[Any], max_size: int, now_ms: int) -> list[bytes] | None:
    """The fast path's entries: None where it steps aside."""
    payloads = _payloads_only(messages, max_size)
    return None if payloads is None else encode_payloads(payloads, now_ms, HTTP_PRODUCER)


def batched(messages: list[Any]) -> bytes | tuple[str, str]:
    """The request with ``"batch": true``: its one entry, or the error."""
    try:
        encoded, batch_size = encode_produce(
            {"messages": messages, "batch": True}, LIMIT, MAX_SIZE, NOW_MS
        )
    except (InvalidRequestError, TooLargeError) as error:
        return type(error).__name__, str(error)
    assert (len(encoded), batch_size) == (1, len(messages))
    return encoded[0]


def validated(messages: list[Any]) -> list[Any] | None:
    """The messages as the route's body type passes them on; None if it refuses them
    (the route answers 400 before encoding)."""
    try:
        body = PRODUCE_BODY.adapter.validate_python({"messages": messages})
    except ValidationError:
        return None
    return list(body["messages"])


@settings(max_examples=400, deadline=None)
@given(st.lists(message, min_size=1, max_size=6))
def test_fast_path_agrees_with_the_per_message_path(raw: list[Any]) -> None:
    messages = validated(raw)
    if messages is None:
        return
    per_message = outcome(_encode_each, messages)
    fast = payload_only(messages, MAX_SIZE, NOW_MS)
    if fast is not None:
        assert fast == per_message
    assert outcome(whole_request, messages) == per_message
    # batched: the fast path's payloads make the entry the per-message checks make
    if isinstance(per_message, list):
        items = _validated(messages, MAX_SIZE)
        if sum(len(item[0]) for item in items) <= MAX_SIZE:
            assert batched(messages) == encode_batch(items, NOW_MS, HTTP_PRODUCER)
        else:
            assert batched(messages)[0] == "TooLargeError"


@pytest.mark.parametrize("keyed", [False, True], ids=["payload-only", "keyed"])
def test_a_batch_may_hold_max_message_size_bytes_of_payload_and_not_one_more(keyed: bool) -> None:
    """Both batch paths (payload-only messages, and messages with a key) count the
    payloads together against maxMessageSize: equal passes, one byte over is 413."""
    half = MAX_SIZE // 2

    def request(sizes: list[int]) -> bytes | tuple[str, str]:
        messages: list[Any] = [{"payload": base64.b64encode(bytes(n)).decode()} for n in sizes]
        if keyed:
            messages[0]["key"] = "k"
        return batched(messages)

    exact = request([half, MAX_SIZE - half])
    assert isinstance(exact, bytes)
    assert messages_of(exact)[1].payload == bytes(MAX_SIZE - half)
    assert request([half, MAX_SIZE - half + 1]) == (
        "TooLargeError",
        f"the batch's payloads exceed maxMessageSize ({MAX_SIZE} bytes)",
    )


def test_fast_path_takes_payload_only_requests_and_encodes_them_as_messages() -> None:
    payloads = [b"", b"x", bytes(range(MAX_SIZE))]
    messages = [{"payload": base64.b64encode(p).decode()} for p in payloads]
    encoded = payload_only(messages, MAX_SIZE, NOW_MS)
    assert encoded is not None
    decoded = [decode_message(entry) for entry in encoded]
    assert [m.payload for m in decoded] == payloads
    assert {(m.publish_time, m.event_time, m.key) for m in decoded} == {(NOW_MS, 0, None)}


@pytest.mark.parametrize(
    "messages",
    [
        [{"payload": "QQ=="}, {"payload": "QQ==", "key": "k"}],  # optional fields
        [{"payload": "QQ=="}, {"payload": "QQ==", "properties": {}}],  # optional fields
        [{"payload": "AAAA="}],  # valid for strict binascii, refused by pybase64
        [{"payload": base64.b64encode(bytes(MAX_SIZE + 1)).decode()}],  # too large
        [{"payload": "QQ==", "eventTime": 0}],  # an optional field at its default
    ],
)
def test_fast_path_steps_aside(messages: list[Any]) -> None:
    checked = validated(messages)
    assert checked is not None
    assert payload_only(checked, MAX_SIZE, NOW_MS) is None


@pytest.mark.parametrize(
    "messages",
    [
        [{"payload": "QQ=="}, {}],  # a message without a payload
        [{"payload": 3}],  # a payload that is not a string
        ["QQ=="],  # a message that is not an object
        [{"payload": "QQ==", "eventTime": -1}],
        [{"payload": "QQ==", "eventTime": True}],  # strict: a boolean is not a number
        [{"payload": "QQ==", "properties": {"a": 1}}],
    ],
)
def test_the_body_type_refuses_what_neither_path_should_see(messages: list[Any]) -> None:
    assert validated(messages) is None


bodies = st.one_of(
    st.fixed_dictionaries(
        {"messages": st.lists(message, max_size=4)},
        optional={
            "batch": st.one_of(st.booleans(), st.sampled_from(["true", 1, None])),
            "producerName": st.sampled_from(["p", "", 5]),
            "extra": st.integers(),
        },
    ),
    st.sampled_from([[], "messages", None, {"messages": {"payload": "QQ=="}}, {}]),
)


@settings(max_examples=500, deadline=None)
@given(bodies)
def test_the_plain_path_encodes_what_the_general_path_encodes(body: Any) -> None:
    """The plain path takes no body the route's type or the general path refuses, and
    encodes what it takes to the same entries; whatever it leaves is validated."""
    raw = json.dumps(body).encode()  # big integers too
    plain = encode_plain(raw, LIMIT, MAX_SIZE, NOW_MS)
    if plain is None:
        return
    assert plain == encode_produce(PRODUCE_BODY.adapter.validate_json(raw), LIMIT, MAX_SIZE, NOW_MS)


def test_the_common_body_is_taken_plain_and_the_rest_left_to_the_type() -> None:
    payload = {"payload": "QQ=="}
    body = {"messages": [payload] * 3}
    assert encode_plain(orjson.dumps(body), LIMIT, MAX_SIZE, NOW_MS) == (
        encode_payloads([b"A"] * 3, NOW_MS, HTTP_PRODUCER),
        0,
    )
    batched = {"messages": [payload] * 2, "batch": True}
    assert encode_plain(orjson.dumps(batched), LIMIT, MAX_SIZE, NOW_MS) == (
        encode_produce(batched, LIMIT, MAX_SIZE, NOW_MS)[0],
        2,
    )
    # a body larger than maxMessageSize whose payloads are all within it
    large = {"messages": [{"payload": base64.b64encode(bytes(MAX_SIZE)).decode()}] * 2}
    assert len(orjson.dumps(large)) > MAX_SIZE
    assert encode_plain(orjson.dumps(large), LIMIT, MAX_SIZE, NOW_MS) == (
        encode_payloads([bytes(MAX_SIZE)] * 2, NOW_MS, HTTP_PRODUCER),
        0,
    )
    too_large = base64.b64encode(bytes(MAX_SIZE + 1)).decode()
    for raw in (
        b"",
        b"{",
        b'{"messages": [{"payload": "QQ=="}], "producerName": "p"}',  # the type checks it
        b'{"messages": [{"payload": "QQ=="}], "unknown": 1}',  # the type drops it
        b'{"messages": []}',
        b'{"messages": [{"payload": "QQ=="}], "batch": "true"}',
        b'{"messages": [{"payload": "QQ==", "key": "k"}]}',
        b'{"messages": [{"key": "k"}]}',
        b'{"messages": [{"payload": 3}]}',
        b'{"messages": [{"payload": "QQ="}]}',  # not base64
        b'{"messages": [{"payload": "QQ=="}, "QQ=="]}',
        b'{"messages": [{"payload": "QQ=="}, "a"]}',  # a one-character string
        b'{"messages": [{"payload": "QQ=="}, ["payload"]]}',
        b'[{"payload": "QQ=="}]',
        orjson.dumps({"messages": [{"payload": too_large}]}),
        orjson.dumps({"messages": [{"payload": "QUFB"}] * 30, "batch": True}),  # 90 bytes
        orjson.dumps({"messages": [payload] * (LIMIT + 1)}),
    ):
        assert encode_plain(raw, LIMIT, MAX_SIZE, NOW_MS) is None, raw


@settings(max_examples=300, deadline=None)
@given(
    ledger_id=st.integers(0, (1 << 63) - 1),
    entry_id=st.integers(0, (1 << 63) - 1),
    batch_size=st.integers(0, 40),
    entries=st.integers(1, 40),
)
def test_the_produce_answer_is_what_orjson_writes_for_it(
    ledger_id: int, entry_id: int, batch_size: int, entries: int
) -> None:
    if batch_size:
        ids = [f"{ledger_id}:{entry_id}:{index}" for index in range(batch_size)]
    else:
        ids = [f"{ledger_id}:{entry_id + offset}" for offset in range(entries)]
    expected = orjson.dumps(
        {"messagePublishResults": [{"messageId": i, "errorCode": 0} for i in ids]}
    )

    assert publish_results(Position(ledger_id, entry_id), batch_size, entries) == expected


def test_every_produce_path_names_the_http_producer() -> None:
    """The ledger's entries carry whatever producer their caller names; each way the
    produce route encodes names the HTTP producer, which consumers then see."""
    plain = {"messages": [{"payload": "QQ=="}] * 2}
    keyed = {"messages": [{"payload": "QQ==", "key": "k"}, {"payload": "Qg=="}]}
    encoded = [
        encode_plain(orjson.dumps(plain), LIMIT, MAX_SIZE, NOW_MS),
        encode_plain(orjson.dumps({**plain, "batch": True}), LIMIT, MAX_SIZE, NOW_MS),
        encode_produce(plain, LIMIT, MAX_SIZE, NOW_MS),
        encode_produce({**plain, "batch": True}, LIMIT, MAX_SIZE, NOW_MS),
        encode_produce(keyed, LIMIT, MAX_SIZE, NOW_MS),
        encode_produce({**keyed, "batch": True}, LIMIT, MAX_SIZE, NOW_MS),
    ]
    producers = {
        message.producer_name
        for result in encoded
        if result is not None
        for entry in result[0]
        for message in messages_of(entry)
    }
    assert None not in encoded
    assert producers == {HTTP_PRODUCER}
