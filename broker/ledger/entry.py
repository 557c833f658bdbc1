"""Entries as the broker stores them: Pulsar's format, byte for byte.

An entry is what a producer's SEND carries after the command::

    magic 0x0e01 (2 bytes) | CRC32C (4) | metadata size (4) | MessageMetadata | payload

all integers big-endian, the checksum over everything after it. The payload of a batched
entry (``num_messages_in_batch`` > 1, or any entry a batching producer sent) is the
messages one after another, each ``size (4) | SingleMessageMetadata | payload``. The
broker never unpacks a batch to store, cache or dispatch it: the cache holds entries,
a consumer on the binary protocol receives the stored bytes as they are, and only the
clients that read messages one by one (:func:`messages_of`) and Key_Shared's key
(:func:`key_of`, from the entry's own metadata as in Pulsar) look inside.

This module knows entries, not the wire they came over: each front end names its
producer and decodes its payloads (the HTTP produce route's base64 decoded straight into
entries is ``broker.http.b64_entries``, on :func:`plain_rows` and :func:`plain_framing`).
"""

from __future__ import annotations

import base64
import itertools
import struct
import zlib
from collections.abc import Sequence
from typing import Any

from crc32c import crc32c

from broker.ledger.position import Position
from broker.pulsar_api import COMPRESSION_NONE, COMPRESSION_ZLIB, MessageMetadata
from broker.pulsar_api import SingleMessageMetadata as _Single

try:  # compiled with the package where a C compiler and x86-64 with SSE4.2 allow
    from broker.ledger import _entries as _compiled
except ImportError:
    _compiled = None  # type: ignore[assignment]
#: the compiled batch walk (absent from a module built before it was added)
_compiled_walk = getattr(_compiled, "walk_plain_batch", None)
#: the compiled plain_fields (absent from a module built before it was added)
_compiled_plain = getattr(_compiled, "plain_fields", None)


MAGIC = b"\x0e\x01"
_U32 = struct.Struct(">I")
_HEAD = struct.Struct(">HII")  # magic, checksum, metadata size
HEAD_SIZE = _HEAD.size
#: producer name of an entry whose caller names none (each front end names its own)
DEFAULT_PRODUCER = "brokerlab"
#: the most a ZLIB payload is inflated to when the caller names no maxMessageSize:
#: Pulsar's default maxMessageSize (see :func:`inflate`)
MAX_INFLATED_BYTES = 5 * 1024 * 1024


class EntryFormatError(ValueError):
    """Bytes that are not an entry in Pulsar's format (or a batch that does not parse)."""


class UnsupportedCompressionError(EntryFormatError):
    """An entry compressed with a codec brokerlab does not decompress (only ZLIB): not
    corrupt, readable by a Pulsar client, but not by the clients that read messages in
    the broker (HTTP, WebSocket)."""


class Entry:
    """A stored entry read back from the ledger. ``data`` is the entry in Pulsar's
    format; ``messages`` (how many messages it holds, 1 for an unbatched entry) is read
    from the metadata on first use and kept, so a cached entry parses it once. Weakly
    referable: the managed ledger's LiveEntries finds the entries held somewhere.

    An entry handed to a consumer whose client reads its messages (an HTTP consumer
    that polls) has its metadata decoded once with ``keep_metadata``, where the count is
    taken, and ``decoded_messages`` builds the messages from it: the metadata lives as
    long as the entry (about 550 bytes; a plain message's :data:`PlainFields` tuple,
    about 160), and is never kept for an entry that only waits in a receiver queue
    nobody polls."""

    __slots__ = ("__weakref__", "_messages", "_metadata", "data", "position")

    def __init__(self, position: Position, data: bytes, messages: int = 0) -> None:
        self.position = position
        self.data = data
        #: messages, once known: from the produce path's check when the cache kept it
        #: (never a count that check refused), else parsed on first use (0 until then)
        self._messages = messages
        self._metadata: Any = None

    @property
    def messages(self) -> int:
        """Messages in the entry (1 for one that cannot be trusted, see ``trusted``).
        O(metadata size) the first time unless the metadata is kept, O(1) after."""
        count = self._messages
        if not count:
            count = self._messages = self._count()
        return count if count > 0 else 1

    @property
    def trusted(self) -> bool:
        """Whether the entry's metadata parses and its batch header is believable
        (:func:`_message_count`); a dispatcher hands over only such entries. Read with
        ``messages`` and kept: O(metadata size) the first time, O(1) after."""
        count = self._messages
        if not count:
            count = self._messages = self._count()
        return count > 0

    def _count(self) -> int:
        metadata = self._metadata
        try:
            if metadata is None:
                metadata = _plain_or_metadata(self.data)
            return _message_count(metadata, self.data)
        except EntryFormatError:
            return UNTRUSTED

    def keep_metadata(self) -> int:
        """Decode the metadata now (if not yet) and keep it for ``decoded_messages``;
        returns ``messages``, which comes with it. O(metadata size) once (about 1.4 us
        through protobuf, 0.5 for a plain message: what ``encode_payloads`` writes is
        read without it and kept as its :data:`PlainFields`), O(1) after. Bytes that are
        not an entry keep nothing (1 message): ``decoded_messages`` raises for them."""
        if self._metadata is None:
            try:
                metadata = _plain_or_metadata(self.data)
            except EntryFormatError:
                return self.messages
            self._metadata = metadata
            self._messages = _message_count(metadata, self.data)
        return self.messages

    def publish_time(self) -> int:
        """The publish time (of its first message, for a batch). Keeps the metadata as
        ``keep_metadata`` does: O(metadata size) once, O(1) after, so an entry handed
        to many consumers is parsed once. 0 for bytes that are not an entry."""
        if self._metadata is None:
            self.keep_metadata()
            if self._metadata is None:
                return 0
        metadata = self._metadata
        return metadata[2] if type(metadata) is tuple else int(metadata.publish_time)

    def origin(self) -> tuple[str, int]:
        """The producer name and sequence id of its metadata (a batch's are its first
        message's), kept as ``publish_time`` keeps the metadata: O(metadata size) once,
        O(1) after. ``("", -1)`` for bytes that are not an entry."""
        if self._metadata is None:
            self.keep_metadata()
            if self._metadata is None:
                return "", -1
        metadata = self._metadata
        if type(metadata) is tuple:
            return metadata[0], metadata[1]
        return str(metadata.producer_name), int(metadata.sequence_id)

    def decoded_messages(self, max_inflated: int = MAX_INFLATED_BYTES) -> list[Message]:
        """``messages_of(self.data)``, without decoding the metadata again when it was
        kept. O(len(data)) (and a ZLIB payload's inflated size, at most
        ``max_inflated``). EntryFormatError for bytes that are not an entry."""
        return messages_of(self.data, self._metadata, max_inflated)

    def __repr__(self) -> str:
        return f"Entry({self.position}, {len(self.data)} bytes)"


class Message:
    """One message of an entry, decoded, for clients that read messages (the HTTP and
    WebSocket consumers). ``batch_index`` is -1 for an unbatched entry, else the
    message's index in the batch of ``batch_size``."""

    __slots__ = (
        "batch_index",
        "batch_size",
        "event_time",
        "key",
        "payload",
        "producer_name",
        "properties",
        "publish_time",
        "sequence_id",
    )

    def __init__(
        self,
        publish_time: int,
        event_time: int,
        key: str | None,
        properties: dict[str, str],
        payload: bytes,
        batch_index: int = -1,
        batch_size: int = 0,
        producer_name: str = "",
        sequence_id: int = 0,
    ) -> None:
        self.publish_time = publish_time
        self.event_time = event_time
        self.key = key
        self.properties = properties
        self.payload = payload
        self.batch_index = batch_index
        self.batch_size = batch_size
        self.producer_name = producer_name
        self.sequence_id = sequence_id


# ---------------------------------------------------------------------- writing


def entry_of(metadata: bytes, payload: bytes) -> bytes:
    """Frame serialized MessageMetadata and a payload as an entry. O(len(payload)): one
    copy and one CRC32C pass (hardware)."""
    size = _U32.pack(len(metadata))
    checksum = crc32c(payload, crc32c(metadata, crc32c(size)))
    return b"".join((_HEAD.pack(0x0E01, checksum, len(metadata)), metadata, payload))


def _metadata(
    publish_time: int,
    event_time: int,
    key: str | None,
    properties: dict[str, str] | None,
    producer_name: str,
    sequence_id: int,
    deliver_at: int | None = None,
) -> Any:
    metadata = MessageMetadata(
        producer_name=producer_name, sequence_id=sequence_id, publish_time=publish_time
    )
    if deliver_at is not None:
        metadata.deliver_at_time = deliver_at
    if event_time:
        metadata.event_time = event_time
    if key is not None:
        metadata.partition_key = key
    if properties:
        for name, value in properties.items():
            metadata.properties.add(key=name, value=value)
    return metadata


def encode_message(
    payload: bytes,
    publish_time: int,
    event_time: int = 0,
    key: str | None = None,
    properties: dict[str, str] | None = None,
    producer_name: str = DEFAULT_PRODUCER,
    sequence_id: int = 0,
    deliver_at: int | None = None,
) -> bytes:
    """One unbatched message as an entry (``deliver_at``: its ``deliver_at_time``, epoch
    ms, for delayed delivery). O(len(payload)); about 2 us plus the copy."""
    metadata = _metadata(
        publish_time, event_time, key, properties, producer_name, sequence_id, deliver_at
    )
    return entry_of(metadata.SerializeToString(), payload)


def _varint(value: int) -> bytes:
    """Protobuf's base-128 varint of a non-negative integer, low group first."""
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


#: sequence ids a plain-metadata table covers (above: protobuf serializes each message)
PLAIN_SEQUENCE_IDS = 4096


class _PlainMetadata:
    """The MessageMetadata of a message with only ``producer_name`` (field 1),
    ``sequence_id`` (2) and ``publish_time`` (3) set, as protobuf serializes it: the
    fields in number order, ``0a len name | 10 varint | 18 varint``. The part up to the
    publish time (the head) depends only on the sequence id; for one producer and one
    length of the publish time's varint, each head's bytes and the entry's metadata
    size are computed once, and so is the CRC32C of ``size | head`` carried over as many
    zero bytes as the publish time's part takes (the tail). CRC32C is affine in the value
    it starts from: ``crc(tail, v) == crc(zeros, v) ^ crc(zeros, 0) ^ crc(tail, 0)`` for
    ``zeros`` of the tail's length, so ``crc(size | head | tail)`` is the row's carried
    value XOR the tail's own CRC, which is one per request: a message costs one CRC call,
    over its payload. Built for sequence ids 0 up to the highest asked, O(1) per message
    after."""

    __slots__ = ("_prefix", "_rows", "_tail_size", "_zeros", "_zeros_crc")

    def __init__(self, producer_name: str, tail_size: int) -> None:
        name = producer_name.encode()
        self._prefix = b"\x0a" + _varint(len(name)) + name + b"\x10"
        self._tail_size = tail_size
        zeros = bytes(tail_size)
        self._zeros = zeros
        self._zeros_crc = crc32c(zeros)
        #: per sequence id: (head, metadata size, CRC32C of ``size | head`` carried over
        #: the tail's length; XOR the tail's CRC32C for ``size | head | tail``'s)
        self._rows: list[tuple[bytes, int, int]] = []

    def rows(self, first: int, count: int) -> list[tuple[bytes, int, int]]:
        """The rows of sequence ids ``first .. first + count - 1``."""
        rows = self._rows
        while len(rows) < first + count:
            head = self._prefix + _varint(len(rows))
            size = len(head) + self._tail_size
            head_crc = crc32c(head, crc32c(_U32.pack(size)))
            rows.append((head, size, crc32c(self._zeros, head_crc) ^ self._zeros_crc))
        return rows[first : first + count]


_plain_metadata: dict[tuple[str, int], _PlainMetadata] = {}


def encode_payloads(
    payloads: Sequence[bytes],
    publish_time: int,
    producer_name: str = DEFAULT_PRODUCER,
    first_sequence_id: int = 0,
) -> list[bytes]:
    """``encode_message(payload, publish_time)`` for every payload (no event time, key
    or properties; sequence ids counting up from ``first_sequence_id``), byte for byte,
    without protobuf: the metadata differs only in the sequence id, so its parts come
    from a :class:`_PlainMetadata` table. O(total payload bytes); per 1 KiB message
    about 0.15 us with the compiled loop (a list of payloads, ``broker.ledger._entries``
    built), 0.31 us with :func:`encode_rows`, against 2.5 us through protobuf."""
    count = len(payloads)
    if not (0 <= first_sequence_id <= PLAIN_SEQUENCE_IDS - count and 0 <= publish_time < 1 << 64):
        return [
            encode_message(payload, publish_time, 0, None, None, producer_name, sequence_id)
            for sequence_id, payload in enumerate(payloads, first_sequence_id)
        ]
    rows, tail, tail_crc = plain_rows(producer_name, first_sequence_id, count, publish_time)
    if _compiled is not None and type(payloads) is list:
        try:
            return _compiled.encode_rows(rows, payloads, tail, tail_crc)
        except TypeError:  # a payload that is not exactly bytes (a bytearray, a view)
            pass
    return encode_rows(rows, payloads, tail, tail_crc)


def plain_rows(
    producer_name: str, first_sequence_id: int, count: int, publish_time: int
) -> tuple[list[tuple[bytes, int, int]], bytes, int]:
    """The :class:`_PlainMetadata` rows of ``count`` messages from ``first_sequence_id``
    (within :data:`PLAIN_SEQUENCE_IDS`), the tail of ``publish_time`` and the tail's
    CRC32C: what :func:`encode_rows` (or a compiled loop that writes the payloads
    itself) frames payloads with. O(count)."""
    tail = b"\x18" + _varint(publish_time)
    table_key = (producer_name, len(tail))
    table = _plain_metadata.get(table_key)
    if table is None:
        if len(_plain_metadata) >= 8:
            _plain_metadata.clear()  # a bound for callers that vary the producer name
        table = _plain_metadata[table_key] = _PlainMetadata(producer_name, len(tail))
    return table.rows(first_sequence_id, count), tail, crc32c(tail)


def encode_rows(
    rows: list[tuple[bytes, int, int]], payloads: Sequence[bytes], tail: bytes, tail_crc: int
) -> list[bytes]:
    """The entries of ``payloads`` from their :class:`_PlainMetadata` rows: the
    per-message loop of :func:`encode_payloads` in Python. ``broker.ledger._entries``
    compiles the same loop (one allocation, three copies and an SSE4.2 CRC a message,
    against a CRC call, a struct pack and a join here); this one is the reference and
    what runs where that module was not built. O(total payload bytes)."""
    pack = _HEAD.pack
    return [
        b"".join((pack(0x0E01, crc32c(payload, carried ^ tail_crc), size), head, tail, payload))
        for (head, size, carried), payload in zip(rows, payloads, strict=True)
    ]


def compiled_encoder() -> bool:
    """Whether :func:`encode_payloads` runs its compiled loop (``broker.ledger._entries``
    imported) on lists of payloads."""
    return _compiled is not None


BatchItem = tuple[bytes, str | None, dict[str, str] | None, int]
"""One message of a batch: payload, key, properties, event time."""


#: varints of 0 .. 16383 (the sizes and sequence ids of most batched messages), built once
_SMALL_VARINTS = [_varint(value) for value in range(1 << 14)]


def _plain_single(payload_size: int, sequence_id: int) -> bytes:
    """The SingleMessageMetadata of a message with only ``payload_size`` (field 3) and
    ``sequence_id`` (8) set, as protobuf serializes it: ``18 varint | 40 varint``. O(1)."""
    small = _SMALL_VARINTS
    size = small[payload_size] if payload_size < len(small) else _varint(payload_size)
    sequence = small[sequence_id] if sequence_id < len(small) else _varint(sequence_id)
    return b"\x18" + size + b"\x40" + sequence


def encode_batch(
    items: Sequence[BatchItem],
    publish_time: int,
    producer_name: str = DEFAULT_PRODUCER,
    sequence_id: int = 0,
) -> bytes:
    """Several messages as one batched entry, as a batching producer builds it: the
    entry's metadata from the first message (its key is the entry's key), each message
    with its SingleMessageMetadata, serialized without protobuf for a message with no
    key, properties or event time (:func:`_plain_single`, byte for byte the same).
    O(total payload bytes): one CRC32C pass over the batch, about 0.5 us a message."""
    if not items:
        raise ValueError("a batch holds at least one message")
    first_key = items[0][1]
    metadata = _metadata(publish_time, 0, first_key, None, producer_name, sequence_id)
    metadata.num_messages_in_batch = len(items)
    metadata.highest_sequence_id = sequence_id + len(items) - 1
    parts: list[bytes] = []
    pack = _U32.pack
    for index, (payload, key, properties, event_time) in enumerate(items, sequence_id):
        if key is None and not properties and not event_time and 0 <= index < 1 << 64:
            encoded = _plain_single(len(payload), index)
        else:
            single = _Single(payload_size=len(payload), sequence_id=index)
            if key is not None:
                single.partition_key = key
            if properties:
                for name, value in properties.items():
                    single.properties.add(key=name, value=value)
            if event_time:
                single.event_time = event_time
            encoded = single.SerializeToString()
        parts += (pack(len(encoded)), encoded, payload)
    return entry_of(metadata.SerializeToString(), b"".join(parts))


#: per payload size, the framing of payload-only batched messages by sequence id (see
#: :func:`plain_framing`); a few sizes, each at most PLAIN_SEQUENCE_IDS rows
_uniform_framing: dict[int, list[bytes]] = {}


def plain_framing(sizes: list[int], first: int) -> list[bytes]:
    """What precedes each payload-only message's payload in a batch: the length of its
    SingleMessageMetadata (u32) and :func:`_plain_single`, for sequence ids from
    ``first``. A batch whose messages all have one size (a producer of fixed-size
    messages) reads them from a table kept per size; any other is computed. O(1) a
    message either way."""
    count = len(sizes)
    size = sizes[0]
    if sizes.count(size) == count and first + count <= PLAIN_SEQUENCE_IDS:
        rows = _uniform_framing.get(size)
        if rows is None:
            if len(_uniform_framing) >= 16:
                _uniform_framing.clear()  # a bound for producers of many sizes
            rows = _uniform_framing[size] = []
        while len(rows) < first + count:
            single = _plain_single(size, len(rows))
            rows.append(_U32.pack(len(single)) + single)
        return rows[first : first + count]
    pack = _U32.pack
    return [
        pack(len(single)) + single
        for single in map(_plain_single, sizes, range(first, first + count))
    ]


def encode_batch_payloads(
    payloads: Sequence[bytes],
    publish_time: int,
    producer_name: str = DEFAULT_PRODUCER,
    sequence_id: int = 0,
) -> bytes:
    """``encode_batch`` of messages that are only a payload (no key, properties or event
    time), byte for byte, without a tuple a message: the framing comes from
    :func:`plain_framing`. O(total payload bytes); about 0.35 us a 1 KiB message of a
    batch of one size against 0.75 through ``encode_batch``. No message or sequence ids
    past protobuf's uint64: ``encode_batch`` decides."""
    count = len(payloads)
    if not (count and sequence_id >= 0 and sequence_id + count <= 1 << 64):
        return encode_batch(
            [(payload, None, None, 0) for payload in payloads],
            publish_time,
            producer_name,
            sequence_id,
        )
    metadata = batch_metadata(count, publish_time, producer_name, sequence_id)
    framing = plain_framing(list(map(len, payloads)), sequence_id)
    body = b"".join(itertools.chain.from_iterable(zip(framing, payloads, strict=True)))
    return entry_of(metadata, body)


def batch_metadata(count: int, publish_time: int, producer_name: str, sequence_id: int) -> bytes:
    """The serialized MessageMetadata of a batch of ``count`` payload-only messages
    (what :func:`encode_batch_payloads` writes, for a loop that frames them itself)."""
    metadata = _metadata(publish_time, 0, None, None, producer_name, sequence_id)
    metadata.num_messages_in_batch = count
    metadata.highest_sequence_id = sequence_id + count - 1
    return metadata.SerializeToString()


# ---------------------------------------------------------------------- reading


def _split(data: bytes) -> tuple[int, int]:
    """(metadata end, metadata size) of an entry, checking its framing (not its checksum:
    stored entries were checked when they came in). O(1)."""
    if len(data) < HEAD_SIZE or not data.startswith(MAGIC):
        raise EntryFormatError("not an entry in Pulsar's format (no magic 0x0e01)")
    size = _U32.unpack_from(data, 6)[0]
    end = HEAD_SIZE + size
    if end > len(data):
        raise EntryFormatError("entry metadata runs past the end of the entry")
    return end, size


PlainFields = tuple[str, int, int, int]
"""What the metadata of a plain message holds (see :class:`_PlainMetadata`), and where
it ends: producer name, sequence id, publish time, the payload's start. A plain tuple
(no protobuf message is one), cheaper to build than a named one."""


#: the values of the varints in _SMALL_VARINTS, by their bytes
_SMALL_VARINT_VALUES = {varint: value for value, varint in enumerate(_SMALL_VARINTS)}
#: producer names and publish times of plain metadata read lately, by their bytes: the
#: messages of one produce request share both (each bounded: cleared when full)
_plain_names: dict[bytes, str] = {}
_plain_times: dict[bytes, int] = {}
_PLAIN_CACHE_SIZE = 1024


#: what :func:`_split` raises, by the code the compiled ``plain_fields`` returns instead
_SPLIT_ERRORS = {
    1: "not an entry in Pulsar's format (no magic 0x0e01)",
    2: "entry metadata runs past the end of the entry",
}


def plain_fields(data: bytes) -> PlainFields | None:
    """The fields of an entry's metadata when its bytes are exactly what
    :class:`_PlainMetadata` writes, ``0a len name | 10 varint | 18 varint`` (a name of
    at most 127 bytes, a sequence id of at most two varint bytes, a publish time of at
    most nine), with nothing after; None for anything else (protobuf then parses it).
    O(metadata size): one call into ``broker.ledger._entries`` where it is built (the
    produce path checks every unbatched SEND with it), else :func:`_plain_fields_py`,
    about 0.5 us against 1.3 us to parse it through protobuf; EntryFormatError for
    bytes that are not an entry."""
    if _compiled_plain is not None and type(data) is bytes:
        fields = _compiled_plain(data)
        if type(fields) is int:
            raise EntryFormatError(_SPLIT_ERRORS[fields])
        return fields
    return _plain_fields_py(data)


def _plain_fields_py(data: bytes) -> PlainFields | None:
    """:func:`plain_fields` in Python: the reference the compiled one is held to."""
    start = HEAD_SIZE
    end, _ = _split(data)
    if end - start < 6 or data[start] != 0x0A or data[start + 1] >= 0x80:
        return None
    name_end = start + 2 + data[start + 1]
    if name_end + 4 > end or data[name_end] != 0x10:
        return None
    position = name_end + 1
    if data[position] < 0x80:
        sequence_id = _SMALL_VARINT_VALUES.get(data[position : position + 1])
        position += 1
    else:
        sequence_id = _SMALL_VARINT_VALUES.get(data[position : position + 2])
        position += 2
    if sequence_id is None or position + 1 >= end or data[position] != 0x18:
        return None
    tail = data[position + 1 : end]
    publish_time = _plain_times.get(tail)
    if publish_time is None:
        publish_time = _varint_value(tail)
        if publish_time is None:
            return None
        if len(_plain_times) >= _PLAIN_CACHE_SIZE:
            _plain_times.clear()
        _plain_times[tail] = publish_time
    raw_name = data[start + 2 : name_end]
    name = _plain_names.get(raw_name)
    if name is None:
        try:
            name = raw_name.decode()
        except UnicodeDecodeError:
            return None
        if len(_plain_names) >= _PLAIN_CACHE_SIZE:
            _plain_names.clear()
        _plain_names[raw_name] = name
    return name, sequence_id, publish_time, end


def _varint_value(raw: bytes) -> int | None:
    """The value of ``raw`` when it is exactly one varint of one to nine bytes."""
    last = len(raw) - 1
    if not 0 <= last < 9:
        return None
    value = shift = 0
    for index, byte in enumerate(raw):
        if (byte < 0x80) != (index == last):
            return None
        value |= (byte & 0x7F) << shift
        shift += 7
    return value


#: ``Entry.messages``'s mark of an entry that cannot be trusted (see :func:`_message_count`)
UNTRUSTED = -1
#: the fewest bytes a message of a batch takes: its size (4) and a SingleMessageMetadata
#: of only ``payload_size`` (a tag and a one-byte varint), for an empty payload
MIN_BATCH_MESSAGE_BYTES = 6


def _message_count(metadata: Any, data: bytes) -> int:
    """Messages in the entry ``data`` of this PlainFields (1) or MessageMetadata (1
    without ``num_messages_in_batch``); UNTRUSTED for a batch header that cannot be
    true: a count below 1, or more messages than the batch's bytes can hold (at least
    :data:`MIN_BATCH_MESSAGE_BYTES` each, counted in the largest of the payload, its
    ``uncompressed_size`` and a chunked message's ``total_chunk_msg_size``, so that a
    compressed, encrypted or chunked batch is not walked). A batch's messages are walked
    only on the produce path (:func:`check_entry`). O(1) beyond the metadata."""
    if type(metadata) is tuple or not metadata.HasField("num_messages_in_batch"):
        return 1
    count: int = metadata.num_messages_in_batch
    if count < 1:
        return UNTRUSTED
    end, _ = _split(data)
    room = max(len(data) - end, metadata.uncompressed_size, metadata.total_chunk_msg_size)
    return count if count * MIN_BATCH_MESSAGE_BYTES <= room else UNTRUSTED


def _plain_or_metadata(data: bytes) -> Any:
    """PlainFields where :func:`plain_fields` reads them, else the MessageMetadata."""
    plain = plain_fields(data)
    return metadata_of(data) if plain is None else plain


def metadata_of(data: bytes) -> Any:
    """The entry's MessageMetadata. O(metadata size), about 1 us. EntryFormatError when
    it does not parse, required fields included (``producer_name``, ``sequence_id``,
    ``publish_time``: Pulsar's parser refuses a metadata without them, and protobuf's
    ``FromString`` does not check)."""
    end, _ = _split(data)
    try:
        metadata = MessageMetadata.FromString(data[HEAD_SIZE:end])
    except Exception as error:  # protobuf's DecodeError
        raise EntryFormatError(f"bad message metadata: {error}") from None
    if not metadata.IsInitialized():
        raise EntryFormatError("bad message metadata: required fields missing")
    return metadata


def checksum_ok(data: bytes) -> bool:
    """Whether the entry's CRC32C matches its contents. O(len(data))."""
    if len(data) < HEAD_SIZE or data[:2] != MAGIC:
        return False
    return crc32c(memoryview(data)[6:]) == _U32.unpack_from(data, 2)[0]


def sent_payload_size(data: bytes) -> int | None:
    """:func:`payload_size` of an entry whose checksum matches (:func:`checksum_ok`),
    None if it does not: the produce path's two looks at a sent entry in one call.
    O(len(data))."""
    if (
        len(data) < HEAD_SIZE
        or data[:2] != MAGIC
        or crc32c(memoryview(data)[6:]) != _U32.unpack_from(data, 2)[0]
    ):
        return None
    return len(data) - HEAD_SIZE - _U32.unpack_from(data, 6)[0]


def payload_size(data: bytes) -> int:
    """Bytes of an entry after its metadata: what a client counts against the broker's
    maxMessageSize (compressed; a batch's whole body). Its framing is not checked (0 for
    bytes too short to be an entry). O(1)."""
    if len(data) < HEAD_SIZE:
        return 0
    return len(data) - HEAD_SIZE - _U32.unpack_from(data, 6)[0]


def _key(metadata: Any) -> str | None:
    return metadata.partition_key if metadata.HasField("partition_key") else None


def _properties(metadata: Any) -> dict[str, str]:
    properties = metadata.properties
    # most messages have none: the test is cheaper than an empty comprehension
    return {item.key: item.value for item in properties} if properties else {}


def inflate(payload: bytes, declared: int, limit: int) -> bytes:
    """A ZLIB payload inflated into its declared ``uncompressed_size``, as Pulsar's
    codecs inflate into a buffer of that size: EntryFormatError ("bad ZLIB payload")
    when it does not inflate, inflates to more or to less, or declares more than
    ``limit`` (the broker's maxMessageSize: what a client may send uncompressed).
    Never more than ``declared`` bytes are made, so a payload that would inflate to
    gigabytes (a ZLIB bomb of a few MiB) costs what it declares. O(declared)."""
    if declared > limit:
        raise EntryFormatError(
            f"bad ZLIB payload: its uncompressed_size {declared} is over maxMessageSize {limit}"
        )
    inflater = zlib.decompressobj()
    try:
        # max_length 0 would mean no limit: an empty payload must inflate to nothing
        inflated = inflater.decompress(payload, declared or 1)
    except zlib.error as error:
        raise EntryFormatError(f"bad ZLIB payload: {error}") from None
    if len(inflated) != declared or not inflater.eof:
        raise EntryFormatError(
            f"bad ZLIB payload: it does not inflate to its uncompressed_size {declared}"
        )
    return inflated


def _payload(metadata: Any, data: bytes, start: int, max_inflated: int) -> bytes:
    payload = data[start:]
    compression = metadata.compression
    if compression == COMPRESSION_NONE:
        return payload
    if compression == COMPRESSION_ZLIB:
        return inflate(payload, metadata.uncompressed_size, max_inflated)
    raise UnsupportedCompressionError(
        f"compression {compression} is not readable over HTTP (only none and ZLIB); "
        "consume it with a Pulsar client"
    )


def _plain_single_fields(raw: bytes) -> tuple[int, int] | None:
    """``(payload_size, sequence_id)`` when ``raw`` is a SingleMessageMetadata with
    exactly those two fields as protobuf writes them (``18 varint 40 varint``, what
    :func:`_plain_single` writes and a batching client writes for a message with no key,
    properties or event time); None for anything else, which protobuf then parses.
    O(len(raw)), about 0.5 us against 1.7 us to parse and read it through protobuf."""
    end = len(raw)
    if end < 4 or raw[0] != 0x18:
        return None
    size = shift = 0
    index = 1
    while True:  # payload_size's varint
        if index >= end or shift > 63:
            return None
        byte = raw[index]
        index += 1
        size |= (byte & 0x7F) << shift
        if byte < 0x80:
            break
        shift += 7
    if index >= end or raw[index] != 0x40:
        return None
    index += 1
    sequence = shift = 0
    while True:  # sequence_id's varint, which must end the bytes
        if index >= end or shift > 63:
            return None
        byte = raw[index]
        index += 1
        sequence |= (byte & 0x7F) << shift
        if byte < 0x80:
            return (size, sequence) if index == end else None
        shift += 7


def messages_of(
    data: bytes, metadata: Any = None, max_inflated: int = MAX_INFLATED_BYTES
) -> list[Message]:
    """Every message of an entry: one for an unbatched entry, each message of a batch
    (compacted-out ones skipped) with its batch index. ``metadata``: the entry's
    MessageMetadata or PlainFields if already decoded (see ``Entry.keep_metadata``).
    O(len(data))."""
    if metadata is None:
        metadata = _plain_or_metadata(data)
    if type(metadata) is tuple:
        producer, sequence_id, publish_time, end = metadata
        return [Message(publish_time, 0, None, {}, data[end:], -1, 0, producer, sequence_id)]
    end, _ = _split(data)
    publish_time = metadata.publish_time
    producer = metadata.producer_name
    sequence_id = metadata.sequence_id
    payload = _payload(metadata, data, end, max_inflated)
    if not metadata.HasField("num_messages_in_batch"):
        return [
            Message(
                publish_time,
                metadata.event_time,
                _key(metadata),
                _properties(metadata),
                payload,
                -1,
                0,
                producer,
                sequence_id,
            )
        ]
    count = _message_count(metadata, data)
    if count == UNTRUSTED:
        raise EntryFormatError(
            f"num_messages_in_batch {metadata.num_messages_in_batch} cannot be true of "
            f"a batch of {len(data)} bytes"
        )
    messages = []
    offset = 0
    try:
        for index in range(count):
            size = _U32.unpack_from(payload, offset)[0]
            offset += 4
            raw = payload[offset : offset + size]
            offset += size
            plain = _plain_single_fields(raw)
            if plain is not None:
                payload_size, message_sequence = plain
                body = payload[offset : offset + payload_size]
                if len(body) != payload_size:
                    raise EntryFormatError("batch message runs past the end of the entry")
                offset += payload_size
                messages.append(
                    Message(
                        publish_time, 0, None, {}, body, index, count, producer, message_sequence
                    )
                )
                continue
            single = _Single.FromString(raw)
            body = payload[offset : offset + single.payload_size]
            if len(body) != single.payload_size:
                raise EntryFormatError("batch message runs past the end of the entry")
            offset += single.payload_size
            if single.compacted_out:
                continue
            messages.append(
                Message(
                    publish_time,
                    single.event_time,
                    single.partition_key if single.HasField("partition_key") else None,
                    _properties(single),
                    body,
                    index,
                    count,
                    producer,
                    single.sequence_id if single.HasField("sequence_id") else sequence_id + index,
                )
            )
    except EntryFormatError:
        raise
    except Exception as error:  # struct.error past the end, protobuf's DecodeError
        raise EntryFormatError(f"bad batch: {error}") from None
    return messages


def check_entry(data: bytes) -> int:
    """The messages of an entry a producer sent, once it is shown to be trustworthy:
    its metadata parses (required fields included), its batch header is believable
    (:func:`_message_count`), and a batch whose bytes are plain (not compressed,
    encrypted or a chunk) holds the messages its header counts, each a size, a
    SingleMessageMetadata that parses and a payload within the entry (bytes after the
    last message are let be, as Pulsar's clients read a batch). EntryFormatError naming
    what is wrong otherwise. The checksum is the caller's (``checksum_ok``).
    O(metadata size) for an unbatched entry; O(messages) for a batch, about 0.3 us a
    message of the plain kind a client writes (payload size and sequence id only),
    1.5 us through protobuf otherwise."""
    metadata = _plain_or_metadata(data)
    if type(metadata) is tuple or not metadata.HasField("num_messages_in_batch"):
        return 1
    count = _message_count(metadata, data)
    claimed = metadata.num_messages_in_batch
    if count == UNTRUSTED:
        raise EntryFormatError(
            f"num_messages_in_batch {claimed} cannot be true of a batch of "
            f"{len(data)} bytes (at least 1, at most one message per "
            f"{MIN_BATCH_MESSAGE_BYTES} bytes)"
        )
    if (
        metadata.compression != COMPRESSION_NONE
        or metadata.HasField("encryption_param")
        or metadata.HasField("num_chunks_from_msg")
    ):
        return count  # its messages are readable only once decompressed, decrypted, joined
    _walk_batch(data, _split(data)[0], count)
    return count


def _walk_batch(data: bytes, offset: int, count: int) -> None:
    """EntryFormatError unless ``count`` batch messages start at ``offset``. O(count):
    plain messages (:func:`_plain_single`'s metadata) by the compiled walk where it is
    built, about 10 ns each; any other message here, through protobuf."""
    end = len(data)
    walk = _compiled_walk
    index = 0
    while index < count:
        if walk is not None:
            walked, offset = walk(data, offset, count - index)
            index += walked
            if index == count:
                return
        if offset + 4 > end:
            raise EntryFormatError(f"the batch holds {index} messages, its metadata says {count}")
        size = _U32.unpack_from(data, offset)[0]
        offset += 4
        raw = data[offset : offset + size]
        offset += size
        if offset > end:
            raise EntryFormatError(f"batch message {index}'s metadata runs past the entry")
        fields = _plain_single_fields(raw)
        if fields is not None:
            payload_size = fields[0]
        else:
            try:
                single = _Single.FromString(raw)
            except Exception as error:  # protobuf's DecodeError
                raise EntryFormatError(
                    f"batch message {index}'s SingleMessageMetadata does not parse: {error}"
                ) from None
            if not single.IsInitialized():
                raise EntryFormatError(
                    f"batch message {index}'s SingleMessageMetadata has no payload_size"
                )
            payload_size = single.payload_size
        offset += payload_size
        if payload_size < 0 or offset > end:
            raise EntryFormatError(f"batch message {index}'s payload runs past the entry")
        index += 1


def decode_message(data: bytes) -> Message:
    """The single message of an unbatched entry (the first of a batch). EntryFormatError
    if the bytes are not an entry."""
    return messages_of(data)[0]


def key_of(data: bytes) -> bytes | None:
    """The entry's sticky key for Key_Shared, from its metadata as Pulsar resolves it:
    the ordering key, else the partition key (base64-decoded when flagged), else
    ``producer-sequence``; None for bytes that are not an entry. O(metadata size); a
    plain message's (no keys) without protobuf."""
    try:
        metadata = _plain_or_metadata(data)
    except EntryFormatError:
        return None
    if type(metadata) is tuple:
        return f"{metadata[0]}-{metadata[1]}".encode()
    if metadata.HasField("ordering_key"):
        return bytes(metadata.ordering_key)
    if metadata.HasField("partition_key"):
        key: str = metadata.partition_key
        if metadata.partition_key_b64_encoded:
            return base64.b64decode(key)
        return key.encode()
    return f"{metadata.producer_name}-{metadata.sequence_id}".encode()


#: the tag of MessageMetadata's ``deliver_at_time`` (field 19, varint) as protobuf writes it
_DELIVER_AT_TAG = b"\x98\x01"


def deliver_at_of(data: bytes) -> int | None:
    """The entry's ``deliver_at_time`` (epoch ms a delayed message is due), None when it
    has none or the bytes are not an entry. The metadata is parsed only when its bytes
    hold the field's tag, so an entry without it (nearly all) costs one ``find`` over its
    metadata: O(metadata size) in C, no allocation. A batch carries one deliver-at time,
    its metadata's (a Pulsar client never batches delayed messages)."""
    if len(data) < HEAD_SIZE or not data.startswith(MAGIC):
        return None
    end = HEAD_SIZE + _U32.unpack_from(data, 6)[0]
    if data.find(_DELIVER_AT_TAG, HEAD_SIZE, end) < 0:
        return None
    try:
        metadata = metadata_of(data)
    except EntryFormatError:
        return None
    return int(metadata.deliver_at_time) if metadata.HasField("deliver_at_time") else None


def publish_time_of(data: bytes) -> int:
    """The publish time of an entry. O(metadata size)."""
    metadata = _plain_or_metadata(data)
    return metadata[2] if type(metadata) is tuple else int(metadata.publish_time)
