"""The WebSocket API's wire formats: message ids travel as base64 of the serialized
``MessageIdData``, as Pulsar's clients write them (a partition's and a batch's message
carry their index); times are ISO 8601 strings (UTC), as Pulsar formats them, and a
producer's ``eventTime`` is read back from one.
"""

from __future__ import annotations

import binascii
import datetime
import re
from typing import Any

from broker.dispatch.names import TopicName
from broker.http.b64 import decode_base64_strict, encode_base64
from broker.ledger.position import Position
from broker.pulsar_api import MessageIdData
from broker.session.message_ids import MAX_INT64

_PARTITION = re.compile(r"-partition-([0-9]{1,9})\Z")


def iso_time(epoch_ms: int) -> str:
    """Epoch milliseconds as Pulsar's WebSocket API writes times: ISO 8601 with an
    offset (here always UTC, ``Z``)."""
    seconds, millis = divmod(epoch_ms, 1000)
    moment = datetime.datetime.fromtimestamp(seconds, datetime.UTC)
    return f"{moment:%Y-%m-%dT%H:%M:%S}.{millis:03d}Z"


_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


def parse_event_time(value: object) -> int:
    """A producer's ``eventTime``: ISO 8601 with an offset as Pulsar reads it, or (a
    brokerlab extension) epoch milliseconds. ValueError otherwise."""
    if isinstance(value, bool):
        raise ValueError("eventTime must be an ISO 8601 time or epoch milliseconds")
    if isinstance(value, int):
        millis = value
    elif isinstance(value, str):
        moment = datetime.datetime.fromisoformat(value)
        if moment.tzinfo is None:
            raise ValueError(f"eventTime {value!r} has no offset (e.g. Z or +02:00)")
        millis = (moment - _EPOCH) // datetime.timedelta(milliseconds=1)
    else:
        raise ValueError("eventTime must be an ISO 8601 time or epoch milliseconds")
    if not 0 <= millis <= MAX_INT64:
        raise ValueError(f"eventTime {value!r} is before 1970 or too far ahead")
    return millis


def partition_index(name: TopicName) -> int:
    """The partition a topic name is (``...-partition-N``), else -1."""
    match = _PARTITION.search(name.local_name)
    return int(match[1]) if match else -1


_U64 = (1 << 64) - 1


def encode_message_id(position: Position, batch_index: int, batch_size: int, partition: int) -> str:
    """A message id as Pulsar's clients serialize it (``MessageId.toByteArray``), in
    base64: a batch's message carries its index and the batch's size."""
    # -1:-1 (a duplicate's) as the uint64s Pulsar's Java writes for -1
    data = MessageIdData(ledgerId=position.ledger_id & _U64, entryId=position.entry_id & _U64)
    if partition >= 0:
        data.partition = partition
    if batch_index >= 0:
        data.batch_index = batch_index
        data.batch_size = batch_size
    else:
        data.batch_size = 0
    return encode_base64(data.SerializeToString())


def decode_message_id(value: object) -> Any:
    """A base64 ``MessageIdData``; ValueError if it is not one."""
    if not isinstance(value, str):
        raise ValueError("messageId must be a base64 string")
    try:
        raw = decode_base64_strict(value)
    except (binascii.Error, ValueError):
        raise ValueError("messageId is not valid base64") from None
    try:
        data = MessageIdData.FromString(raw)
    except Exception:  # protobuf's DecodeError
        raise ValueError("messageId is not a serialized MessageIdData") from None
    if not (data.HasField("ledgerId") and data.HasField("entryId")):
        raise ValueError("messageId lacks a ledger id or an entry id")
    return data
