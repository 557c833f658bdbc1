"""Entries in Pulsar's format: magic, CRC32C, MessageMetadata, payload; batches inside."""

from __future__ import annotations

import base64
import struct
import tracemalloc
import zlib

import pytest
from crc32c import crc32c
from hypothesis import example, given, settings
from hypothesis import strategies as st

from broker.ledger.entry import (
    DEFAULT_PRODUCER,
    HEAD_SIZE,
    PLAIN_SEQUENCE_IDS,
    BatchItem,
    Entry,
    EntryFormatError,
    _plain_single_fields,
    checksum_ok,
    decode_message,
    encode_batch,
    encode_batch_payloads,
    encode_message,
    encode_payloads,
    entry_of,
    key_of,
    messages_of,
    metadata_of,
    payload_size,
    plain_fields,
    publish_time_of,
    sent_payload_size,
)
from broker.ledger.position import Position
from broker.pulsar_api import COMPRESSION_ZLIB, MessageMetadata, SingleMessageMetadata


def test_an_entry_is_framed_as_pulsar_frames_a_send_payload() -> None:
    data = encode_message(b"payload", 1_700_000_000_123, 42, None, None, "p1", 7)
    magic, checksum, size = struct.unpack_from(">HII", data)
    assert magic == 0x0E01
    assert checksum == crc32c(data[6:])
    metadata = MessageMetadata.FromString(data[10 : 10 + size])
    assert (metadata.producer_name, metadata.sequence_id) == ("p1", 7)
    assert (metadata.publish_time, metadata.event_time) == (1_700_000_000_123, 42)
    assert not metadata.HasField("num_messages_in_batch")
    assert data[10 + size :] == b"payload"
    message = decode_message(data)
    assert (message.publish_time, message.event_time, message.key) == (1_700_000_000_123, 42, None)
    assert (message.properties, message.payload, message.batch_index) == ({}, b"payload", -1)
    assert publish_time_of(data) == 1_700_000_000_123


def test_key_and_properties_round_trip() -> None:
    message = decode_message(encode_message(b"", 5, 0, "k\u00e9y", {"a": "b"}))
    assert (message.key, message.properties, message.payload) == ("k\u00e9y", {"a": "b"}, b"")
    empty_key = decode_message(encode_message(b"x", 5, 0, "", None))
    assert (empty_key.key, empty_key.payload) == ("", b"x")


def test_the_payload_only_path_writes_what_encode_message_writes() -> None:
    fast = encode_payloads([b"a", b"bc"], 99, first_sequence_id=3)
    assert fast == [
        encode_message(b"a", 99, sequence_id=3),
        encode_message(b"bc", 99, sequence_id=4),
    ]


@settings(max_examples=300, deadline=None)
@given(
    payloads=st.lists(st.binary(max_size=300), max_size=6),
    publish_time=st.one_of(
        st.integers(0, 300), st.integers(1_600_000_000_000, 1 << 45), st.integers(0, (1 << 64) - 1)
    ),
    producer=st.one_of(st.just(DEFAULT_PRODUCER), st.text(max_size=200)),
    first=st.one_of(st.integers(0, 300), st.integers(0, PLAIN_SEQUENCE_IDS + 10)),
)
def test_payload_only_entries_are_what_protobuf_serializes_byte_for_byte(
    payloads: list[bytes], publish_time: int, producer: str, first: int
) -> None:
    """The table-built metadata (no protobuf) against MessageMetadata.SerializeToString,
    across varint lengths of the sequence id and publish time, names over 127 bytes (a
    two-byte length) and sequence ids past the table (protobuf's path)."""
    expected = [
        encode_message(payload, publish_time, producer_name=producer, sequence_id=first + index)
        for index, payload in enumerate(payloads)
    ]
    assert encode_payloads(payloads, publish_time, producer, first) == expected
    # twice: the second call reads the rows the first one built
    assert encode_payloads(payloads, publish_time, producer, first) == expected
    assert all(checksum_ok(data) for data in expected)


def _batch_through_protobuf(items: list[BatchItem], publish_time: int, sequence_id: int) -> bytes:
    """The batched entry with every SingleMessageMetadata serialized by protobuf."""
    metadata = MessageMetadata(
        producer_name=DEFAULT_PRODUCER, sequence_id=sequence_id, publish_time=publish_time
    )
    if items[0][1] is not None:
        metadata.partition_key = items[0][1]
    metadata.num_messages_in_batch = len(items)
    metadata.highest_sequence_id = sequence_id + len(items) - 1
    parts: list[bytes] = []
    for index, (payload, key, properties, event_time) in enumerate(items):
        single = SingleMessageMetadata(payload_size=len(payload), sequence_id=sequence_id + index)
        if key is not None:
            single.partition_key = key
        for name, value in (properties or {}).items():
            single.properties.add(key=name, value=value)
        if event_time:
            single.event_time = event_time
        encoded = single.SerializeToString()
        parts += (struct.pack(">I", len(encoded)), encoded, payload)
    return entry_of(metadata.SerializeToString(), b"".join(parts))


_batch_items = st.lists(
    st.tuples(
        st.one_of(st.binary(max_size=200), st.integers(16_380, 16_390).map(bytes)),
        st.one_of(st.none(), st.text(max_size=5)),
        st.one_of(st.none(), st.dictionaries(st.text(max_size=3), st.text(max_size=3))),
        st.one_of(st.just(0), st.integers(1, 1 << 40)),
    ),
    min_size=1,
    max_size=5,
)


@settings(max_examples=300, deadline=None)
@given(
    items=_batch_items,
    publish_time=st.integers(0, 1 << 45),
    sequence_id=st.one_of(st.integers(0, 20_000), st.integers(0, (1 << 64) - 10)),
)
def test_a_batch_is_what_protobuf_serializes_byte_for_byte(
    items: list[BatchItem], publish_time: int, sequence_id: int
) -> None:
    """Payload-only messages get their SingleMessageMetadata from the varint table (past
    it: computed), the others from protobuf; the bytes are protobuf's either way."""
    expected = _batch_through_protobuf(items, publish_time, sequence_id)
    assert encode_batch(items, publish_time, DEFAULT_PRODUCER, sequence_id) == expected


_sizes = st.one_of(st.integers(0, 200), st.integers(16_380, 16_390))
#: payloads of one size (the per-size table) or of any sizes (computed)
_batch_payloads = st.one_of(
    st.tuples(_sizes, st.integers(1, 6)).map(lambda pair: [bytes(pair[0])] * pair[1]),
    st.lists(_sizes.map(bytes), min_size=1, max_size=6),
)
_batch_sequence_ids = st.one_of(
    st.integers(0, 20),
    st.integers(PLAIN_SEQUENCE_IDS - 8, PLAIN_SEQUENCE_IDS + 2),
    st.integers(16_370, 16_390),
    st.integers((1 << 63) - 4, (1 << 63) + 4),
    st.integers((1 << 64) - 8, (1 << 64) + 2),
)


@settings(max_examples=400, deadline=None)
@given(
    payloads=_batch_payloads, publish_time=st.integers(0, 1 << 45), sequence_id=_batch_sequence_ids
)
def test_a_batch_of_payloads_only_is_what_protobuf_serializes_byte_for_byte(
    payloads: list[bytes], publish_time: int, sequence_id: int
) -> None:
    """The framing of payload-only messages, from the per-size table or computed, across
    payload sizes and sequence ids at the table's end, the varints' 2-byte end, int64's
    and uint64's; sequence ids past uint64 are refused as protobuf refuses them."""
    items: list[BatchItem] = [(payload, None, None, 0) for payload in payloads]
    if sequence_id + len(payloads) > 1 << 64:
        with pytest.raises(ValueError):
            _batch_through_protobuf(items, publish_time, sequence_id)
        with pytest.raises(ValueError):
            encode_batch_payloads(payloads, publish_time, DEFAULT_PRODUCER, sequence_id)
        return
    expected = _batch_through_protobuf(items, publish_time, sequence_id)
    assert encode_batch_payloads(payloads, publish_time, DEFAULT_PRODUCER, sequence_id) == expected
    # twice: the second call reads the rows the first one may have added to the table
    assert encode_batch_payloads(payloads, publish_time, DEFAULT_PRODUCER, sequence_id) == expected


def test_an_empty_batch_of_payloads_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one message"):
        encode_batch_payloads([], 1)


@settings(max_examples=400, deadline=None)
@given(
    payload_size=st.one_of(st.integers(0, 20_000), st.integers(0, (1 << 31) - 1)),
    sequence_id=st.one_of(st.none(), st.integers(0, (1 << 64) - 1)),
    key=st.one_of(st.none(), st.text(max_size=3)),
    event_time=st.one_of(st.just(0), st.integers(1, 1 << 40)),
    compacted_out=st.booleans(),
    properties=st.dictionaries(st.text(max_size=2), st.text(max_size=2), max_size=2),
)
def test_only_a_single_metadata_of_size_and_sequence_id_is_read_without_protobuf(
    payload_size: int,
    sequence_id: int | None,
    key: str | None,
    event_time: int,
    compacted_out: bool,
    properties: dict[str, str],
) -> None:
    single = SingleMessageMetadata(payload_size=payload_size)
    if sequence_id is not None:
        single.sequence_id = sequence_id
    if key is not None:
        single.partition_key = key
    if event_time:
        single.event_time = event_time
    if compacted_out:
        single.compacted_out = True
    for name, value in properties.items():
        single.properties.add(key=name, value=value)
    raw = single.SerializeToString()
    plain = (
        sequence_id is not None
        and key is None
        and not event_time
        and not compacted_out
        and not properties
    )

    assert _plain_single_fields(raw) == ((payload_size, sequence_id) if plain else None)
    for cut in range(len(raw)):  # a truncated one is not plain: protobuf reports it
        assert _plain_single_fields(raw[:cut]) is None
    assert _plain_single_fields(raw + b"\x00") is None


def _message_fields(data: bytes, metadata: object = None) -> list[tuple[object, ...]]:
    return [tuple(getattr(m, n) for n in m.__slots__) for m in messages_of(data, metadata)]


@settings(max_examples=500, deadline=None)
@given(
    producer=st.one_of(st.text(max_size=3), st.text(min_size=40, max_size=140)),
    sequence_id=st.one_of(st.integers(0, 20_000), st.integers(0, (1 << 64) - 1)),
    publish_time=st.one_of(st.integers(0, 1 << 45), st.integers(0, (1 << 64) - 1)),
    event_time=st.one_of(st.just(0), st.integers(1, 1 << 40)),
    key=st.one_of(st.none(), st.text(max_size=3)),
    batch=st.one_of(st.none(), st.integers(0, 3)),
    payload=st.binary(max_size=40),
)
# the edges: a ten-byte publish time, a two-byte name length, a three-byte sequence id
@example("p", 1, 1 << 63, 0, None, None, b"x")
@example("p" * 128, 1, 1, 0, None, None, b"x")
@example("p" * 127, (1 << 14) - 1, (1 << 63) - 1, 0, None, None, b"x")
@example("p", 1 << 14, 1, 0, None, None, b"x")
def test_only_plain_metadata_is_read_without_protobuf_and_reads_as_protobuf_reads_it(
    producer: str,
    sequence_id: int,
    publish_time: int,
    event_time: int,
    key: str | None,
    batch: int | None,
    payload: bytes,
) -> None:
    metadata = MessageMetadata(
        producer_name=producer, sequence_id=sequence_id, publish_time=publish_time
    )
    if event_time:
        metadata.event_time = event_time
    if key is not None:
        metadata.partition_key = key
    if batch is not None:
        metadata.num_messages_in_batch = batch
    raw = metadata.SerializeToString()
    data = entry_of(raw, payload)
    plain = (
        len(producer.encode()) < 128
        and sequence_id < 1 << 14
        and publish_time < 1 << 63
        and not event_time
        and key is None
        and batch is None
    )

    fields = plain_fields(data)
    if plain:
        assert fields == (producer, sequence_id, publish_time, len(data) - len(payload))
    else:
        assert fields is None
    if batch is None:  # the plain and the protobuf reading give the same message
        assert _message_fields(data) == _message_fields(data, metadata_of(data))
    # and the same sticky key and publish time
    expected_key = key.encode() if key is not None else f"{producer}-{sequence_id}".encode()
    assert key_of(data) == expected_key
    assert publish_time_of(data) == publish_time
    for cut in range(len(raw)):  # cut short: plain metadata is not plain any more
        _assert_read_as_protobuf_reads(entry_of(raw[:cut], payload))
        if plain:
            assert plain_fields(entry_of(raw[:cut], payload)) is None
    assert plain_fields(entry_of(raw + b"\x00", payload)) is None


def _assert_read_as_protobuf_reads(data: bytes) -> None:
    """Either the entry's metadata is not plain, or protobuf reads the same three fields
    from it and nothing else."""
    fields = plain_fields(data)
    if fields is not None:
        parsed = metadata_of(data)
        assert {field.name for field, _ in parsed.ListFields()} == {
            "producer_name", "sequence_id", "publish_time"
        }  # fmt: skip
        assert fields[:3] == (parsed.producer_name, parsed.sequence_id, parsed.publish_time)


@settings(max_examples=300, deadline=None)
@given(
    sequence_id=st.integers(0, PLAIN_SEQUENCE_IDS - 1),
    flip=st.tuples(st.integers(0, 200), st.integers(0, 255)),
)
def test_plain_metadata_with_any_byte_changed_reads_as_protobuf_reads_it(
    sequence_id: int, flip: tuple[int, int]
) -> None:
    """A byte of a plain metadata changed: either it is not plain any more, or protobuf
    reads the same three fields from it and nothing else."""
    (data,) = encode_payloads([b"payload"], 1_763_700_000_123, "producer", sequence_id)
    end = len(data) - len(b"payload")
    where, value = flip
    where = HEAD_SIZE + where % (end - HEAD_SIZE)
    changed = data[:where] + bytes([value]) + data[where + 1 :]

    _assert_read_as_protobuf_reads(changed)


def test_an_entry_reads_its_plain_metadata_without_protobuf() -> None:
    (data,) = encode_payloads([b"payload"], 1_763_700_000_123, first_sequence_id=9)
    entry = Entry(Position(1, 2), data)

    assert entry.keep_metadata() == 1
    assert entry._metadata == plain_fields(data)
    assert _message_fields(data) == _message_fields(data, metadata_of(data))
    (message,) = entry.decoded_messages()
    assert (message.payload, message.publish_time, message.sequence_id) == (
        b"payload", 1_763_700_000_123, 9
    )  # fmt: skip
    assert Entry(Position(1, 3), data).messages == 1


@settings(max_examples=200, deadline=None)
@given(items=_batch_items, sequence_id=st.integers(0, 1 << 20))
def test_a_batch_reads_back_as_its_messages(items: list[BatchItem], sequence_id: int) -> None:
    messages = messages_of(encode_batch(items, 77, "p", sequence_id))

    assert [(m.payload, m.key, m.properties, m.event_time) for m in messages] == [
        (payload, key, properties or {}, event_time)
        for payload, key, properties, event_time in items
    ]
    assert [(m.batch_index, m.sequence_id) for m in messages] == [
        (index, sequence_id + index) for index in range(len(items))
    ]
    assert {(m.batch_size, m.publish_time, m.producer_name) for m in messages} == {
        (len(items), 77, "p")
    }


def test_a_batch_holds_each_message_with_its_own_metadata() -> None:
    data = encode_batch(
        [(b"one", "k1", {"p": "1"}, 11), (b"", None, None, 0), (b"three", "k3", None, 0)],
        1234,
        "batcher",
        40,
    )
    metadata = metadata_of(data)
    assert metadata.num_messages_in_batch == 3
    assert (metadata.partition_key, metadata.sequence_id, metadata.highest_sequence_id) == (
        "k1",
        40,
        42,
    )
    assert checksum_ok(data)
    messages = messages_of(data)
    assert [m.payload for m in messages] == [b"one", b"", b"three"]
    assert [m.key for m in messages] == ["k1", None, "k3"]
    assert [m.batch_index for m in messages] == [0, 1, 2]
    assert {m.batch_size for m in messages} == {3}
    assert [m.sequence_id for m in messages] == [40, 41, 42]
    assert (messages[0].properties, messages[0].event_time) == ({"p": "1"}, 11)
    assert {m.publish_time for m in messages} == {1234}
    assert Entry(Position(1, 2), data).messages == 3
    assert Entry(Position(1, 2), encode_message(b"x", 1)).messages == 1


def test_a_corrupted_entry_fails_its_checksum() -> None:
    data = bytearray(encode_message(b"payload", 5))
    assert checksum_ok(bytes(data))
    data[-1] ^= 1
    assert not checksum_ok(bytes(data))


def test_a_sent_entrys_payload_size_only_with_its_checksum() -> None:
    data = bytearray(encode_message(b"payload", 5))
    assert sent_payload_size(bytes(data)) == payload_size(bytes(data)) == len(b"payload")
    batch = encode_batch([(b"one", None, None, 0), (b"two", None, None, 0)], 7)
    assert sent_payload_size(batch) == payload_size(batch) > 6
    data[-1] ^= 1
    assert sent_payload_size(bytes(data)) is None
    assert sent_payload_size(b"") is None and sent_payload_size(b"\x0e\x01") is None
    # a metadata size past the end: the checksum matches, the size is what is left (the
    # produce path's check of the metadata refuses it next)
    bogus = bytearray(b"\x0e\x01\0\0\0\0\0\0\0\x09x")
    bogus[2:6] = struct.pack(">I", crc32c(bytes(bogus[6:])))
    assert sent_payload_size(bytes(bogus)) == payload_size(bytes(bogus)) == -8


@pytest.mark.parametrize(
    "data",
    [b"", b"\x01" * 40, b"\x0e\x01\0\0\0\0\xff\xff\xff\xff", b"\x0e\x01\0\0\0\0\0\0\0\x02\xff\xff"],
)
def test_bytes_that_are_not_an_entry_are_refused(data: bytes) -> None:
    with pytest.raises(EntryFormatError):
        messages_of(data)
    assert key_of(data) is None


def test_a_batch_whose_messages_run_past_the_entry_is_refused() -> None:
    data = encode_batch([(b"abc", None, None, 0), (b"def", None, None, 0)], 1)
    metadata = metadata_of(data)
    # the batch's metadata over a payload cut two bytes short, with a valid checksum
    head = metadata.SerializeToString()
    payload = data[10 + len(head) : -2]
    size = struct.pack(">I", len(head))
    truncated = struct.pack(">HI", 0x0E01, crc32c(payload, crc32c(head, crc32c(size)))) + size
    with pytest.raises(EntryFormatError):
        messages_of(truncated + head + payload)


def test_the_sticky_key_is_resolved_as_pulsar_resolves_it() -> None:
    assert key_of(encode_message(b"x", 1, key="plain")) == b"plain"
    no_key = encode_message(b"x", 1, producer_name="prod", sequence_id=9)
    assert key_of(no_key) == b"prod-9"
    metadata = MessageMetadata(producer_name="p", sequence_id=1, publish_time=1)
    metadata.partition_key = base64.b64encode(b"\x00\xff").decode()
    metadata.partition_key_b64_encoded = True
    assert key_of(entry_of(metadata.SerializeToString(), b"")) == b"\x00\xff"
    metadata.ordering_key = b"order"
    assert key_of(entry_of(metadata.SerializeToString(), b"")) == b"order"


@pytest.mark.parametrize(
    "data",
    [
        encode_message(b"payload", 1_700_000_000_123, 42, "k", {"a": "b"}, "p1", 7),
        encode_batch([(b"one", "k1", {"x": "1"}, 5), (b"two", None, None, 0)], 99, "p2", 3),
    ],
    ids=["unbatched", "batch"],
)
def test_messages_decoded_from_kept_metadata_are_those_of_the_bytes(data: bytes) -> None:
    entry = Entry(Position(1, 2), data)
    entry.keep_metadata()
    fields = [tuple(getattr(m, name) for name in m.__slots__) for m in messages_of(data)]

    assert [tuple(getattr(m, n) for n in m.__slots__) for m in entry.decoded_messages()] == fields
    assert entry.messages == max(len(fields), 1)


@pytest.mark.parametrize(
    ("compression", "reason"),
    [(1, "compression 1 is not readable"), (2, "bad ZLIB payload")],
    ids=["lz4", "zlib-garbage"],
)
def test_an_entry_the_http_view_cannot_read_is_an_entry_format_error(
    compression: int, reason: str
) -> None:
    """What the HTTP and WebSocket views cannot read (LZ4, which they do not
    decompress; ZLIB that does not inflate) is the entry format error their polls log
    and skip, not another exception that fails the poll."""
    metadata = MessageMetadata(producer_name="p", sequence_id=0, publish_time=1)
    metadata.compression = compression
    entry = Entry(Position(1, 2), entry_of(metadata.SerializeToString(), b"not inflatable"))

    assert entry.keep_metadata() == 1
    with pytest.raises(EntryFormatError, match=reason):
        entry.decoded_messages()


def test_bytes_that_are_not_an_entry_keep_nothing_and_fail_to_decode() -> None:
    entry = Entry(Position(1, 2), b"not an entry")
    entry.keep_metadata()

    assert entry.messages == 1
    with pytest.raises(EntryFormatError):
        entry.decoded_messages()


def zlib_entry(inflated: bytes, declared: int) -> bytes:
    metadata = MessageMetadata(producer_name="p", sequence_id=0, publish_time=1)
    metadata.compression = COMPRESSION_ZLIB
    metadata.uncompressed_size = declared
    return entry_of(metadata.SerializeToString(), zlib.compress(inflated))


def test_a_zlib_payload_inflates_to_its_declared_size() -> None:
    (message,) = messages_of(zlib_entry(b"hello " * 100, 600))
    assert message.payload == b"hello " * 100
    (empty,) = messages_of(zlib_entry(b"", 0))
    assert empty.payload == b""


@pytest.mark.parametrize(
    ("inflated", "declared", "limit"),
    [
        (64 << 20, 100, 5 << 20),  # a ZLIB bomb: 64 MiB in 64 KiB that declares 100 bytes
        (1000, 0, 5 << 20),  # no uncompressed_size: it must inflate to nothing
        (1000, 1001, 5 << 20),  # inflates to less than it declares
        (6 << 20, 6 << 20, 5 << 20),  # declares more than maxMessageSize
    ],
    ids=["bomb", "undeclared", "short", "over-max-message-size"],
)
def test_a_zlib_payload_that_does_not_inflate_to_its_declared_size_is_corrupt(
    inflated: int, declared: int, limit: int
) -> None:
    """As Pulsar's codecs, which inflate into a buffer of the declared size: never more
    than that is made, so a bomb costs what it declares (the HTTP and WebSocket views
    inflated it whole: 1 MiB sent was 1 GiB inflated, then base64 in a poll)."""
    entry = zlib_entry(bytes(inflated), declared)
    tracemalloc.start()
    try:
        with pytest.raises(EntryFormatError, match="bad ZLIB payload"):
            messages_of(entry, max_inflated=limit)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < len(entry) + max(declared, 1) + (1 << 20), peak  # never the inflated size


def test_an_entry_names_its_producer_and_sequence_id_from_either_metadata() -> None:
    plain = encode_message(b"p", 1_763_700_000_000, producer_name="p-0-1", sequence_id=41)
    keyed = encode_message(b"p", 1_763_700_000_000, key="k", producer_name="p-0-1", sequence_id=42)
    assert plain_fields(plain) is not None and plain_fields(keyed) is None
    assert Entry(Position(1, 2), plain).origin() == ("p-0-1", 41)
    assert Entry(Position(1, 3), keyed).origin() == ("p-0-1", 42)
    assert Entry(Position(1, 4), b"not an entry").origin() == ("", -1)
