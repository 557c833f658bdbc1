"""Seek with the official client, by message id and by publish time, for readers and
consumers, mid-stream and after reading to the end, batched and not.

What the client sees is Pulsar's: the broker closes the subscription's consumers, resets
the cursor, then answers; the client, closed during its seek, resubscribes from the seek
position and drops what is not after it (by id: the message sought is not read again,
unless the reader is inclusive; by time: from the first message published at or after
the time)."""

from __future__ import annotations

from typing import Any

import pulsar
import pytest

from tests.harness import new_topic, persistent

pytestmark = pytest.mark.slow

COUNT = 5
#: a deadline on each read, not a wait: the next message comes at once or never
READ_MS = 20_000
#: how long "nothing more" is looked for: a message that was to come would come at once
#: (the broker dispatches what it has as soon as the client resubscribed)
NOTHING_MS = 200


def produce(client: pulsar.Client, topic: str, batched: bool) -> None:
    """m0..m4, one batch or five entries."""
    producer = client.create_producer(
        topic,
        batching_enabled=batched,
        batching_max_messages=COUNT,
        batching_max_publish_delay_ms=60_000,
    )
    for index in range(COUNT):
        producer.send_async(f"m{index}".encode(), None)
    producer.flush()
    producer.close()


class Reading:
    """A Reader or a Consumer behind one interface: ``next`` returns the next message
    or None when nothing comes."""

    def __init__(self, client: pulsar.Client, topic: str, kind: str) -> None:
        self.kind = kind
        if kind == "reader":
            self.handle: Any = client.create_reader(topic, pulsar.MessageId.earliest)
        else:
            self.handle = client.subscribe(
                topic, "seeker", initial_position=pulsar.InitialPosition.Earliest
            )

    def next(self, timeout_ms: int = READ_MS) -> pulsar.Message | None:
        try:
            if self.kind == "reader":
                return self.handle.read_next(timeout_ms)
            message = self.handle.receive(timeout_ms)
        except pulsar.Timeout:
            return None
        self.handle.acknowledge(message)
        return message

    def read(self, count: int) -> list[pulsar.Message]:
        got = []
        for _ in range(count):
            message = self.next()
            assert message is not None, f"only {len(got)} of {count} messages came"
            got.append(message)
        return got

    def seek(self, target: Any) -> None:
        self.handle.seek(target)


def texts(messages: list[pulsar.Message]) -> list[str]:
    return [message.data().decode() for message in messages]


@pytest.mark.parametrize("batched", [False, True], ids=["unbatched", "batched"])
@pytest.mark.parametrize("read_first", [3, COUNT], ids=["mid-stream", "after-the-end"])
@pytest.mark.parametrize("kind", ["reader", "consumer"])
def test_seek_by_message_id_reads_on_after_the_message(
    client: pulsar.Client, kind: str, read_first: int, batched: bool
) -> None:
    topic = persistent(new_topic("seek-id"))
    produce(client, topic, batched)
    reading = Reading(client, topic, kind)
    first = reading.read(read_first)
    assert texts(first) == [f"m{i}" for i in range(read_first)]

    reading.seek(first[1].message_id())
    assert texts(reading.read(COUNT - 2)) == [f"m{i}" for i in range(2, COUNT)]
    assert reading.next(NOTHING_MS) is None

    # and back again, to the first message
    reading.seek(first[0].message_id())
    assert texts(reading.read(COUNT - 1)) == [f"m{i}" for i in range(1, COUNT)]


@pytest.mark.parametrize("batched", [False, True], ids=["unbatched", "batched"])
@pytest.mark.parametrize("read_first", [3, COUNT], ids=["mid-stream", "after-the-end"])
@pytest.mark.parametrize("kind", ["reader", "consumer"])
def test_seek_by_time_reads_from_the_first_message_published_then(
    client: pulsar.Client, kind: str, read_first: int, batched: bool
) -> None:
    topic = persistent(new_topic("seek-time"))
    produce(client, topic, batched)
    reading = Reading(client, topic, kind)
    first = reading.read(read_first)
    times = [message.publish_timestamp() for message in first]

    target = times[1]
    reading.seek(target)
    # a batch's messages share its publish time: the whole batch comes again
    expected = [f"m{i}" for i in range(COUNT) if i >= read_first or times[i] >= target]
    assert texts(reading.read(len(expected))) == expected
    assert reading.next(NOTHING_MS) is None

    reading.seek(0)  # before everything
    assert texts(reading.read(COUNT)) == [f"m{i}" for i in range(COUNT)]
