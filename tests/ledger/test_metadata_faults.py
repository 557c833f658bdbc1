"""Metadata writes that fail: what a client was told succeeded is durable, and what was
answered with an error had no effect, in memory or in the store (issue #14 A and B at
the ledger layer; the HTTP reproductions are in tests/integration/test_fault_matrix.py)."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.ledger.managed_cursor import ManagedCursor
from broker.ledger.managed_ledger import ManagedLedger, metadata_key
from broker.ledger.position import Position
from storage_stub.bookie.api import StorageFaultError
from storage_stub.bookie.memory import InMemoryBookie, InMemoryMetadataStore
from tests.ledger.conftest import OpenLedger, Stores


class FlakyMetadata(InMemoryMetadataStore):
    """Metadata whose puts and deletes fail while ``failing`` is set, or as ``plan``
    says (one bool per put, True: fail), after yielding once so that writes overlap."""

    def __init__(self) -> None:
        super().__init__()
        self.failing = False
        self.plan: list[bool] = []
        self.puts = 0
        #: deletes of keys with this prefix fail
        self.failing_deletes = "\0"

    def _fails(self) -> bool:
        return self.failing or (self.plan.pop(0) if self.plan else False)

    async def put(self, key: str, value: bytes) -> None:
        await asyncio.sleep(0)
        self.puts += 1
        if self._fails():
            raise StorageFaultError("metadataPut")
        await super().put(key, value)

    async def delete(self, key: str) -> None:
        await asyncio.sleep(0)
        if self._fails() or key.startswith(self.failing_deletes):
            raise StorageFaultError("metadataDelete")
        await super().delete(key)


@pytest.fixture
def flaky(stores: Stores) -> FlakyMetadata:
    stores.metadata = FlakyMetadata()
    return stores.metadata


async def _ledger_list(stores: Stores, ledger: ManagedLedger) -> list[int]:
    import orjson

    raw = await stores.metadata.get(metadata_key(ledger.name))
    assert raw is not None
    return [int(record["id"]) for record in orjson.loads(raw)["ledgers"]]


# ---------------------------------------------------------------------- A: rollover


async def test_a_rollover_whose_metadata_write_fails_takes_no_write_and_loses_nothing(
    stores: Stores, flaky: FlakyMetadata, open_ledger: OpenLedger
) -> None:
    ledger = await open_ledger(max_entries=5)
    acknowledged: list[Position] = []
    for i in range(4):
        acknowledged.append(await ledger.add_entries([b"m%d" % i]))
    # metadata fails from the add that fills the ledger on: the rollover it starts in
    # the background fails, whenever it runs
    flaky.failing = True
    acknowledged.append(await ledger.add_entries([b"m4"]))
    first_ledger = acknowledged[0].ledger_id
    answers: list[Position | BaseException] = []
    for i in range(10):
        try:
            answers.append(await ledger.add_entries([b"n%d" % i]))
        except StorageFaultError as error:
            answers.append(error)
    # no add may succeed on a ledger the metadata does not name
    named = await _ledger_list(stores, ledger)
    for answer in answers:
        if isinstance(answer, Position):
            assert answer.ledger_id in named, f"acknowledged on unnamed ledger {answer}"
            acknowledged.append(answer)
    assert all(isinstance(answer, StorageFaultError) for answer in answers)
    assert ledger.current_ledger is None, "the ledger whose metadata failed is not used"
    created = [lid for lid in stores.bookie._ledgers if lid not in named]  # type: ignore[attr-defined]
    assert created == [], "the ledger created for the failed rollover was deleted"

    flaky.failing = False  # the next add retries the rollover
    retried = await ledger.add_entries([b"after"])
    acknowledged.append(retried)
    assert retried.ledger_id != first_ledger
    assert retried.ledger_id in await _ledger_list(stores, ledger)

    # a crash now (no close): a new owner finds every acknowledged entry
    reopened = await open_ledger(max_entries=5)
    for position in acknowledged:
        assert reopened.is_readable(position), position
    cursor = await ManagedCursor.create(reopened, "check", "earliest")
    read = [entry.position for entry in await cursor.read_entries(100)]
    assert read == acknowledged


async def test_a_a_failed_ledger_create_at_rollover_fails_the_adds_and_is_retried(
    stores: Stores, open_ledger: OpenLedger
) -> None:
    class NoCreate(InMemoryBookie):
        refuse = False

        async def create_ledger(self) -> int:
            if self.refuse:
                raise StorageFaultError("createLedger")
            return await super().create_ledger()

    bookie = stores.bookie = NoCreate()
    ledger = await open_ledger(max_entries=2)
    await ledger.add_entries([b"a"])
    bookie.refuse = True  # from the add that fills the ledger (and starts a rollover) on
    await ledger.add_entries([b"b"])
    with pytest.raises(StorageFaultError):
        await ledger.add_entries([b"c"])
    bookie.refuse = False
    position = await ledger.add_entries([b"c"])
    assert position.entry_id == 0 and ledger.is_readable(position)


async def test_trim_and_offload_marks_whose_write_fails_change_nothing(
    stores: Stores, flaky: FlakyMetadata, open_ledger: OpenLedger
) -> None:
    ledger = await open_ledger(max_entries=2)
    cursor = await ManagedCursor.create(ledger, "s", "earliest")
    for i in range(6):
        await ledger.add_entries([b"m%d" % i])
    await ledger.maybe_roll_over()
    before = [info.ledger_id for info in ledger.ledgers]
    entries = await cursor.read_entries(4)
    cursor.acknowledge_cumulative(entries[-1].position)
    await cursor.persist()
    flaky.failing = True
    with pytest.raises(StorageFaultError):
        await ledger.trim_consumed_ledgers()
    assert [info.ledger_id for info in ledger.ledgers] == before
    closed = ledger.offload_candidates()
    with pytest.raises(StorageFaultError):
        await ledger.mark_offloaded(closed)
    assert not any(info.offloaded for info in ledger.ledgers)
    flaky.failing = False
    trimmed = await ledger.trim_consumed_ledgers()
    assert trimmed == before[:2]
    assert await _ledger_list(stores, ledger) == before[2:]


# ---------------------------------------------------------------------- B: acks


async def test_b_a_failed_ack_has_no_effect_and_its_retry_is_written(
    stores: Stores, flaky: FlakyMetadata, open_ledger: OpenLedger
) -> None:
    ledger = await open_ledger()
    cursor = await ManagedCursor.create(ledger, "s", "earliest")
    positions = [await ledger.add_entries([b"m%d" % i]) for i in range(3)]
    flaky.failing = True
    cursor.acknowledge([positions[0]])
    with pytest.raises(StorageFaultError):
        await cursor.persist()
    assert not cursor.is_acknowledged(positions[0])
    assert cursor.mark_delete_position < positions[0]
    assert cursor.backlog() == 3
    flaky.failing = False
    assert cursor.acknowledge([positions[0]]) == 1, "the retry is a change again"
    await cursor.persist()
    recovered = (await open_ledger()).cursors["s"]
    assert recovered.mark_delete_position == positions[0]


async def test_failed_reset_and_subscription_delete_change_nothing(
    stores: Stores, flaky: FlakyMetadata, open_ledger: OpenLedger
) -> None:
    ledger = await open_ledger()
    cursor = await ManagedCursor.create(ledger, "s", "earliest")
    positions = [await ledger.add_entries([b"m%d" % i]) for i in range(3)]
    flaky.failing = True
    with pytest.raises(StorageFaultError):
        await cursor.reset(positions[2])
    assert cursor.read_position == positions[0] and cursor.backlog() == 3
    with pytest.raises(StorageFaultError):
        await cursor.delete()
    assert ledger.cursors["s"] is cursor
    flaky.failing = False
    assert (await open_ledger()).cursors["s"].backlog() == 3
    await cursor.delete()
    assert "s" not in (await open_ledger()).cursors


async def test_a_deleted_topic_whose_cursor_records_stay_behind_does_not_pass_them_on(
    stores: Stores, flaky: FlakyMetadata, open_ledger: OpenLedger
) -> None:
    ledger = await open_ledger()
    await ManagedCursor.create(ledger, "old", "earliest")
    await ledger.add_entries([b"a"])
    flaky.failing_deletes = "cursor/"
    await ledger.delete()  # done at the topic's record; the cursor's stays behind
    assert await stores.metadata.get(metadata_key(ledger.name)) is None
    assert await stores.metadata.keys_with_prefix("cursor/") != []
    flaky.failing_deletes = "\0"
    again = await open_ledger()
    assert again.cursors == {}
    assert await stores.metadata.keys_with_prefix("cursor/") == []


# one round: acks started together (a list of (cumulative?, index)); the plan says which
# of the writes they cause fail
Round = list[tuple[bool, int]]


async def _ack_rounds(entries: int, rounds: list[Round], plan: list[bool]) -> None:
    stores = Stores()
    metadata = FlakyMetadata()
    stores.metadata = metadata

    async def open_() -> ManagedLedger:
        from broker.ledger.managed_ledger import ManagedLedgerConfig

        ledger = ManagedLedger(
            "persistent://t/ns/p",
            stores.bookie,
            metadata,
            stores.cache.load_topic("persistent://t/ns/p"),
            ManagedLedgerConfig(max_entries_per_ledger=3, min_rollover_ms=0),
            stores.clock,
        )
        await ledger.open()
        return ledger

    ledger = await open_()
    cursor = await ManagedCursor.create(ledger, "sub", "earliest")
    positions = []
    for index in range(entries):
        positions.append(await ledger.add_entries([b"m%d" % index]))
        await ledger.maybe_roll_over()
    metadata.plan = list(plan)
    acked: set[int] = set()

    async def ack(cumulative: bool, index: int) -> set[int]:
        if cumulative:
            cursor.acknowledge_cumulative(positions[index])
            effect = set(range(index + 1))
        else:
            cursor.acknowledge([positions[index]])
            effect = {index}
        await cursor.persist()
        return effect

    for round_ in rounds:
        outcomes = await asyncio.gather(
            *(ack(cumulative, index) for cumulative, index in round_), return_exceptions=True
        )
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                assert isinstance(outcome, StorageFaultError)
            else:
                acked |= outcome
        # every ack told done holds; every one that failed left nothing behind unless
        # another ack that succeeded covers it
        for index, position in enumerate(positions):
            assert cursor.is_acknowledged(position) == (index in acked), (index, acked)
        assert cursor.backlog() == entries - len(acked)
    metadata.plan = []
    recovered = (await open_()).cursors["sub"]
    for index, position in enumerate(positions):
        assert recovered.is_acknowledged(position) == (index in acked), (index, acked)


@settings(max_examples=150, deadline=None)
@given(data=st.data(), entries=st.integers(1, 12))
def test_any_mix_of_failing_and_succeeding_concurrent_acks_is_exact(
    data: st.DataObject, entries: int
) -> None:
    one = st.tuples(st.booleans(), st.integers(0, entries - 1))
    rounds = data.draw(st.lists(st.lists(one, min_size=1, max_size=4), max_size=8))
    plan = data.draw(st.lists(st.booleans(), max_size=20))
    asyncio.run(_ack_rounds(entries, rounds, plan))


async def test_an_ack_riding_on_a_failed_write_of_the_same_position_is_applied_again() -> None:
    # ack 0 starts a write that fails; ack 1 and a second ack of 0 wait for the next
    # write, which succeeds: both are durable, though the second ack of 0 changed
    # nothing when it was made
    await _ack_rounds(2, [[(False, 0), (False, 1), (False, 0)]], [True])


# ---------------------------------------------------------------------- reads across ledgers


class ReadGate(InMemoryBookie):
    """Reads of ``ledger`` fail while ``failing``, or wait on ``gate`` when it is set."""

    def __init__(self) -> None:
        super().__init__()
        self.ledger = -1
        self.failing = False
        self.gate: asyncio.Event | None = None
        self.waiting = asyncio.Event()

    async def read_entries(self, ledger_id: int, first: int, last: int) -> list[bytes]:
        if ledger_id == self.ledger:
            if self.failing:
                raise StorageFaultError("readEntries")
            if self.gate is not None:
                self.waiting.set()
                await self.gate.wait()
        return await super().read_entries(ledger_id, first, last)


async def _two_ledgers(stores: Stores, open_ledger: OpenLedger) -> tuple[ManagedCursor, ReadGate]:
    bookie = stores.bookie = ReadGate()
    ledger = await open_ledger(max_entries=3)
    cursor = await ManagedCursor.create(ledger, "s", "earliest")
    for i in range(6):
        await ledger.add_entries([b"m%d" % i])
        await ledger.maybe_roll_over()
    bookie.ledger = ledger.ledgers[1].ledger_id
    return cursor, bookie


async def test_a_read_that_fails_on_a_later_ledger_keeps_what_it_read(
    stores: Stores, open_ledger: OpenLedger
) -> None:
    cursor, bookie = await _two_ledgers(stores, open_ledger)
    bookie.failing = True
    first = await cursor.read_entries(10)
    assert [e.data for e in first] == [b"m0", b"m1", b"m2"], "read, so not lost"
    with pytest.raises(StorageFaultError):
        await cursor.read_entries(10)
    bookie.failing = False
    assert [e.data for e in await cursor.read_entries(10)] == [b"m3", b"m4", b"m5"]


async def test_a_rewind_during_a_read_drops_what_the_read_had_before_it(
    stores: Stores, open_ledger: OpenLedger
) -> None:
    cursor, bookie = await _two_ledgers(stores, open_ledger)
    bookie.gate = asyncio.Event()
    reading = asyncio.create_task(cursor.read_entries(10))
    await bookie.waiting.wait()  # m0..m2 read, waiting on the second ledger
    cursor.rewind()
    bookie.gate.set()
    got = [e.data for e in await reading]
    assert got == [b"m0", b"m1", b"m2", b"m3", b"m4", b"m5"], "each once, in order"


class GatedMetadata(InMemoryMetadataStore):
    """Puts and deletes wait on ``gate`` while it is set."""

    def __init__(self) -> None:
        super().__init__()
        self.gate: asyncio.Event | None = None
        self.waiting = asyncio.Event()

    async def _hold(self) -> None:
        if self.gate is not None:
            self.waiting.set()
            await self.gate.wait()

    async def put(self, key: str, value: bytes) -> None:
        await self._hold()
        await super().put(key, value)

    async def delete(self, key: str) -> None:
        await self._hold()
        await super().delete(key)


@pytest.mark.parametrize("admin", ["reset", "delete"])
async def test_an_ack_made_while_a_reset_or_delete_is_written_never_lands_after_it(
    stores: Stores, open_ledger: OpenLedger, admin: str
) -> None:
    metadata = stores.metadata = GatedMetadata()
    ledger = await open_ledger()
    cursor = await ManagedCursor.create(ledger, "s", "earliest")
    positions = [await ledger.add_entries([b"m%d" % i]) for i in range(4)]
    metadata.gate = asyncio.Event()
    if admin == "reset":
        running = asyncio.create_task(cursor.reset(positions[3]))
    else:
        running = asyncio.create_task(cursor.delete())
    await metadata.waiting.wait()
    cursor.acknowledge([positions[0]])
    acking = asyncio.create_task(cursor.persist())
    metadata.gate.set()
    await running
    await acking
    recovered = (await open_ledger()).cursors
    if admin == "reset":
        assert recovered["s"].mark_delete_position == positions[2], "the reset stands"
    else:
        assert "s" not in recovered, "the ack's write did not bring the record back"


async def test_a_topic_whose_last_ledger_left_the_bookie_after_its_offload_loads(
    stores: Stores, open_ledger: OpenLedger
) -> None:
    # a failed rollover, or a close that drops an empty current ledger, can leave an
    # offloaded ledger last in the list; once its bookie copy is deleted there is
    # nothing to seek in, and the load must not depend on it
    ledger = await open_ledger()
    await ledger.add_entries([b"a", b"b"])
    await ledger.close()
    ledger = await open_ledger()
    offloaded = ledger.offload_candidates()
    assert [info.entries for info in offloaded] == [2]
    await ledger.mark_offloaded(offloaded)
    assert await ledger.delete_offloaded_from_bookie(0) == 1
    await ledger.close()  # its current ledger is empty: dropped
    reopened = await open_ledger()
    assert reopened.last_confirmed == Position(offloaded[0].ledger_id, 1)
    assert reopened.ledgers[0].bookie_deleted
