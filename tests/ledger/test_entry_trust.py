"""Whether an entry can be trusted: ``check_entry`` (the produce path's check of what a
client built) and ``Entry.trusted`` (the dispatcher's, O(1) beyond the metadata)."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.ledger import entry as entry_module
from broker.ledger.entry import (
    Entry,
    EntryFormatError,
    check_entry,
    encode_batch,
    encode_batch_payloads,
    encode_message,
    entry_of,
    messages_of,
)
from broker.ledger.position import Position
from broker.pulsar_api import COMPRESSION_ZLIB, MessageMetadata
from tests.protocol.raw import broken_batch_message, framed, lying_batch, unparsable_metadata

POISON = {
    "count 2**31 - 1": lying_batch(b"lie", 1, 2**31 - 1),
    "count 0": lying_batch(b"lie", 1, 0),
    "count -1": lying_batch(b"lie", 1, -1),
    "count 2 for one message": lying_batch(b"lie", 1, 2),
    "metadata that does not parse": unparsable_metadata(b"garbled"),
    "metadata without its required fields": framed(b"", b"payload"),
}


def stored(data: bytes) -> Entry:
    return Entry(Position(3, 1), data)


@pytest.mark.parametrize("name", list(POISON), ids=list(POISON))
def test_an_entry_that_cannot_be_trusted_is_refused_and_not_trusted(name: str) -> None:
    data = POISON[name]
    with pytest.raises(EntryFormatError):
        check_entry(data)
    poison = stored(data)
    assert not poison.trusted
    assert poison.messages == 1  # never the count it claims (permits, stats)
    with pytest.raises(EntryFormatError):
        poison.decoded_messages()


def test_a_batch_message_whose_metadata_does_not_parse_is_refused_at_produce() -> None:
    data = broken_batch_message(b"half", 1)
    with pytest.raises(EntryFormatError, match="batch message 1"):
        check_entry(data)
    # its header is plausible for its size: the dispatcher lets it by, decoding fails
    assert stored(data).trusted
    with pytest.raises(EntryFormatError):
        messages_of(data)


items = st.lists(
    st.tuples(
        st.binary(max_size=40),
        st.none() | st.text(max_size=5),
        st.none() | st.dictionaries(st.text(max_size=3), st.text(max_size=3), max_size=2),
        st.integers(0, 2**40),
    ),
    min_size=1,
    max_size=40,
)


@settings(max_examples=150, deadline=None)
@given(items)
def test_every_batch_the_broker_builds_passes_with_its_count(batch: list) -> None:  # type: ignore[type-arg]
    data = encode_batch(batch, 1_700_000_000_000, "p", 5)
    assert check_entry(data) == len(batch)
    assert stored(data).trusted and stored(data).messages == len(batch)


def test_unbatched_and_payload_only_entries_pass() -> None:
    assert check_entry(encode_message(b"", 1)) == 1
    assert check_entry(encode_message(b"x", 1, key="k", properties={"a": "b"})) == 1
    assert check_entry(encode_batch_payloads([b""] * 1000, 1)) == 1000


def test_a_compressed_batch_is_bounded_by_its_uncompressed_size_not_walked() -> None:
    metadata = MessageMetadata(
        producer_name="p",
        sequence_id=0,
        publish_time=1,
        num_messages_in_batch=100,
        compression=COMPRESSION_ZLIB,
        uncompressed_size=600,
    )
    data = entry_of(metadata.SerializeToString(), b"not inflated here")
    assert check_entry(data) == 100
    metadata.num_messages_in_batch = 101  # 6 bytes a message at the least
    assert not stored(entry_of(metadata.SerializeToString(), b"x")).trusted


@settings(max_examples=200, deadline=None)
@given(items, st.data())
def test_the_compiled_walk_judges_every_cut_batch_as_the_python_one(
    batch: list,  # type: ignore[type-arg]
    data: st.DataObject,
) -> None:
    """A batch cut short, or with a byte changed, is judged the same with and without
    the compiled walk of plain messages."""
    whole = encode_batch(batch, 1, "p", 0)
    mutated = bytearray(whole[: data.draw(st.integers(20, len(whole)))])
    if data.draw(st.booleans()):
        at = data.draw(st.integers(10, len(mutated) - 1))
        mutated[at] = data.draw(st.integers(0, 255))
    size = struct.unpack_from(">I", mutated, 6)[0]
    if 10 + size > len(mutated):
        return
    verdicts = []
    compiled = entry_module._compiled_walk
    for walk in (compiled, None):
        entry_module._compiled_walk = walk
        try:
            verdicts.append(check_entry(bytes(mutated)))
        except EntryFormatError:
            verdicts.append(-1)
        finally:
            entry_module._compiled_walk = compiled
    assert verdicts[0] == verdicts[1]
