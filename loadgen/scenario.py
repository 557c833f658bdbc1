"""Scenario files: TOML with OpenMessaging Benchmark-style names, plus timed events.

A scenario is validated as a whole; an invalid one raises ScenarioError naming the file
and the field (``conf/scenarios/catchup.toml: producerRate: Input should be ...``).
Presets live in ``conf/scenarios/``; a scenario is named by preset name or by path.
"""

from __future__ import annotations

import pathlib
import tomllib
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from loadgen.presets import PRESETS, preset_names


class ScenarioError(Exception):
    """A scenario that cannot be run; the message names the file and the field."""


class ConsumerBehaviour(BaseModel):
    """How the consumers of one subscription behave."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    #: messages per second per consumer at most (a slow consumer); 0: as fast as it can
    rateLimit: float = Field(default=0, ge=0)
    #: how many consumers of the subscription are slowed (the rest run freely); 0: all
    slowConsumers: int = Field(default=0, ge=0)
    receiveBatchSize: int = Field(default=100, ge=1, le=1000)
    ackMode: Literal["individual", "cumulative", "none"] = "individual"
    #: messages the broker may push to a consumer ahead of its receives (Pulsar's name)
    receiverQueueSize: int = Field(default=1000, ge=1, le=1_000_000)
    #: share of first deliveries negatively acknowledged (redelivered after
    #: negativeAckRedeliveryDelayMs, then acknowledged); needs ackMode individual
    nackRatio: float = Field(default=0, ge=0, le=1)
    negativeAckRedeliveryDelayMs: int = Field(default=1000, ge=0, le=2_147_483_647)
    #: wait this long before re-creating a consumer closed under it (a restart or an
    #: unload moved its topic), as a client's reconnect delay
    reconnectDelayMs: int = Field(default=0, ge=0, le=60_000)
    #: and up to this much more, drawn for each reconnect from the scenario's seed (the
    #: network's jitter: the public PIP-430 test delays each connection 20-40 ms)
    reconnectJitterMs: int = Field(default=0, ge=0, le=60_000)


class PulsarDriverOptions(BaseModel):
    """The ``[pulsar]`` table: options of the ``pulsar`` driver (the official client over
    the binary protocol). The producer options are the OpenMessaging Benchmark Pulsar
    driver's names and defaults; OMB sets no batch message count, so neither does
    ``batchingMaxMessages`` by default."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    #: ``pulsar://host:port``; "": the binary protocol of the broker the load generator
    #: starts (``--service-url`` overrides both)
    serviceUrl: str = Field(default="", pattern=r"^(pulsar(\+ssl)?://\S+)?$")
    batchingEnabled: bool = True
    batchingMaxPublishDelayMs: int = Field(default=1, ge=1, le=60_000)
    batchingMaxBytes: int = Field(default=1024 * 1024, ge=1, le=2_147_483_647)
    batchingMaxMessages: int = Field(default=2_147_483_647, ge=1, le=2_147_483_647)
    #: wait for room when pendingQueueSize messages are unacknowledged; false: such a send
    #: fails at once (a publish error)
    blockIfQueueFull: bool = True
    #: messages a producer keeps in flight; 0: the client's default (1000)
    pendingQueueSize: int = Field(default=0, ge=0, le=1_000_000)


class VirtualOptions(BaseModel):
    """The ``[virtual]`` table: what a virtual-time run (``--virtual-time``) models that a
    live run gets from its clients and its machine. Each is a stated parameter of the
    run, never the machine's speed; the client defaults are the Pulsar Java client's."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    #: the client's acknowledgment grouping (acknowledgmentGroupTime, 100 ms): acks go to
    #: the broker this long after the first of a group; 0: each ack at once
    ackGroupingMs: float = Field(default=100, ge=0, le=60_000)
    #: a group goes out at once when it holds this many acks (maxAcknowledgmentGroupSize)
    maxAckGroupSize: int = Field(default=1000, ge=1, le=1_000_000)
    #: the client's reconnect backoff: the first retry after this long, doubling
    #: (Pulsar's initial 100 ms) up to ``reconnectMaxBackoffMs`` (60 s)
    reconnectBackoffMs: float = Field(default=100, ge=0.001, le=60_000)
    reconnectMaxBackoffMs: float = Field(default=60_000, ge=0.001, le=3_600_000)
    #: messages a producer keeps unacknowledged before a send waits (maxPendingMessages;
    #: the [pulsar] table's pendingQueueSize when that is set)
    maxPendingMessages: int = Field(default=1000, ge=1, le=1_000_000)
    #: a send not stored after this long fails (a publish error), as the Java client's
    #: sendTimeoutMs (30 s); 0: never
    sendTimeoutMs: int = Field(default=30_000, ge=0, le=3_600_000)
    #: producers send at multiples of this many milliseconds: every message whose
    #: scheduled time has come goes out at the next tick (one publish per partition),
    #: its latency counted from its schedule as ever; 0: each at its own instant. At
    #: high rates a tick of 1 ms lets a simulation group what a real broker's own
    #: processing time would group; its cost is up to one tick of publish latency
    sendTickMs: float = Field(default=0, ge=0, le=1000)
    #: broker CPU a published message costs, in microseconds (to the nanosecond: a
    #: cost under 0.0005 us is none): each broker works through
    #: its publishes one at a time, so at a rate above 1e6 / publishCostUs its producers
    #: queue and their latency shows it; 0: free (a producer then needs a rate)
    publishCostUs: float = Field(default=0, ge=0, le=1_000_000)
    #: broker CPU an entry handed to a consumer costs, in microseconds, on the same CPU:
    #: what one dispatch hands a consumer reaches it once that CPU has done it; 0: free
    #: (consumers then read as fast as the broker's rules let them, whatever the load)
    dispatchCostUs: float = Field(default=0, ge=0, le=1_000_000)


class Event(BaseModel):
    """Something that happens at ``at`` seconds into the measured run."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    at: float = Field(ge=0)
    type: Literal[
        "unload", "offload", "restart", "disconnect", "reconnect", "pause", "resume", "seek"
    ]
    #: which subscription (index within each topic) a consumer event targets; -1: all
    subscription: int = Field(default=-1, ge=-1)
    #: seek: "earliest" or an epoch-ms timestamp relative to the run start (negative)
    seekTo: str | int = "earliest"
    #: restart: which broker of the cluster (-1: the broker process, all brokers)
    broker: int = Field(default=-1, ge=-1)
    #: restart of one broker: "graceful" (bundles handed over) or "kill"
    mode: Literal["graceful", "kill"] = "graceful"
    #: restart of one broker: how long it stays down
    downtimeMs: int = Field(default=0, ge=0, le=600_000)
    #: unload: one bundle of the namespace (``0x00000000_0x40000000``); "": all of it
    bundle: str = Field(default="", pattern=r"^(0x[0-9a-f]{8}_0x[0-9a-f]{8})?$")


class Scenario(BaseModel):
    """One workload. Field names follow the OpenMessaging Benchmark where it has one."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1)
    description: str = ""
    topics: int = Field(ge=1, le=100_000)
    partitionsPerTopic: int = Field(default=1, ge=1, le=1024)
    messageSize: int = Field(default=1024, ge=0, le=5_242_880)
    messagesPerRequest: int = Field(default=100, ge=1, le=1000)
    producersPerTopic: int = Field(default=1, ge=0, le=1000)
    #: messages per second across all producers; 0: as fast as possible
    producerRate: float = Field(default=1000, ge=0)
    #: producers pause while this many messages are in flight, counted as the public
    #: PIP-430 test's targetMessagesInFlight counts them: + one per subscription for each
    #: message sent, - one for each message a consumer received (redeliveries too); 0:
    #: never pause
    maxMessagesInFlight: int = Field(default=0, ge=0)
    #: how long a producer pauses when it finds maxMessagesInFlight reached before it
    #: sends again (the public test: 100 ms)
    inFlightPauseMs: float = Field(default=10, gt=0, le=60_000)
    subscriptionsPerTopic: int = Field(default=1, ge=0, le=1000)
    consumerPerSubscription: int = Field(default=1, ge=0, le=1000)
    subscriptionType: Literal["Exclusive", "Failover", "Shared", "Key_Shared"] = "Exclusive"
    keyDistributor: Literal["NO_KEY", "KEY_ROUND_ROBIN", "RANDOM", "ZIPF"] = "NO_KEY"
    keys: int = Field(default=1000, ge=1)
    zipfExponent: float = Field(default=1.1, gt=0)
    testDurationSeconds: float = Field(default=60, gt=0)
    warmupSeconds: float = Field(default=0, ge=0)
    #: produce this much backlog (MiB per subscription) before consumers start (catch-up)
    consumerBacklogSizeMB: float = Field(default=0, ge=0)
    #: share of messages sent with a delivery delay (a producer's deliver_after; HTTP
    #: produce's deliverAfterMs): Shared and Key_Shared subscriptions hold them and read
    #: them again when due
    delayedRatio: float = Field(default=0, ge=0, le=1)
    #: how long after its send a delayed message is due
    deliverAfterMs: int = Field(default=0, ge=0, le=86_400_000)
    seed: int = 1
    #: brokers of the cluster the load generator starts (``brokerlab serve --brokers``)
    brokers: int = Field(default=1, ge=1, le=16)
    #: how producers and consumers reach the broker: "http" (its REST produce and
    #: consume routes) or "pulsar" (the official client over the binary protocol)
    driver: Literal["http", "pulsar"] = "http"
    pulsar: PulsarDriverOptions = PulsarDriverOptions()
    consumers: ConsumerBehaviour = ConsumerBehaviour()
    #: what a virtual-time run models (client timings, CPU costs)
    virtual: VirtualOptions = VirtualOptions()
    events: list[Event] = []
    #: broker.conf overrides for a broker this scenario starts
    broker: dict[str, str | int | float | bool] = {}

    @model_validator(mode="after")
    def _events_within_the_run(self) -> Scenario:
        for index, event in enumerate(self.events):
            if event.at > self.testDurationSeconds:
                raise ValueError(
                    f"events[{index}].at is {event.at}s, after testDurationSeconds "
                    f"({self.testDurationSeconds}s)"
                )
            if event.broker >= self.brokers:
                raise ValueError(
                    f"events[{index}].broker {event.broker} is not a broker "
                    f"(brokers is {self.brokers})"
                )
            if event.broker >= 0 and event.type != "restart":
                raise ValueError(f"events[{index}].broker is for restart events only")
            if event.bundle and event.type != "unload":
                raise ValueError(f"events[{index}].bundle is for unload events only")
            if event.subscription >= self.subscriptionsPerTopic:
                raise ValueError(
                    f"events[{index}].subscription {event.subscription} is not a subscription "
                    f"(subscriptionsPerTopic is {self.subscriptionsPerTopic})"
                )
        if self.subscriptionType == "Exclusive" and self.consumerPerSubscription > 1:
            raise ValueError(
                "consumerPerSubscription is "
                f"{self.consumerPerSubscription}, but an Exclusive subscription takes one "
                "consumer; use Failover, Shared or Key_Shared"
            )
        if self.consumers.ackMode == "cumulative" and self.subscriptionType in (
            "Shared",
            "Key_Shared",
        ):
            raise ValueError(
                f"consumers.ackMode cumulative is refused on {self.subscriptionType} "
                "subscriptions, as in Pulsar; use individual"
            )
        if self.delayedRatio > 0 and self.deliverAfterMs <= 0:
            raise ValueError("delayedRatio needs deliverAfterMs, the delay of those messages")
        if self.consumers.nackRatio > 0 and self.consumers.ackMode != "individual":
            raise ValueError(
                f"consumers.nackRatio needs ackMode individual (it is {self.consumers.ackMode}): "
                "a negative acknowledgement is of one message"
            )
        return self

    def scaled(self, duration_s: float) -> Scenario:
        """The same scenario over ``duration_s`` seconds: event times, warm-up, the
        catch-up backlog and the delivery delay keep their share of the run, so a short
        run has the same shape."""
        factor = duration_s / self.testDurationSeconds
        events = [event.model_copy(update={"at": event.at * factor}) for event in self.events]
        delay_ms = self.deliverAfterMs
        return self.model_copy(
            update={
                "testDurationSeconds": duration_s,
                "warmupSeconds": self.warmupSeconds * factor,
                "consumerBacklogSizeMB": self.consumerBacklogSizeMB * factor,
                "deliverAfterMs": max(round(delay_ms * factor), 1) if delay_ms else 0,
                "events": events,
            }
        )


def resolve(name_or_path: str) -> pathlib.Path:
    """A preset name, or a path to a scenario file."""
    path = pathlib.Path(name_or_path)
    if path.suffix == ".toml" or path.exists():
        return path
    preset = PRESETS / f"{name_or_path}.toml"
    if not preset.exists():
        raise ScenarioError(
            f"no scenario {name_or_path!r}: not a file, and the presets are "
            f"{', '.join(preset_names())}"
        )
    return preset


def load_scenario(name_or_path: str) -> Scenario:
    """Read and validate a scenario. ScenarioError names the file and the field."""
    path = resolve(name_or_path)
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise ScenarioError(f"{path}: no such scenario file") from None
    except tomllib.TOMLDecodeError as error:
        raise ScenarioError(f"{path}: not valid TOML: {error}") from None
    data.setdefault("name", path.stem)
    try:
        return Scenario.model_validate(data)
    except ValidationError as error:
        problems = []
        for issue in error.errors():
            field = ".".join(str(part) for part in issue["loc"]) or "(scenario)"
            problems.append(f"{path}: {field}: {issue['msg']}")
        raise ScenarioError("\n".join(problems)) from None
