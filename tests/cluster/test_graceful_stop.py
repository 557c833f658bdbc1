"""A broker of two stopping gracefully, in process: it unloads its bundles one by one,
as Pulsar's ``unloadNamespaceBundlesGracefully`` does, and a bundle whose turn has not
come yet goes on serving its clients meanwhile. Before, the stopping broker refused
every request at once while still owning its bundles, so no broker served them: with
all the topics on it (the third restart of the rolling-restart scenario, after the
second had moved everything there) all traffic stopped for the whole stop, 5-9 s on a
loaded machine."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from tests.conftest import LocalCluster, LocalClusterFactory
from tests.harness import (
    eventually_async,
    pulsar_bundle,
    short,
    topic_in_bundle,
    topics_in_distinct_bundles,
)

LOOKUP = "/lookup/v2/topic/persistent/{topic}"


class HeldCloses:
    """The bookie's ``close_ledger`` held until ``release``: a graceful stop waits in
    its first bundle's unload for as long as the test needs."""

    def __init__(self, local: LocalCluster) -> None:
        bookie = local.cluster.storage.bookie
        self._close: Callable[[int], Awaitable[int]] = bookie.close_ledger
        self._gate = asyncio.Event()
        self.waiting = 0
        bookie.close_ledger = self._held  # type: ignore[method-assign]

    async def _held(self, ledger_id: int) -> int:
        self.waiting += 1
        await self._gate.wait()
        return await self._close(ledger_id)

    def release(self) -> None:
        self._gate.set()


async def test_a_stopping_broker_serves_the_bundles_it_has_not_unloaded_yet(
    local_cluster: LocalClusterFactory,
) -> None:
    local = await local_cluster()
    first, second, third = topics_in_distinct_bundles("stopping-serves", 3)
    # bundles go to the broker owning the fewest: first and third to broker 0, second
    # to broker 1; broker 0 unloads first's bundle first (it took it first)
    for topic in (first, second, third):
        status, body = await local.clients[0].request("GET", LOOKUP.format(topic=short(topic)))
        assert status == 200, body
    assert [local.owner_index(topic) for topic in (first, second, third)] == [0, 1, 0]
    zero = local.clients[0]
    await zero.produce(short(first), ["first"])  # a topic for the stop to close
    consumer = await zero.subscribe(
        short(third), "s", subscriptionType="Shared", subscriptionInitialPosition="Earliest"
    )
    await zero.produce(short(third), ["before"])
    assert [m["payload"] for m in await zero.receive_until(consumer, 1)] == ["YmVmb3Jl"]

    held = HeldCloses(local)
    node = local.cluster.nodes[0]
    restart = asyncio.create_task(local.cluster.restart(0, "graceful", 0))
    try:
        await eventually_async(lambda: held.waiting > 0, "broker 0 to close first's ledger")
        assert node.state == "stopping"
        assert local.owner_index(third) == 0, "third's bundle waits for its turn"

        # third's bundle is not being unloaded: its producer and consumer go on
        status, body = await zero.request(
            "POST",
            f"/topics/persistent/{short(third)}",
            json={"messages": [{"payload": "ZHVyaW5n"}]},  # "during"
        )
        assert status == 200, body
        assert [m["payload"] for m in await zero.receive_until(consumer, 1)] == ["ZHVyaW5n"]
        # a topic of that bundle it has not loaded it does not load now: 503, the client
        # looks it up again (and finds it elsewhere once the bundle has moved)
        unloaded = topic_in_bundle("stopping-serves", pulsar_bundle(third))
        status, body = await zero.request(
            "POST",
            f"/topics/persistent/{short(unloaded)}",
            json={"messages": [{"payload": "eA=="}]},
        )
        assert status == 503, body
    finally:
        held.release()
        await restart
    # every bundle of broker 0 went to broker 1, third's too, with what it stored
    assert [local.owner_index(topic) for topic in (first, second, third)] == [None, 1, None]
    one = local.clients[1]
    status, body = await one.request("GET", f"/admin/v2/persistent/{short(third)}/internalStats")
    assert status == 200, body
    assert body["numberOfEntries"] == 2
