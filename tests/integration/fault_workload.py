"""The fault matrix's workload and its oracle (issue #14).

A workload runs concurrent producers, consumers (Exclusive and Shared, acking some
messages individually or cumulatively and leaving others unacked) and admin calls
(subscription create and delete, cursor resets, offload, namespace unload, topic delete)
against one broker, for a fixed number of requests. Every request and its answer goes
into a :class:`Ledger`; from the answers alone the ledger knows what must hold
afterwards:

- 200/204: the change happened and is durable;
- 503: the change did not happen, in memory or on disk, and a retry does it;
- no answer (the broker was killed mid-request): either, never half of it.

:func:`verify` reads the broker's state back (fresh consumers, stats) and lists every
difference; :func:`retry_failed` retries what was answered 503 and checks that the
retry does the operation.

Topics (namespace ``public/fm``):

- ``orders``: two producers; subscriptions ``audit`` (never consumed: it sees every
  stored message and keeps every ledger from being trimmed), ``excl`` (Exclusive,
  individual and cumulative acks, resets), ``shared`` (Shared, two consumers,
  individual acks, redeliveries), ``rewind`` (no consumers; reset by id and by time),
  ``churn-N`` (created and deleted during the run); offloaded to the tiered store.
- ``events``: one producer, one Exclusive subscription that acks: consumed ledgers
  are trimmed (deleted) during the run.
- ``side-0``, ``side-1``: deleted during the run.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import dataclasses
import enum
import random
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from typing import Any

import aiohttp

from tests.conftest import Client, b64, unb64
from tests.harness import DeadlinePassed, eventually_async

Pos = tuple[int, int]

NAMESPACE = "public/fm"
ORDERS = f"{NAMESPACE}/orders"
EVENTS = f"{NAMESPACE}/events"
SIDES = (f"{NAMESPACE}/side-0", f"{NAMESPACE}/side-1")
SIDE_MESSAGES = 10
CHURN_SUBSCRIPTIONS = 4

#: small ledgers so that rollovers (close, create, metadata put) happen under the fault;
#: offloaded ledgers leave the bookie at once, so their reads go to the tiered store;
#: every offload after the first compacts (object get, put, delete); every topic load
#: seeks the last entry on the location index (no last-entry cache); every acknowledged
#: write is synced, so a kill -9 keeps it
BROKER_ARGS = (
    "--set",
    "managedLedgerMaxEntriesPerLedger=20",
    "--set",
    "managedLedgerMinLedgerRolloverTimeMinutes=0",
    "--set",
    "managedLedgerOffloadDeletionLagMs=0",
    "--storage-set",
    "syncMode=always",
    "--storage-set",
    "dbStorage_lastEntryCacheMaxSize=0",
    "--storage-set",
    "s3StreamSetObjectMaxNum=1",
)

#: a verification read gives up after this long without a new message (faults are
#: cleared by then: a healthy broker delivers within milliseconds; a dispatcher backing
#: off after storage errors waits at most 2 s)
QUIET_POLLS = 5
READ_DEADLINE_S = 40.0


def pos_of(message_id: str) -> Pos:
    ledger_id, entry_id = message_id.split(":")
    return int(ledger_id), int(entry_id)


def id_of(pos: Pos) -> str:
    return f"{pos[0]}:{pos[1]}"


def some(positions: Iterable[Pos], limit: int = 6) -> str:
    """A short, sorted sample of positions for a failure message."""
    ordered = sorted(positions)
    shown = ", ".join(id_of(p) for p in ordered[:limit])
    return shown + (f", ... ({len(ordered)} in all)" if len(ordered) > limit else "")


class Outcome(enum.Enum):
    OK = "ok"  # 200 or 204: done, durably
    FAILED = "failed"  # 503: no effect
    REFUSED = "refused"  # another 4xx (a consumer gone, ...): no effect
    UNKNOWN = "unknown"  # no answer (the broker was killed), or a 500: either


def outcome_of(status: int | None) -> Outcome:
    if status is None or (status >= 500 and status != 503):
        return Outcome.UNKNOWN
    if status in (200, 204):
        return Outcome.OK
    return Outcome.FAILED if status == 503 else Outcome.REFUSED


@dataclasses.dataclass(frozen=True, slots=True)
class Acks:
    """One possible acknowledgement state of a subscription: every position below
    ``below`` and every position of ``individual``."""

    below: Pos = (-1, -1)
    individual: frozenset[Pos] = frozenset()

    def acked(self, pos: Pos) -> bool:
        return pos < self.below or pos in self.individual

    def with_individual(self, positions: Iterable[Pos]) -> Acks:
        return Acks(self.below, self.individual | frozenset(positions))

    def with_cumulative(self, upto: Pos) -> Acks:
        return Acks(max(self.below, (upto[0], upto[1] + 1)), self.individual)


class SubscriptionModel:
    """What a subscription's acknowledgements must be, from the answers. Several
    candidates only after a change that got no answer."""

    def __init__(self, topic: str, name: str, sub_type: str) -> None:
        self.topic = topic
        self.name = name
        self.sub_type = sub_type
        self.candidates: list[Acks] = [Acks()]
        #: positions whose ack was answered 503 (retried after the run)
        self.failed_acks: set[Pos] = set()
        #: the last reset's target and outcome (retried after the run if it failed)
        self.last_reset: tuple[str, Outcome] | None = None

    def apply(self, outcome: Outcome, change: Callable[[Acks], Acks]) -> None:
        if outcome is Outcome.OK:
            self.candidates = list(dict.fromkeys(change(acks) for acks in self.candidates))
        elif outcome is Outcome.UNKNOWN:
            changed = [change(acks) for acks in self.candidates]
            self.candidates = list(dict.fromkeys(self.candidates + changed))

    def surely_acked(self, pos: Pos) -> bool:
        return all(acks.acked(pos) for acks in self.candidates)

    def surely_unacked(self, pos: Pos) -> bool:
        return not any(acks.acked(pos) for acks in self.candidates)

    def check(self, delivered: list[Pos], universe: Iterable[Pos]) -> list[str]:
        """Differences between the positions a fresh consumer got and the model."""
        problems = []
        label = f"{self.topic} subscription {self.name}"
        counts = Counter(delivered)
        twice = [pos for pos, n in counts.items() if n > 1]
        if twice:
            problems.append(f"{label}: delivered more than once: {some(twice)}")
        back = [pos for pos in counts if self.surely_acked(pos)]
        if back:
            problems.append(f"{label}: acknowledged with 204 yet delivered again: {some(back)}")
        lost = [pos for pos in set(universe) if self.surely_unacked(pos) and pos not in counts]
        if lost:
            problems.append(f"{label}: unacknowledged messages not delivered: {some(lost)}")
        return problems


@dataclasses.dataclass(frozen=True, slots=True)
class RewindReset:
    """A reset of ``rewind``: its ``target`` ("earliest", "L:E" or "time:<ms>") and the
    last position of orders answered 200 before it was sent (None: none was). A reset
    to a time searches what is stored when it runs: at least everything up to
    ``stored_before``, maybe more that was stored meanwhile."""

    target: str
    stored_before: Pos | None = None


@dataclasses.dataclass(slots=True)
class Attempt:
    kind: str
    target: str
    status: int | None
    outcome: Outcome
    detail: str = ""


class Ledger:
    """Every request of a run and its answer, and the state the answers imply."""

    def __init__(self, seed: int, tag: str) -> None:
        self.rng = random.Random(seed)
        self.tag = tag
        self.attempts: list[Attempt] = []
        #: what went against the contract while it happened (a 500, a 409 after a 503)
        self.violations: list[str] = []
        #: topic -> payload -> (outcome, position if answered 200) of each produce of it
        self.produced: dict[str, dict[str, list[tuple[Outcome, Pos | None]]]] = defaultdict(
            lambda: defaultdict(list)
        )
        self.failed_produces: list[tuple[str, list[str]]] = []
        self.subscriptions = {
            (topic, name): SubscriptionModel(topic, name, sub_type)
            for topic, name, sub_type in (
                (ORDERS, "excl", "Exclusive"),
                (ORDERS, "shared", "Shared"),
                (EVENTS, "excl", "Exclusive"),
            )
        }
        #: the rewind subscription's last reset ("earliest" at first) in each possible
        #: history
        self.rewind: list[RewindReset] = [RewindReset("earliest")]
        self.rewind_last: tuple[str, Outcome] | None = None
        #: churn subscription -> whether it exists, in each possible history
        self.churn: dict[str, set[bool]] = {}
        self.churn_failed: list[tuple[str, str]] = []  # (create|delete, name)
        #: offloads of orders: (message id, outcome)
        self.offloads: list[tuple[Pos, Outcome]] = []
        #: side topic -> "intact" / "deleted" in each possible history
        self.sides: dict[str, set[str]] = {side: {"intact"} for side in SIDES}
        #: message publish times seen, for resets by time
        self.publish_times: list[int] = []

    # ------------------------------------------------------------------ requests

    async def call(
        self,
        client: Client,
        kind: str,
        target: str,
        method: str,
        path: str,
        detail: str = "",
        **kwargs: Any,
    ) -> tuple[int | None, Any, Outcome]:
        """One request, recorded; no answer (a connection cut by kill -9) is status None."""
        try:
            status, body = await client.request(method, path, **kwargs)
        except (aiohttp.ClientError, TimeoutError):
            status, body = None, None
        outcome = outcome_of(status)
        if kind == "receive" and outcome is Outcome.OK:
            detail += " got " + " ".join(m["messageId"] for m in body["messages"])
        self.attempts.append(Attempt(kind, target, status, outcome, detail))
        if status is not None and status >= 500 and status != 503:
            self.violations.append(f"{kind} {target} answered {status}: {body}")
        return status, body, outcome

    def unexpected(self, kind: str, target: str, status: int | None, why: str = "") -> None:
        self.violations.append(f"{kind} {target}: unexpected answer {status} {why}".rstrip())

    def summary(self) -> str:
        """Counts of answers per kind of request, for a failure message."""
        table: dict[str, Counter[str]] = defaultdict(Counter)
        for attempt in self.attempts:
            table[attempt.kind][attempt.outcome.value] += 1
        return "; ".join(
            f"{kind} " + " ".join(f"{n} {outcome}" for outcome, n in sorted(counts.items()))
            for kind, counts in sorted(table.items())
        )

    # ------------------------------------------------------------------ produce

    async def produce(self, client: Client, topic: str, payloads: list[str]) -> Outcome:
        status, body, outcome = await self.call(
            client,
            "produce",
            topic,
            "POST",
            f"/topics/persistent/{topic}",
            json={"messages": [{"payload": b64(p)} for p in payloads]},
        )
        attempts = self.produced[topic]
        if outcome is Outcome.OK:
            failed = []
            for payload, result in zip(payloads, body["messagePublishResults"], strict=True):
                if result["errorCode"] == 0:
                    attempts[payload].append((Outcome.OK, pos_of(result["messageId"])))
                else:
                    attempts[payload].append((Outcome.FAILED, None))
                    failed.append(payload)
            if failed:
                self.failed_produces.append((topic, failed))
            return outcome
        for payload in payloads:
            attempts[payload].append((outcome, None))
        if outcome is Outcome.FAILED:
            self.failed_produces.append((topic, payloads))
        elif outcome is Outcome.REFUSED:
            self.unexpected("produce", topic, status)
        return outcome

    def ok_positions(self, topic: str) -> dict[Pos, str]:
        """Position -> payload of every message answered 200."""
        return {
            pos: payload
            for payload, attempts in self.produced[topic].items()
            for outcome, pos in attempts
            if outcome is Outcome.OK and pos is not None
        }

    # ------------------------------------------------------------------ admin

    async def create_subscription(
        self, client: Client, topic: str, name: str, start: str = "earliest"
    ) -> tuple[int | None, Outcome]:
        status, _, outcome = await self.call(
            client,
            "subscription create",
            f"{topic}/{name}",
            "PUT",
            f"/admin/v2/persistent/{topic}/subscription/{name}",
            messageId=start,
        )
        return status, outcome

    async def churn_create(self, client: Client, name: str) -> Outcome:
        status, outcome = await self.create_subscription(client, ORDERS, name)
        states = self.churn.setdefault(name, {False})
        self._churn_apply(states, outcome, True)
        if outcome is Outcome.FAILED:
            self.churn_failed.append(("create", name))
        elif outcome is Outcome.REFUSED:
            self.unexpected("subscription create", name, status, "(it did not exist)")
        return outcome

    async def churn_delete(self, client: Client, name: str) -> Outcome:
        status, _, outcome = await self.call(
            client,
            "subscription delete",
            f"{ORDERS}/{name}",
            "DELETE",
            f"/admin/v2/persistent/{ORDERS}/subscription/{name}",
        )
        self._churn_apply(self.churn[name], outcome, False)
        if outcome is Outcome.FAILED:
            self.churn_failed.append(("delete", name))
        elif outcome is Outcome.REFUSED:
            self.unexpected("subscription delete", name, status, "(it existed)")
        return outcome

    @staticmethod
    def _churn_apply(states: set[bool], outcome: Outcome, exists: bool) -> None:
        if outcome is Outcome.OK:
            states.clear()
            states.add(exists)
        elif outcome is Outcome.UNKNOWN:
            states.add(exists)

    async def reset(self, client: Client, topic: str, name: str, target: str) -> Outcome:
        """Reset by message id ("L:E") or by time ("time:<ms>")."""
        base = f"/admin/v2/persistent/{topic}/subscription/{name}/resetcursor"
        # a produce answered 200 is readable (adds are confirmed in order): a search by
        # time that starts after this request was sent sees every entry up to here
        stored_before = max(self.ok_positions(topic), default=None)
        if target.startswith("time:"):
            status, _, outcome = await self.call(
                client, "reset", f"{topic}/{name}", "POST", f"{base}/{target[5:]}", target
            )
        else:
            status, _, outcome = await self.call(
                client, "reset", f"{topic}/{name}", "POST", base, target, json={"messageId": target}
            )
        if outcome is Outcome.REFUSED:
            self.unexpected("reset", f"{topic}/{name}", status)
        if name == "rewind":
            self.rewind_last = (target, outcome)
            reset = RewindReset(target, stored_before)
            if outcome is Outcome.OK:
                self.rewind = [reset]
            elif outcome is Outcome.UNKNOWN:
                self.rewind = [*self.rewind, reset]
        else:
            model = self.subscriptions[(topic, name)]
            model.last_reset = (target, outcome)
            model.apply(outcome, lambda _: Acks(pos_of(target)))
        return outcome

    async def offload(self, client: Client, upto: Pos) -> Outcome:
        status, _, outcome = await self.call(
            client,
            "offload",
            ORDERS,
            "PUT",
            f"/admin/v2/persistent/{ORDERS}/offload",
            json={"messageId": id_of(upto)},
        )
        if outcome is Outcome.REFUSED:
            self.unexpected("offload", ORDERS, status)
        self.offloads.append((upto, outcome))
        return outcome

    async def delete_side(self, client: Client, side: str) -> Outcome:
        status, _, outcome = await self.call(
            client, "topic delete", side, "DELETE", f"/admin/v2/persistent/{side}", force="true"
        )
        states = self.sides[side]
        if outcome is Outcome.OK:
            states.clear()
            states.add("deleted")
        elif outcome is Outcome.UNKNOWN:
            states.add("deleted")
        elif outcome is Outcome.REFUSED:
            self.unexpected("topic delete", side, status, "(it existed)")
        return outcome

    async def unload(self, client: Client) -> Outcome:
        _, _, outcome = await self.call(
            client, "unload", NAMESPACE, "POST", f"/admin/v2/namespaces/{NAMESPACE}/unload"
        )
        return outcome


# ---------------------------------------------------------------------- the workload


class Budget:
    """The run's request count: ``take`` one before each request; ``stop`` makes every
    task finish after its request in flight."""

    def __init__(self, requests: int) -> None:
        self.total = requests
        self.used = 0
        self.stopped = False
        self.spent = asyncio.Event()
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []

    def take(self) -> bool:
        if self.stopped or self.used >= self.total:
            return False
        self.used += 1
        if self.used == self.total:
            self.spent.set()
        for waiter in [w for w in self._waiters if w[0] <= self.used]:
            self._waiters.remove(waiter)
            if not waiter[1].done():
                waiter[1].set_result(None)
        return True

    async def reached(self, used: int) -> bool:
        """Wait until ``used`` requests were taken; False if the run ended first."""
        if self.used < used and not self.stopped:
            future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiters.append((used, future))
            await future
        return not self.stopped and self.used < self.total

    def stop(self) -> None:
        self.stopped = True
        self.spent.set()
        for _, future in self._waiters:
            if not future.done():
                future.set_result(None)
        self._waiters.clear()


class Producer:
    def __init__(self, ledger: Ledger, topic: str, name: str) -> None:
        self.ledger = ledger
        self.topic = topic
        self.name = name
        self.sequence = 0

    async def step(self, client: Client) -> bool:
        rng = self.ledger.rng
        payloads = []
        for _ in range(rng.randint(1, 4)):
            payloads.append(f"{self.ledger.tag}|{self.name}|{self.sequence}")
            self.sequence += 1
        outcome = await self.ledger.produce(client, self.topic, payloads)
        return outcome is not Outcome.UNKNOWN


class Consumers:
    """The consumers of one subscription, driven one request at a time, so the order of
    its changes (acks, resets) is the order of their answers."""

    def __init__(
        self, ledger: Ledger, topic: str, name: str, sub_type: str, count: int, resets: bool
    ) -> None:
        self.ledger = ledger
        self.model = ledger.subscriptions[(topic, name)]
        self.topic = topic
        self.name = name
        self.sub_type = sub_type
        self.resets = resets
        self.ids: list[str | None] = [None] * count
        #: per consumer: positions received and not acked (pending for it)
        self.held: list[list[Pos]] = [[] for _ in range(count)]
        self.create_failed = [False] * count

    def _gone(self, slot: int) -> None:
        self.ids[slot] = None
        self.held[slot] = []

    async def step(self, client: Client) -> bool:
        ledger = self.ledger
        rng = ledger.rng
        slot = rng.randrange(len(self.ids))
        consumer = self.ids[slot]
        if consumer is None:
            return await self._create(client, slot)
        held = self.held[slot]
        actions = ["receive"] * 5 + ["ack"] * 3 + ["redeliver"]
        if self.sub_type == "Exclusive":
            actions += ["cumulative"]
            if self.resets:
                actions += ["reset"]
        action = rng.choice(actions) if held else "receive"
        if action == "receive":
            status, body, outcome = await ledger.call(
                client,
                "receive",
                f"{self.topic}/{self.name}",
                "GET",
                f"/consumers/{consumer}/messages",
                f"by {slot}",
                maxMessages=5,
                timeoutMs=20,
            )
            if outcome is Outcome.OK:
                for message in body["messages"]:
                    pos = pos_of(message["messageId"])
                    if self.model.surely_acked(pos):
                        ledger.violations.append(
                            f"{self.topic} subscription {self.name}: {id_of(pos)} was "
                            "acknowledged with 204 and delivered again"
                        )
                    held.append(pos)
                    ledger.publish_times.append(int(message["publishTime"]))
            elif status == 404:
                self._gone(slot)
            elif outcome is not Outcome.UNKNOWN:
                ledger.unexpected("receive", self.name, status)
        elif action in ("ack", "cumulative"):
            cumulative = action == "cumulative"
            chosen = [rng.choice(held)] if cumulative else rng.sample(held, min(3, len(held)))
            status, _, outcome = await ledger.call(
                client,
                "ack",
                f"{self.topic}/{self.name}",
                "POST",
                f"/consumers/{consumer}/ack",
                f"{action} {' '.join(map(id_of, chosen))} by {slot}",
                json={
                    "messageIds": [id_of(p) for p in chosen],
                    "ackType": "Cumulative" if cumulative else "Individual",
                },
            )
            if cumulative:
                upto = chosen[0]
                self.model.apply(outcome, lambda acks: acks.with_cumulative(upto))
                covered = [p for p in held if p <= upto]
            else:
                self.model.apply(outcome, lambda acks: acks.with_individual(chosen))
                covered = chosen
            if outcome is Outcome.OK:
                self.held[slot] = [p for p in held if p not in covered]
            elif outcome is Outcome.FAILED:
                self.model.failed_acks.update(covered)
            elif status == 404:
                self._gone(slot)
            elif outcome is Outcome.REFUSED:
                ledger.unexpected("ack", self.name, status)
        elif action == "redeliver":
            status, _, outcome = await ledger.call(
                client,
                "redeliver",
                f"{self.topic}/{self.name}",
                "POST",
                f"/consumers/{consumer}/redeliverUnacknowledged",
                f"by {slot}",
            )
            if outcome is Outcome.OK or status == 404:
                self.held[slot] = []
            if status == 404:
                self._gone(slot)
        else:
            targets = list(ledger.ok_positions(self.topic))
            target = id_of(rng.choice(targets))
            outcome = await ledger.reset(client, self.topic, self.name, target)
            if outcome is Outcome.OK:
                self.held = [[] for _ in self.ids]
        return outcome is not Outcome.UNKNOWN

    async def _create(self, client: Client, slot: int) -> bool:
        ledger = self.ledger
        status, body, outcome = await ledger.call(
            client,
            "consumer create",
            f"{self.topic}/{self.name}",
            "POST",
            f"/consumers/persistent/{self.topic}/{self.name}",
            json={
                "subscriptionType": self.sub_type,
                "receiverQueueSize": 10,
                "consumerName": f"{self.name}-{slot}",
            },
        )
        if outcome is Outcome.OK:
            self.ids[slot] = str(body["consumerId"])
            self.held[slot] = []
        elif outcome is Outcome.FAILED:
            self.create_failed[slot] = True
        elif outcome is Outcome.REFUSED:
            after = " after a create answered 503" if self.create_failed[slot] else ""
            ledger.unexpected("consumer create", f"{self.topic}/{self.name}", status, after)
            return False
        return outcome is not Outcome.UNKNOWN

    async def close(self, client: Client) -> None:
        for slot, consumer in enumerate(self.ids):
            if consumer is not None:
                await self.ledger.call(
                    client, "consumer close", self.name, "DELETE", f"/consumers/{consumer}"
                )
                self._gone(slot)


class Admin:
    """Subscription churn, resets of ``rewind`` and side topic deletes in a random order,
    spread evenly over the run; offloads at a third and four fifths of it (each with
    ledgers closed since the last to move); namespace unloads (topic loads: last entry
    seeks, metadata gets) late in it, as a load that fails stops most traffic."""

    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger
        shuffled = (
            ["churn-create"] * CHURN_SUBSCRIPTIONS
            + ["churn-delete"] * 2
            + ["reset-id"] * 2
            + ["reset-time"]
            + [f"delete:{side}" for side in SIDES]
        )
        ledger.rng.shuffle(shuffled)
        a, b, c, d = shuffled[:4], shuffled[4:7], shuffled[7:9], shuffled[9:]
        self.script = [*a, "offload", *b, "unload", *c, "offload", *d, "unload"]
        self.churn_created = 0

    async def run(self, client: Client, budget: Budget) -> None:
        spacing = budget.total // (len(self.script) + 1)
        for index, action in enumerate(self.script):
            if not await budget.reached((index + 1) * spacing) or not budget.take():
                return
            if await self._do(client, action) is Outcome.UNKNOWN:
                return

    async def _do(self, client: Client, action: str) -> Outcome:
        ledger = self.ledger
        rng = ledger.rng
        existing = [name for name, states in ledger.churn.items() if states == {True}]
        if action == "churn-delete" and existing:
            return await ledger.churn_delete(client, rng.choice(existing))
        if action.startswith("churn"):
            name = f"churn-{self.churn_created}"
            self.churn_created += 1
            return await ledger.churn_create(client, name)
        if action == "reset-id":
            target = id_of(rng.choice(list(ledger.ok_positions(ORDERS))))
            return await ledger.reset(client, ORDERS, "rewind", target)
        if action == "reset-time":
            when = rng.choice(ledger.publish_times) if ledger.publish_times else 0
            return await ledger.reset(client, ORDERS, "rewind", f"time:{when}")
        if action == "offload":
            return await ledger.offload(client, max(ledger.ok_positions(ORDERS)))
        if action == "unload":
            return await ledger.unload(client)
        return await ledger.delete_side(client, action.removeprefix("delete:"))


@dataclasses.dataclass(slots=True)
class Workload:
    producers: list[Producer]
    consumers: list[Consumers]
    admin: Admin

    @classmethod
    def of(cls, ledger: Ledger) -> Workload:
        return cls(
            producers=[
                Producer(ledger, ORDERS, "orders-a"),
                Producer(ledger, ORDERS, "orders-b"),
                Producer(ledger, EVENTS, "events"),
            ],
            consumers=[
                Consumers(ledger, ORDERS, "excl", "Exclusive", 1, resets=True),
                Consumers(ledger, ORDERS, "shared", "Shared", 2, resets=False),
                Consumers(ledger, EVENTS, "excl", "Exclusive", 1, resets=False),
            ],
            admin=Admin(ledger),
        )

    async def run(self, client: Client, budget: Budget) -> None:
        """Run every task until the budget is spent or stopped; a task whose request got
        no answer (the broker is gone) stops."""

        async def loop(task: Producer | Consumers) -> None:
            while budget.take():
                if not await task.step(client):
                    return

        tasks: list[Producer | Consumers] = [*self.producers, *self.consumers]
        async with asyncio.TaskGroup() as group:
            for task in tasks:
                group.create_task(loop(task))
            group.create_task(self.admin.run(client, budget))

    async def close_consumers(self, client: Client) -> None:
        for consumers in self.consumers:
            await consumers.close(client)


# ---------------------------------------------------------------------- setup


async def setup(client: Client, ledger: Ledger) -> None:
    """Topics, subscriptions and some messages before any fault; offload the closed
    ledgers of orders once, so reads and compaction involve the tiered store."""

    async def ok(outcome: Outcome, what: str) -> None:
        assert outcome is Outcome.OK, f"setup: {what} answered {outcome}: {ledger.attempts[-1]}"

    for name in ("audit", "rewind", "excl", "shared"):
        await ok((await ledger.create_subscription(client, ORDERS, name))[1], name)
    await ok((await ledger.create_subscription(client, EVENTS, "excl"))[1], "events excl")
    for side in SIDES:
        await ok((await ledger.create_subscription(client, side, "keep"))[1], side)
        payloads = [f"{ledger.tag}|{side}|{i}" for i in range(SIDE_MESSAGES)]
        await ok(await ledger.produce(client, side, payloads), f"produce to {side}")
    for batch in range(9):
        payloads = [f"{ledger.tag}|setup|{batch}|{i}" for i in range(5)]
        await ok(await ledger.produce(client, ORDERS, payloads), "produce to orders")
        if batch < 5:
            await ok(await ledger.produce(client, EVENTS, payloads), "produce to events")
    await ok(await ledger.offload(client, max(ledger.ok_positions(ORDERS))), "offload")


async def set_fault(client: Client, fault: dict[str, Any]) -> None:
    status, body = await client.request("PUT", "/admin/v2/brokerlab/faults", json=fault)
    assert status == 204, f"the faults route refused {fault}: {status} {body}"


async def clear_faults(client: Client) -> None:
    status, body = await client.request("DELETE", "/admin/v2/brokerlab/faults")
    assert status == 204, body


# ---------------------------------------------------------------------- verification


@dataclasses.dataclass(slots=True)
class Read:
    """What a fresh consumer got from a subscription."""

    positions: list[Pos]
    payloads: dict[Pos, str]
    publish_times: dict[Pos, int]
    backlog: int
    problem: str | None = None


async def read_subscription(
    client: Client, topic: str, name: str, sub_type: str = "Exclusive", limit: int = 0
) -> Read:
    """Every message a new consumer of the subscription gets (its backlog, or ``limit``
    messages), then the consumer is closed without acking anything. ``sub_type`` is the
    type its consumers had, so reading it changes nothing else."""
    read = Read([], {}, {}, 0)
    status, stats = await client.request("GET", f"/admin/v2/persistent/{topic}/stats")
    if status != 200:
        read.problem = f"{topic}: stats answered {status}: {stats}"
        return read
    subscription = stats["subscriptions"].get(name)
    if subscription is None:
        read.problem = f"{topic}: subscription {name} is missing"
        return read
    read.backlog = int(subscription["msgBacklog"])
    wanted = min(limit, read.backlog) if limit else read.backlog
    status, body = await client.request(
        "POST",
        f"/consumers/persistent/{topic}/{name}",
        json={"subscriptionType": sub_type, "consumerName": f"verify-{name}"},
    )
    if status != 200:
        read.problem = f"{topic}: a consumer of {name} could not be created: {status} {body}"
        return read
    consumer = body["consumerId"]
    quiet = 0

    async def read_or_quiet() -> bool:
        nonlocal quiet
        messages = await client.receive(consumer, min(1000, wanted - len(read.positions)), 1000)
        quiet = 0 if messages else quiet + 1
        for message in messages:
            pos = pos_of(message["messageId"])
            read.positions.append(pos)
            read.payloads[pos] = unb64(message["payload"]).decode()
            read.publish_times[pos] = int(message["publishTime"])
        return len(read.positions) >= wanted or quiet >= QUIET_POLLS

    if wanted:  # a short read is the problem reported below, not a failure here
        with contextlib.suppress(DeadlinePassed):
            await eventually_async(read_or_quiet, "the backlog", READ_DEADLINE_S, every_s=0)
    await client.request("DELETE", f"/consumers/{consumer}")
    if len(read.positions) < wanted:
        read.problem = (
            f"{topic} subscription {name}: backlog {read.backlog}, "
            f"but only {len(read.positions)} messages were delivered"
        )
    return read


def check_messages(ledger: Ledger, topic: str, read: Read, complete: bool) -> list[str]:
    """The messages read against the produce answers. ``complete``: the read holds
    every stored message (a subscription that never acks and keeps every ledger)."""
    problems = []
    ok = ledger.ok_positions(topic)
    produced = ledger.produced[topic]
    seen: dict[str, list[Pos]] = defaultdict(list)
    for pos, payload in read.payloads.items():
        seen[payload].append(pos)
    wrong = [pos for pos, payload in read.payloads.items() if pos in ok and ok[pos] != payload]
    if wrong:
        problems.append(f"{topic}: messages whose payload is not the one produced: {some(wrong)}")
    strangers = [pos for pos, payload in read.payloads.items() if payload not in produced]
    if strangers:
        problems.append(f"{topic}: messages nobody produced: {some(strangers)}")
    if complete:
        missing = [pos for pos in ok if pos not in read.payloads]
        if missing:
            problems.append(f"{topic}: answered 200 but missing: {some(missing)}")
    stored_failed: list[Pos] = []
    for payload, attempts in produced.items():
        answered = {pos for outcome, pos in attempts if pos is not None}
        unknown = sum(outcome is Outcome.UNKNOWN for outcome, _ in attempts)
        extra = [pos for pos in seen.get(payload, ()) if pos not in answered]
        if len(extra) > unknown:
            stored_failed += extra
    if stored_failed:
        problems.append(f"{topic}: stored though the produce answered 503: {some(stored_failed)}")
    return problems


def rewind_candidates(
    reset: RewindReset, order: list[Pos], times: dict[Pos, int]
) -> set[Pos | None]:
    """Where ``rewind`` may start after ``reset``, given every stored message of orders
    (``order``, ascending, publish times ``times``); None: at the end, nothing to read."""
    target = reset.target
    if target == "earliest":
        return {order[0] if order else None}
    if not target.startswith("time:"):
        pos = pos_of(target)
        return {next((p for p in order if p >= pos), None)}
    when = int(target[5:])
    # The broker searches what is stored when the reset runs: ``order[:k]`` for some k,
    # at least up to ``stored_before``. Publish times are not ordered across concurrent
    # producers, and a produce takes its time when the broker reads the request, then
    # may wait (a rollover, a topic load) and be stored after the search: so a message
    # stored after the search can be older than the time.
    # In a ledger whose last entry (of order[:k]) is at or after the time, the binary
    # search stops at a message at or after the time whose predecessor is before it:
    found: set[Pos | None] = {
        p
        for i, p in enumerate(order)
        if times[p] >= when and (i == 0 or times[order[i - 1]] < when)
    }
    # When every ledger of order[:k] ends before the time, the answer is the end as the
    # search began: the first message stored after it (order[k]), older than the time
    # or not, or none yet.
    before = reset.stored_before
    lowest = 0 if before is None else bisect.bisect_right(order, before)
    ledgers_end_before = True  # every ledger of order[:k] but its last ends before the time
    for k in range(len(order) + 1):
        if k >= 2 and order[k - 1][0] != order[k - 2][0]:
            ledgers_end_before = ledgers_end_before and times[order[k - 2]] < when
        if not ledgers_end_before:
            break
        if k >= lowest and (k == 0 or times[order[k - 1]] < when):
            found.add(order[k] if k < len(order) else None)
    return found


async def verify(client: Client, ledger: Ledger, phase: str) -> list[str]:
    """Every difference between the broker's state and what its answers promised."""
    problems: list[str] = []
    audit = await read_subscription(client, ORDERS, "audit")
    status, internal = await client.request("GET", f"/admin/v2/persistent/{ORDERS}/internalStats")
    ledgers = internal["ledgers"] if status == 200 else []
    if audit.problem:
        problems.append(audit.problem)
    problems += check_messages(ledger, ORDERS, audit, complete=True)
    if audit.positions != sorted(set(audit.positions)):
        problems.append(f"{ORDERS} subscription audit: not delivered in order exactly once")
    stored = sorted(set(audit.positions))
    universe = set(stored) | set(ledger.ok_positions(ORDERS))
    for name in ("excl", "shared"):
        model = ledger.subscriptions[(ORDERS, name)]
        read = await read_subscription(client, ORDERS, name, model.sub_type)
        if read.problem:
            problems.append(read.problem)
        problems += model.check(read.positions, universe)
    events = await read_subscription(client, EVENTS, "excl")
    if events.problem:
        problems.append(events.problem)
    problems += check_messages(ledger, EVENTS, events, complete=False)
    problems += ledger.subscriptions[(EVENTS, "excl")].check(
        events.positions, ledger.ok_positions(EVENTS)
    )
    if not audit.problem:  # where rewind may start depends on every stored message
        problems += await _verify_rewind(client, ledger, stored, audit.publish_times)
    problems += await _verify_churn(client, ledger, audit.backlog)
    problems += _verify_offload(ledger, ledgers)
    problems += await _verify_sides(client, ledger)
    if problems:
        problems.append(
            f"{ORDERS} ledgers: "
            + ", ".join(
                f"{info['ledgerId']}({info['entries']}{' offloaded' if info['offloaded'] else ''})"
                for info in ledgers
            )
        )
    return [f"{phase}: {problem}" for problem in problems]


async def _verify_rewind(
    client: Client, ledger: Ledger, stored: list[Pos], times: dict[Pos, int]
) -> list[str]:
    allowed: set[Pos | None] = set()
    for reset in ledger.rewind:
        allowed |= rewind_candidates(reset, stored, times)
    read = await read_subscription(client, ORDERS, "rewind", limit=1)
    if read.problem:
        return [read.problem]
    first = read.positions[0] if read.positions else None
    if first not in allowed:
        shown = some(p for p in allowed if p is not None)
        if None in allowed:
            shown = ", ".join(filter(None, (shown, "the end")))
        return [
            f"{ORDERS} subscription rewind starts at {first and id_of(first)}; "
            f"its resets ({', '.join(reset.target for reset in ledger.rewind)}) allow {shown}"
        ]
    expected = sum(1 for pos in stored if first is not None and pos >= first)
    if read.backlog != expected:
        return [f"{ORDERS} subscription rewind: backlog {read.backlog}, expected {expected}"]
    return []


async def _verify_churn(client: Client, ledger: Ledger, all_messages: int) -> list[str]:
    status, stats = await client.request("GET", f"/admin/v2/persistent/{ORDERS}/stats")
    if status != 200:
        return []  # reported by the reads
    problems = []
    for name, states in ledger.churn.items():
        subscription = stats["subscriptions"].get(name)
        if (subscription is not None) not in states:
            want = "exist" if True in states else "not exist"
            problems.append(f"{ORDERS} subscription {name} should {want} (its answers)")
        elif subscription is not None and subscription["msgBacklog"] != all_messages:
            problems.append(
                f"{ORDERS} subscription {name} (from earliest) has backlog "
                f"{subscription['msgBacklog']}, expected {all_messages}"
            )
    return problems


def _verify_offload(ledger: Ledger, ledgers: list[dict[str, Any]]) -> list[str]:
    done = [pos for pos, outcome in ledger.offloads if outcome is Outcome.OK]
    maybe = [pos for pos, outcome in ledger.offloads if outcome is not Outcome.FAILED]
    must_below = max(done)[0] if done else -1
    may_upto = max(maybe)[0] if maybe else -1
    offloaded = {info["ledgerId"] for info in ledgers if info["offloaded"]}
    must = {info["ledgerId"] for info in ledgers if info["ledgerId"] < must_below}
    problems = []
    if must - offloaded:
        problems.append(
            f"{ORDERS}: ledgers {sorted(must - offloaded)} are not offloaded, "
            f"though an offload up to {id_of(max(done))} answered 204"
        )
    beyond = {lid for lid in offloaded if lid > may_upto}
    if beyond:
        problems.append(
            f"{ORDERS}: ledgers {sorted(beyond)} are offloaded, though only offloads "
            "answered 503 covered them"
        )
    return problems


async def _verify_sides(client: Client, ledger: Ledger) -> list[str]:
    problems = []
    status, listed = await client.request("GET", f"/admin/v2/persistent/{NAMESPACE}")
    for side, states in ledger.sides.items():
        status, stats = await client.request("GET", f"/admin/v2/persistent/{side}/stats")
        if status == 404:
            state = "deleted"
        elif status != 200:
            problems.append(f"{side}: stats answered {status}: {stats}")
            continue
        else:
            keep = stats["subscriptions"].get("keep")
            intact = keep is not None and keep["msgBacklog"] == SIDE_MESSAGES
            state = "intact" if intact else f"half deleted ({stats['subscriptions']})"
        if state not in states:
            problems.append(f"{side} is {state}; its delete answers allow {sorted(states)}")
        if (f"persistent://{side}" in listed) != (state != "deleted"):
            problems.append(f"{side} is {state}, yet the namespace list says {listed}")
    return problems


# ---------------------------------------------------------------------- retries


async def retry_failed(client: Client, ledger: Ledger) -> list[str]:
    """Retry every change answered 503 (faults cleared): each retry must do the change
    (and must not find it done already). Returns what went wrong."""
    problems: list[str] = []

    def expect(what: str, otherwise: str = "") -> None:
        last = ledger.attempts[-1]
        if last.outcome is not Outcome.OK:
            problems.append(f"retried {what} answered {last.status} {otherwise}".rstrip())

    failed_produces, ledger.failed_produces = ledger.failed_produces, []
    for topic, payloads in failed_produces:
        await ledger.produce(client, topic, payloads)
        expect(f"produce to {topic}")
    for model in ledger.subscriptions.values():
        problems += await _retry_acks(client, ledger, model)
        if model.last_reset is not None and model.last_reset[1] is Outcome.FAILED:
            await ledger.reset(client, model.topic, model.name, model.last_reset[0])
            expect(f"reset of {model.topic}/{model.name}")
    if ledger.rewind_last is not None and ledger.rewind_last[1] is Outcome.FAILED:
        await ledger.reset(client, ORDERS, "rewind", ledger.rewind_last[0])
        expect("reset of rewind")
    churn_failed, ledger.churn_failed = ledger.churn_failed, []
    for action, name in churn_failed:
        states = ledger.churn[name]
        if action == "create" and states == {False}:
            await ledger.churn_create(client, name)
        elif action == "delete" and states == {True}:
            await ledger.churn_delete(client, name)
        else:
            continue  # a later answered change superseded it
        expect(f"subscription {action} of {name}", f"the failed {action} took effect")
    if ledger.offloads and ledger.offloads[-1][1] is Outcome.FAILED:
        await ledger.offload(client, ledger.offloads[-1][0])
        expect("offload")
    for side, side_states in ledger.sides.items():
        failed = any(
            a.kind == "topic delete" and a.target == side and a.outcome is Outcome.FAILED
            for a in ledger.attempts
        )
        if failed and side_states == {"intact"}:
            await ledger.delete_side(client, side)
            expect(f"delete of {side}", "the failed delete took effect")
    return [f"retries: {problem}" for problem in problems]


async def _retry_acks(client: Client, ledger: Ledger, model: SubscriptionModel) -> list[str]:
    """Acks answered 503 of messages not acked since: a fresh consumer gets them again;
    ack them again."""
    wanted = {pos for pos in model.failed_acks if model.surely_unacked(pos)}
    model.failed_acks = set()
    if not wanted:
        return []
    status, body = await client.request(
        "POST",
        f"/consumers/persistent/{model.topic}/{model.name}",
        json={"subscriptionType": model.sub_type, "consumerName": "retry"},
    )
    if status != 200:
        return [f"consumer for retried acks of {model.name}: {status} {body}"]
    consumer = body["consumerId"]
    found: list[Pos] = []
    quiet = 0

    async def found_or_quiet() -> bool:
        nonlocal quiet
        messages = await client.receive(consumer, 1000, 1000)
        quiet = 0 if messages else quiet + 1
        found.extend(p for p in map(pos_of, (m["messageId"] for m in messages)) if p in wanted)
        return len(found) >= len(wanted) or quiet >= QUIET_POLLS

    with contextlib.suppress(DeadlinePassed):  # what was not found is reported by verify
        await eventually_async(found_or_quiet, "the retried acks", READ_DEADLINE_S, every_s=0)
    problems = []
    if found:
        answer, _, outcome = await ledger.call(
            client,
            "ack",
            f"{model.topic}/{model.name} (retry)",
            "POST",
            f"/consumers/{consumer}/ack",
            json={"messageIds": [id_of(p) for p in found]},
        )
        model.apply(outcome, lambda acks: acks.with_individual(found))
        if outcome is not Outcome.OK:
            problems.append(f"retried ack on {model.name} answered {answer}")
    # messages not found are reported by verify (unacknowledged and not delivered)
    with contextlib.suppress(aiohttp.ClientError):
        await client.request("DELETE", f"/consumers/{consumer}")
    return problems
