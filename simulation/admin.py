"""The load generator's view of a cluster in its own process: the admin calls a run
makes (subscriptions, seeks, unloads, restarts, offloads, stats), each made as the HTTP
route of the same name makes it, and the whole-broker restart.

Broker errors come back as the load generator's :class:`~loadgen.client.BrokerError`
with the status and code the HTTP route would have answered, so a run's events and
set-up handle them as they do against a live broker.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from broker.cluster import Cluster
from broker.dispatch.errors import BrokerError as BrokerSideError
from broker.dispatch.names import TopicName
from broker.dispatch.service import BrokerService
from broker.ledger.position import Position
from broker.tasks import TaskOwner
from loadgen.client import sum_stats
from simulation.clients import RETRYABLE, as_loadgen_error

T = TypeVar("T")

#: what a virtual run's results give as the broker's URL
VIRTUAL_URL = "virtual://brokerlab"


async def _translated(call: Callable[[], Awaitable[T]]) -> T:
    try:
        return await call()
    except (BrokerSideError, *RETRYABLE) as error:
        raise as_loadgen_error(error) from error


def _position(message_id: str) -> Position:
    ledger_id, _, entry_id = message_id.partition(":")
    return Position(int(ledger_id), int(entry_id))


class InProcessAdmin:
    """The admin calls of :class:`loadgen.client.BrokerClient` that a run makes, on a
    cluster in this process. A restart runs in a task of ``restarts`` (the run's owner
    settles it before the cluster closes): the call that asked for it may be cancelled
    (the run's measured part ends meanwhile) and the broker still comes back, as a live
    broker's restart goes on after its HTTP caller left."""

    base_url = VIRTUAL_URL

    def __init__(self, cluster: Cluster, restarts: TaskOwner) -> None:
        self.cluster = cluster
        self.restarts = restarts

    def _service(self, topic: str) -> tuple[TopicName, BrokerService]:
        name = TopicName.parse(topic)
        return name, self.cluster.service_for(name)

    async def create_subscription(self, topic: str, subscription: str, position: str) -> None:
        async def create() -> None:
            name, service = self._service(topic)
            loaded = await service.get_topic(name, create=True)
            service.check_new_subscription(loaded, subscription)
            await loaded.create_subscription(subscription, position)

        await _translated(create)

    async def reset_cursor_to_time(self, topic: str, subscription: str, time_ms: int) -> None:
        async def reset() -> None:
            name, service = self._service(topic)
            chosen = await service.subscription(name, subscription)
            await chosen.reset_cursor(await chosen.topic.find_position_by_publish_time(time_ms))

        await _translated(reset)

    async def unload_namespace(self, tenant: str, namespace: str) -> None:
        await _translated(lambda: self.cluster.unload_namespace(tenant, namespace))

    async def unload_bundle(self, tenant: str, namespace: str, bundle: str) -> None:
        await _translated(lambda: self.cluster.unload_bundle(f"{tenant}/{namespace}", bundle))

    async def restart_broker(self, index: int, mode: str, downtime_ms: int) -> None:
        restart = self.cluster.restart(index, mode, downtime_ms / 1000)
        task = self.restarts.spawn(restart, name=f"restart broker {index}")
        await _translated(lambda: asyncio.shield(task))

    async def last_message_id(self, topic: str) -> str:
        async def last() -> str:
            name, service = self._service(topic)
            return str((await service.get_topic(name, create=False)).ledger.last_confirmed)

        return await _translated(last)

    async def offload(self, topic: str, message_id: str) -> None:
        async def offload() -> None:
            name, service = self._service(topic)
            await service.offload_topic(name, _position(message_id))

        await _translated(offload)

    async def cache_stats(self) -> dict[str, Any]:
        """Every broker's cache stats, summed (as the HTTP client sums a cluster's)."""
        return sum_stats([node.cache_stats() for node in self.cluster.nodes])

    async def storage_stats(self) -> dict[str, Any]:
        storage = self.cluster.storage
        return {"bookie": storage.stats(), "tiered": storage.tiered.stats()}

    async def stats(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """Both at one instant: nothing awaited in between."""
        storage = self.cluster.storage
        cache = sum_stats([node.cache_stats() for node in self.cluster.nodes])
        return cache, {"bookie": storage.stats(), "tiered": storage.tiered.stats()}

    async def trace_stats(self) -> dict[str, Any]:
        traces = [node.trace.stats() for node in self.cluster.nodes if node.trace is not None]
        return sum_stats(traces) if traces else {"enabled": False}

    async def close(self) -> None:
        """Nothing to close: there is no connection."""


class VirtualBroker:
    """The run's whole broker, for the ``restart`` event without a broker index: every
    broker of the cluster stops gracefully, then every one starts, as ``brokerlab
    serve`` restarted does (the storage, like a bookie, stays up)."""

    url = VIRTUAL_URL

    def __init__(self, cluster: Cluster, restarts: TaskOwner) -> None:
        self.cluster = cluster
        self.restarts = restarts
        self.starts = 1

    async def restart(self) -> None:
        """Stop every broker, then start every one, in a task of ``restarts`` (it ends
        even if the caller is cancelled meanwhile)."""
        await asyncio.shield(self.restarts.spawn(self._restart(), name="restart brokers"))

    async def _restart(self) -> None:
        for node in self.cluster.nodes:
            await node.stop("graceful")
        for node in self.cluster.nodes:
            node.restarts += 1
            await node.start()
        self.starts += 1
