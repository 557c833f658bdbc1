"""Key_Shared: keys to consumers by AUTO_SPLIT hash ranges, per-key order kept through the
replay queue, slots drained before they change hands. The exact rule is in
docs/key_shared.md; this module implements it."""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Iterable

import mmh3

from broker.clock import Clock
from broker.dispatch.consumer import Consumer
from broker.dispatch.dispatcher import DispatchConfig, DispatchedSubscription, SharedDispatcher
from broker.ledger.entry import Entry, key_of
from broker.ledger.position import Position

SLOTS = 65_536
NONE_KEY = b"NONE_KEY"


def sticky_slot(key: bytes | None) -> int:
    """Unsigned Murmur3 32-bit (seed 0) of the sticky key, modulo 65,536. O(len(key))."""
    return int(mmh3.hash(key if key is not None else NONE_KEY, 0, signed=False)) % SLOTS


class AutoSplitSelector:
    """Contiguous slot ranges, one per consumer. ``select`` is O(log consumers); ``add``
    and ``remove`` O(log consumers) in Python, plus a list insert or delete (a memmove):
    the first largest range comes from a heap, not a walk over every range, which made
    a connection's 12,000 Key_Shared consumers take 17 s to attach, the loop held 7 s.
    More consumers than slots: a consumer that joins when every range is one slot owns
    none (Pulsar refuses it, and its client retries) until a consumer leaves; then the
    first of them joins."""

    __slots__ = ("_end_of", "_ends", "_idle", "_owners", "_widest")

    def __init__(self) -> None:
        self._ends: list[int] = []  # inclusive upper slot of each range, ascending
        self._owners: list[Consumer] = []
        self._end_of: dict[int, int] = {}  # id(owner) -> the last slot of its range
        #: (-size, first slot, last slot) of ranges, stale ones included (a range split
        #: or merged since): the first valid one is the first largest range
        self._widest: list[tuple[int, int, int]] = []
        #: consumers that own no slot, in the order they joined (a dict as an ordered set)
        self._idle: dict[Consumer, None] = {}

    def select(self, slot: int) -> Consumer | None:
        index = bisect.bisect_left(self._ends, slot)
        return self._owners[index] if index < len(self._owners) else None

    def ranges(self) -> list[tuple[int, int, Consumer]]:
        """(first slot, last slot, consumer) in slot order."""
        result = []
        start = 0
        for end, owner in zip(self._ends, self._owners, strict=True):
            result.append((start, end, owner))
            start = end + 1
        return result

    def add(self, consumer: Consumer) -> None:
        """The first consumer owns every slot; a later one takes the lower half of the
        first largest range. O(log consumers) amortised."""
        ends = self._ends
        if not self._owners:
            ends.append(SLOTS - 1)
            self._owners.append(consumer)
            self._end_of[id(consumer)] = SLOTS - 1
            self._widest = [(-SLOTS, 0, SLOTS - 1)]
            return
        widest = self._widest
        while True:  # drop stale ranges until the first largest is on top
            _, start, end = widest[0]
            index = bisect.bisect_left(ends, end)
            if index < len(ends) and ends[index] == end and self._start(index) == start:
                break
            heapq.heappop(widest)
        if start == end:
            self._idle[consumer] = None
            return
        middle = start + (end - start) // 2
        ends.insert(index, middle)
        self._owners.insert(index, consumer)
        self._end_of[id(consumer)] = middle
        heapq.heapreplace(widest, (start - middle - 1, start, middle))
        self._push(middle + 1, end)

    def remove(self, consumer: Consumer) -> None:
        """The range goes to the next range's owner (the previous one's, if last)."""
        ends = self._ends
        end = self._end_of.pop(id(consumer), None)
        if end is None:
            try:
                del self._idle[consumer]
            except KeyError:
                raise ValueError(f"{consumer!r} is not a consumer here") from None
            return
        index = bisect.bisect_left(ends, end)
        if index == len(self._owners) - 1 and index > 0:
            ends[index - 1] = end
            self._end_of[id(self._owners[index - 1])] = end
            del ends[index]
            del self._owners[index]
            taker = index - 1
        else:
            del ends[index]
            del self._owners[index]
            taker = index
        if self._owners:
            self._push(self._start(taker), ends[taker])
        idle = self._idle
        if idle:  # a range of two slots at least now: the first that owns none joins
            waiting = next(iter(idle))
            del idle[waiting]
            self.add(waiting)

    def _start(self, index: int) -> int:
        return self._ends[index - 1] + 1 if index else 0

    def _push(self, start: int, end: int) -> None:
        """A range that is new (split or merged); the heap is rebuilt from the live
        ranges once stale ones outnumber them, so it stays O(consumers)."""
        widest = self._widest
        heapq.heappush(widest, (start - end - 1, start, end))
        if len(widest) > 2 * len(self._ends) + 16:
            ends = self._ends
            widest[:] = [(self._start(i) - e - 1, self._start(i), e) for i, e in enumerate(ends)]
            heapq.heapify(widest)


class KeySharedDispatcher(SharedDispatcher):
    """Shared's replay and redelivery, with keys pinned to consumers. Bookkeeping per
    slot: messages waiting in the replay queue, and the consumer holding unacknowledged
    messages (and how many). Every operation is O(1) per message except the replay scan,
    which is bounded by the look-ahead limit."""

    def __init__(
        self, subscription: DispatchedSubscription, config: DispatchConfig, clock: Clock
    ) -> None:
        super().__init__(subscription, config, clock)
        self.selector = AutoSplitSelector()
        self._replay_slot: dict[Position, int] = {}
        self._slot_waiting: dict[int, int] = {}
        self._held_slot: dict[Position, int] = {}
        self._slot_holder: dict[int, Consumer] = {}
        self._slot_unacked: dict[int, int] = {}

    # ------------------------------------------------------------------ consumers

    def add_consumer(self, consumer: Consumer) -> None:
        self.selector.add(consumer)
        super().add_consumer(consumer)

    def remove_consumer(self, consumer: Consumer) -> None:
        self.selector.remove(consumer)
        super().remove_consumer(consumer)

    def acknowledged(self, positions: Iterable[Position]) -> None:
        for position in positions:
            self._release(position)
        self.wake()

    def reset(self) -> None:
        super().reset()
        self._replay_slot.clear()
        self._slot_waiting.clear()
        self._held_slot.clear()
        self._slot_holder.clear()
        self._slot_unacked.clear()

    # ------------------------------------------------------------------ bookkeeping

    def _hold(self, position: Position, slot: int, consumer: Consumer) -> None:
        self._held_slot[position] = slot
        self._slot_holder[slot] = consumer
        self._slot_unacked[slot] = self._slot_unacked.get(slot, 0) + 1

    def _release(self, position: Position) -> None:
        slot = self._held_slot.pop(position, None)
        if slot is None:
            return
        left = self._slot_unacked[slot] - 1
        if left:
            self._slot_unacked[slot] = left
        else:
            del self._slot_unacked[slot]
            del self._slot_holder[slot]

    def _wait_in_replay(self, position: Position, slot: int | None) -> None:
        if position in self.replay:
            return
        self.replay.add(position)
        if slot is not None:
            self._replay_slot[position] = slot
            self._slot_waiting[slot] = self._slot_waiting.get(slot, 0) + 1

    def _leave_replay(self, position: Position) -> None:
        self.replay.discard(position)
        slot = self._replay_slot.pop(position, None)
        if slot is not None:
            left = self._slot_waiting[slot] - 1
            if left:
                self._slot_waiting[slot] = left
            else:
                del self._slot_waiting[slot]

    def _to_replay(self, positions: list[Position], unseen: set[Position]) -> None:
        """Taken back from a consumer: wait in the replay queue under the same slot;
        those the client had seen count one more redelivery."""
        counts = self.subscription.redelivery_counts
        redelivered = 0
        for position in positions:
            slot = self._held_slot.get(position)
            self._release(position)
            if self.cursor.is_acknowledged(position):
                continue
            if position not in unseen:
                counts[position] = counts.get(position, 0) + 1
                redelivered += 1
            self._wait_in_replay(position, slot)
            self.ledger.events.replay_added(self.cursor.name, position.ledger_id, position.entry_id)
        self.subscription.msg_redeliver.add(redelivered)
        self.wake()

    def _look_ahead_limit(self) -> int:
        config = self.config
        return min(
            config.key_shared_look_ahead_per_consumer * max(len(self.consumers), 1),
            config.key_shared_look_ahead_per_subscription,
        )

    def _allowed(self, slot: int, capacity: dict[Consumer, int]) -> Consumer | None:
        """The consumer that may take a message of ``slot`` now (rules 2 and 3)."""
        owner = self.selector.select(slot)
        if owner is None or capacity.get(owner, 0) <= 0:
            return None
        holder = self._slot_holder.get(slot)
        if holder is not None and holder is not owner:
            return None
        return owner

    # ------------------------------------------------------------------ the loop

    async def _dispatch_once(self) -> bool:
        capacity = {c: self._capacity(c) for c in self.consumers}
        room = self.config.max_unacked_per_subscription - self.unacked_messages()
        budget = min(
            sum(max(v, 0) for v in capacity.values()), room, self.config.max_read_batch_size
        )
        if budget <= 0:
            return False
        delayed = self.delayed
        if delayed is not None and delayed.has_due():
            self._release_delayed(delayed.pop_due(budget))
        if self.replay:
            chosen = self._choose_from_replay(capacity, budget)
            if chosen:
                for position in chosen:
                    self._leave_replay(position)
                slots = {p: self._replay_slot.get(p) for p in chosen}
                try:
                    entries = await self.ledger.read_positions(chosen, self.cursor.name)
                except BaseException:
                    for position in chosen:
                        self._wait_in_replay(position, slots[position])
                    raise
                self._send_keyed(self._screened(entries), from_replay=True)
                return True
        if delayed is not None and delayed.should_pause():
            return False
        if len(self.replay) >= self._look_ahead_limit():
            return False
        if not self.cursor.has_more_entries():
            return False
        entries = await self.cursor.read_entries(budget)
        if not entries:
            return False
        self._send_keyed(self._screened(entries), False)
        return True

    def _choose_from_replay(self, capacity: dict[Consumer, int], budget: int) -> list[Position]:
        """Replay positions that can go now, in order; a slot whose earliest waiting
        message cannot go blocks the rest of that slot (rule 1)."""
        chosen: list[Position] = []
        blocked: set[int] = set()
        room = dict(capacity)
        for position in self.replay:
            slot = self._replay_slot.get(position)
            if slot is None:
                chosen.append(position)  # slot unknown until read (came from another type)
            elif slot not in blocked:
                owner = self._allowed(slot, room)
                if owner is None:
                    blocked.add(slot)
                    continue
                room[owner] -= 1
                chosen.append(position)
            if len(chosen) >= budget:
                break
        return chosen

    def _send(self, entries: list[Entry]) -> None:
        self._send_keyed(entries, from_replay=False)

    def _send_keyed(self, entries: list[Entry], from_replay: bool) -> None:
        capacity = {c: self._capacity(c) for c in self.consumers}
        now = self.clock.monotonic_ns()
        stopped: set[int] = set()
        for entry in entries:
            position = entry.position
            if self.cursor.is_acknowledged(position):
                self._dropped(entry)
                continue
            slot = sticky_slot(key_of(entry.data))
            owner = None
            if slot not in stopped and (from_replay or slot not in self._slot_waiting):
                owner = self._allowed(slot, capacity)
            if owner is None:
                # not handed over: wait behind the slot's earlier messages (no new read)
                stopped.add(slot)
                self._wait_in_replay(position, slot)
                continue
            capacity[owner] -= 1
            owner.deliver(entry, self._redelivery_count(position), now)
            self._hold(position, slot, owner)
