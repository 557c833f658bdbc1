"""``Connection.data_received`` splits what arrives into frames however the bytes are cut:
every command with its entry, in order, once; a frame cut anywhere (inside its size, its
command or its entry) waits for the rest; bad framing closes the connection with its
reason. A unit test of the framing alone (the commands' handling is stubbed), so it can
try many cuts; tests/protocol/test_bad_frames.py does the same against a served broker.
"""

from __future__ import annotations

import random
from types import SimpleNamespace
from typing import Any

import pytest

from broker.protocol.connection import FRAMES_PER_TURN, Connection
from broker.protocol.frames import (
    CUT_ENTRIES_MAX_BYTES,
    FrameError,
    command_frame,
    payload_frame_head,
)
from broker.protocol.server import READ_BUFFER_BYTES
from broker.protocol.throttle import BUSY
from broker.pulsar_api import BaseCommand, Type

MAX_FRAME = 64 * 1024


def _send(sequence_id: int, entry: bytes) -> bytes:
    command = BaseCommand(type=Type.SEND)
    command.send.producer_id = 7
    command.send.sequence_id = sequence_id
    return payload_frame_head(command, len(entry)) + entry


def _ping() -> bytes:
    return command_frame(BaseCommand(type=Type.PING))


class Framing:
    """A Connection with only what ``data_received`` touches; records what it handles."""

    def __init__(self) -> None:
        connection = Connection.__new__(Connection)
        read_buffer = bytearray(READ_BUFFER_BYTES)
        connection.server = SimpleNamespace(  # type: ignore[assignment]
            read_buffer=read_buffer, read_view=memoryview(read_buffer), cut_entry_bytes=0
        )
        connection._cut = connection._whole = None
        connection._parts = []
        connection._have = 0
        connection._needed = 0
        connection._max_frame = MAX_FRAME
        connection.closed = False
        connection._heard = False
        connection._transport_paused = False
        connection._pause_unwritable = True
        connection._held = None
        connection._held_at = 0
        connection._turn_frames = 0
        connection._turn_end_scheduled = False
        #: callbacks for the next turn of the loop (``call_soon``), run by ``next_turn``
        self.soon: list[Any] = []
        connection._loop = SimpleNamespace(call_soon=self.soon.append)  # type: ignore[assignment]
        #: reads are off (``throttle``)
        self.reads_off: set[int] = set()

        def throttle(reason: int, on: bool) -> None:
            if on:
                self.reads_off.add(reason)
                connection._throttled |= reason
            else:
                self.reads_off.discard(reason)
                connection._throttled &= ~reason

        connection._throttled = 0
        connection.throttle = throttle  # type: ignore[method-assign]
        self.handled: list[tuple[int, int | None, bytes]] = []
        self.aborted: list[str] = []
        #: sequence ids of SENDs whose handling breaks the protocol
        self.refused: set[int] = set()

        #: sequence ids of SENDs whose answer passes the output's high water mark
        self.fill_output: set[int] = set()

        def handle(command: Any, payload: bytes) -> None:
            sequence = command.send.sequence_id if command.type == Type.SEND else None
            if sequence in self.refused:  # as the connection refuses a bad SEND
                raise FrameError(f"SEND {sequence} refused")
            self.handled.append((command.type, sequence, payload))
            if sequence in self.fill_output:  # as pause_writing does
                connection._transport_paused = True

        def abort(reason: str) -> None:
            self.aborted.append(reason)
            connection.closed = True

        connection._handle = handle  # type: ignore[method-assign]
        connection.abort = abort  # type: ignore[method-assign]
        self.connection = connection

    def next_turn(self) -> None:
        """Run what was scheduled for the next turn of the loop."""
        soon, self.soon[:] = list(self.soon), []
        for callback in soon:
            callback()

    def feed(self, data: bytes, cuts: list[int]) -> None:
        start = 0
        for cut in [*sorted(cuts), len(data)]:
            if self.connection.closed:
                return  # a closed transport delivers nothing more
            self.connection.data_received(data[start:cut])
            start = cut


def _stream(rng: random.Random) -> tuple[bytes, list[tuple[int, int | None, bytes]]]:
    frames, expected = [], []
    for sequence in range(40):
        if sequence % 7 == 3:
            frames.append(_ping())
            expected.append((Type.PING, None, b""))
            continue
        entry = b"\x0e\x01" + rng.randbytes(rng.choice((0, 1, 5, 300, 5000, 40_000)))
        frames.append(_send(sequence, entry))
        expected.append((Type.SEND, sequence, entry))
    return b"".join(frames), expected


@pytest.mark.parametrize("seed", range(20))
def test_every_frame_is_handled_once_in_order_however_the_bytes_are_cut(seed: int) -> None:
    """Odd seeds with the server's cut entries at CUT_ENTRIES_MAX_BYTES already (other
    connections'): every cut frame then keeps its parts."""
    rng = random.Random(seed)
    data, expected = _stream(rng)
    cuts = rng.sample(range(1, len(data)), k=rng.choice((1, 10, 100, 1000)))
    framing = Framing()
    server = framing.connection.server
    server.cut_entry_bytes = spent = CUT_ENTRIES_MAX_BYTES if seed % 2 else 0
    framing.feed(data, cuts)
    assert framing.aborted == []
    assert framing.handled == expected
    assert not framing.connection._parts and framing.connection._cut is None  # nothing left
    assert server.cut_entry_bytes == spent


@pytest.mark.parametrize("seed", range(10))
def test_frames_after_the_output_passes_its_mark_wait_and_are_handled_once_in_order(
    seed: int,
) -> None:
    """pulsarChannelPauseReceivingRequestsIfUnwritable: once a frame's answer takes the
    output over the high water mark, the frames after it (already received, or cut)
    wait unparsed; once the output drains, they are handled, each once, in order."""
    rng = random.Random(seed)
    data, expected = _stream(rng)
    cuts = rng.sample(range(1, len(data)), k=rng.choice((1, 10, 100)))
    framing = Framing()
    sends = [sequence for kind, sequence, _ in expected if kind == Type.SEND]
    framing.fill_output = set(rng.sample(sends, k=5))
    connection = framing.connection
    start = 0
    for cut in [*sorted(cuts), len(data)]:
        connection.data_received(data[start:cut])
        start = cut
        while connection._transport_paused:  # the client reads: the output drains
            last = framing.handled[-1][1]
            assert last in framing.fill_output, "handled on past the mark"
            framing.fill_output.discard(last)
            connection._transport_paused = False
            connection._parse_held()
    assert framing.aborted == []
    assert framing.handled == expected
    assert not connection._parts and connection._cut is None


def test_a_turn_of_the_loop_handles_a_share_of_frames_and_the_rest_waits_unread() -> None:
    """One connection's flood of cheap commands (300,000 ACKs held the loop 2.7 s): a
    turn handles FRAMES_PER_TURN frames, the rest waits with reads off, and each next
    turn handles the next share, in order, until none is left and reads are back on."""
    count = 3 * FRAMES_PER_TURN + 10
    framing = Framing()
    framing.feed(b"".join(_send(n, b"\x0e\x01") for n in range(count)), [])
    shares = [len(framing.handled)]
    while framing.soon:
        assert framing.reads_off == ({BUSY} if shares[-1] < count else set())
        framing.next_turn()
        shares.append(len(framing.handled))
    assert shares == [FRAMES_PER_TURN, 2 * FRAMES_PER_TURN, 3 * FRAMES_PER_TURN, count, count]
    assert framing.handled == [(Type.SEND, n, b"\x0e\x01") for n in range(count)]
    assert framing.reads_off == set()
    assert framing.connection._held is None and not framing.connection._parts


def test_bytes_one_at_a_time_give_every_frame() -> None:
    entries = [b"\x0e\x01" + bytes([sequence]) * sequence for sequence in range(30)]
    data = b"".join(_send(sequence, entry) for sequence, entry in enumerate(entries))
    framing = Framing()
    framing.feed(data, list(range(1, len(data))))
    assert framing.aborted == []
    assert framing.handled == [(Type.SEND, n, entry) for n, entry in enumerate(entries)]


def test_a_frame_over_the_limit_closes_the_connection_as_soon_as_its_size_arrives() -> None:
    framing = Framing()
    oversize = (MAX_FRAME + 1).to_bytes(4, "big")
    framing.feed(_ping() + oversize[:2], [])
    assert framing.aborted == [] and [kind for kind, _, _ in framing.handled] == [Type.PING]
    framing.connection.data_received(oversize[2:])  # the rest of its size: now it is known
    assert framing.aborted == [f"frame of {MAX_FRAME + 1} bytes is over the limit {MAX_FRAME}"]


@pytest.mark.parametrize(
    ("frame", "reason"),
    [
        ((3).to_bytes(4, "big") + b"\x00\x00\x00", "frame size 3 is too small for a command"),
        (
            (8).to_bytes(4, "big") + (100).to_bytes(4, "big") + b"\x08\x12\x00\x00",
            "command size 100 runs past the frame",
        ),
        ((6).to_bytes(4, "big") + (2).to_bytes(4, "big") + b"\xff\xff", "command does not parse"),
        (
            (11).to_bytes(4, "big") + (2).to_bytes(4, "big") + b"\xff\xff" + b"entry",
            "command does not parse",
        ),
    ],
)
@pytest.mark.parametrize("cut", ["in its size", "in its command size", "before its last byte"])
def test_bad_framing_closes_the_connection_with_its_reason(
    frame: bytes, reason: str, cut: str
) -> None:
    # cut in its size: joined; after its command (the last case): parsed from the first
    # part, the entry joined from the parts; else joined and split
    framing = Framing()
    at = {"in its size": 2, "in its command size": 6, "before its last byte": len(frame) - 1}
    framing.feed(_ping() + frame + _ping(), [len(_ping()) + at[cut]])
    assert len(framing.aborted) == 1 and framing.aborted[0].startswith(reason)
    assert [kind for kind, _, _ in framing.handled] == [Type.PING]  # nothing after it


@pytest.mark.parametrize("cut_inside", [False, True])
def test_a_frame_whose_handling_breaks_the_protocol_closes_the_connection(
    cut_inside: bool,
) -> None:
    """Also when the frame arrived in two pieces (it is then handled from the buffer)."""
    frames = [_send(n, b"\x0e\x01" + bytes(500)) for n in range(3)]
    data = b"".join(frames)
    framing = Framing()
    framing.refused = {1}
    start = len(frames[0])
    framing.feed(data, [start + 200] if cut_inside else [start])
    assert framing.aborted == ["SEND 1 refused"]
    assert [sequence for _, sequence, _ in framing.handled] == [0]  # nothing after it
