"""Which broker owns each namespace bundle: the cluster's one ownership table.

As in Pulsar, a namespace is cut into ``defaultNumberOfNamespaceBundles`` bundles, each a
range of the 32-bit hash space; a topic belongs to the bundle holding the CRC32 of its
full name (``persistent://tenant/namespace/topic``, a partition's own name for a
partition), and a bundle has at most one owner. Pulsar keeps ownership in its metadata
store as nodes that vanish with their broker's session; here the brokers of a cluster
share one process, so they share this table.

A bundle without an owner is assigned on first use (a lookup, or a request that needs
the topic) to the live broker owning the fewest bundles, the lowest index on a tie:
Pulsar's load manager places bundles by load; with brokers in one process sharing the
CPU, the bundle count is the load that matters. A broker that unloads a bundle (an admin
unload) is passed over for that bundle's next assignment while another broker is live,
so an unload moves the bundle, which is what users unload for.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

from broker.dispatch.errors import BrokerError, InvalidRequestError, UnavailableError
from broker.dispatch.names import TopicName

#: Pulsar's hash space: bundles cover 0x00000000..0xffffffff
FULL_UPPER = 0xFFFFFFFF
#: defaultNumberOfNamespaceBundles
DEFAULT_BUNDLES = 4


class ServiceNotReadyError(UnavailableError):
    """The broker cannot serve the topic now (it is shutting down, or no broker of the
    cluster is up); the client looks the topic up again. Pulsar: ServiceNotReady."""


class NotOwnerError(BrokerError):
    """The topic's bundle is owned by another broker: HTTP answers 307 to it, the binary
    protocol ``ServiceNotReady`` (the client looks the topic up again)."""

    def __init__(self, topic: TopicName, owner: BrokerAddress) -> None:
        super().__init__(f"topic {topic} is served by broker {owner.index} ({owner.http_url})")
        self.owner = owner


@dataclass(slots=True)
class BrokerAddress:
    """Where a broker of the cluster answers; ``alive``: it may be given bundles."""

    index: int
    http_url: str = ""
    service_url: str = ""
    alive: bool = False


def bundle_boundaries(count: int) -> list[int]:
    """Boundaries of ``count`` equal bundles: ``count + 1`` values from 0 to FULL_UPPER.
    O(count)."""
    if count < 1:
        raise ValueError("a namespace has at least one bundle")
    step = (FULL_UPPER + 1) // count
    return [index * step for index in range(count)] + [FULL_UPPER]


def bundle_range(lower: int, upper: int) -> str:
    """Pulsar's name of a bundle: ``0x00000000_0x40000000``."""
    return f"0x{lower:08x}_0x{upper:08x}"


def topic_hash(topic: TopicName) -> int:
    """CRC32 of the topic's full name, as Pulsar's default bundle assignment hashes it."""
    return zlib.crc32(str(topic).encode())


class Ownership:
    """The ownership table of a cluster of ``brokers`` brokers. Lookups are O(log bundles)
    per topic (a bisect over the boundaries) plus a dict lookup; assignment O(brokers)."""

    __slots__ = (
        "_boundaries",
        "_names",
        "_owned",
        "_passed_over",
        "_unloading",
        "brokers",
        "owners",
    )

    def __init__(self, brokers: int, bundles_per_namespace: int = DEFAULT_BUNDLES) -> None:
        if brokers < 1:
            raise ValueError("a cluster has at least one broker")
        self.brokers = [BrokerAddress(index) for index in range(brokers)]
        self._boundaries = bundle_boundaries(bundles_per_namespace)
        self._names = [
            bundle_range(lower, upper)
            for lower, upper in zip(self._boundaries, self._boundaries[1:], strict=False)
        ]
        #: (namespace "tenant/ns", bundle name) -> owning broker index
        self.owners: dict[tuple[str, str], int] = {}
        #: broker index -> the number of bundles it owns
        self._owned = [0] * brokers
        #: bundle -> the broker that unloaded it last (assigned elsewhere if possible)
        self._passed_over: dict[tuple[str, str], int] = {}
        #: bundles being unloaded: their owner loads no topic of them until released
        self._unloading: set[tuple[str, str]] = set()

    @property
    def bundle_names(self) -> list[str]:
        return list(self._names)

    def bundle_of(self, topic: TopicName) -> tuple[str, str]:
        """(namespace, bundle) of the topic."""
        value = topic_hash(topic)
        low, high = 0, len(self._names) - 1
        while low < high:  # the last bundle whose lower bound is <= value
            middle = (low + high + 1) // 2
            if self._boundaries[middle] <= value:
                low = middle
            else:
                high = middle - 1
        return f"{topic.tenant}/{topic.namespace}", self._names[low]

    def check_bundle(self, bundle: str) -> str:
        """The bundle name if it is one of this cluster's; InvalidRequestError if not."""
        if bundle not in self._names:
            raise InvalidRequestError(
                f"bundle {bundle!r} is not a bundle of this cluster; "
                f"one of {', '.join(self._names)}"
            )
        return bundle

    def owner(self, topic: TopicName) -> BrokerAddress:
        """The broker owning the topic's bundle, assigning it if it has no owner.
        UnavailableError when no broker is live."""
        key = self.bundle_of(topic)
        index = self.owners.get(key)
        if index is None:
            index = self._assign(key)
        return self.brokers[index]

    def _assign(self, key: tuple[str, str]) -> int:
        live = [broker.index for broker in self.brokers if broker.alive]
        if not live:
            raise ServiceNotReadyError("no broker of the cluster is up; retry")
        passed = self._passed_over.pop(key, None)
        if passed is not None and len(live) > 1 and passed in live:
            live.remove(passed)
        index = min(live, key=lambda candidate: (self._owned[candidate], candidate))
        self.owners[key] = index
        self._owned[index] += 1
        return index

    def bundles_of(self, index: int) -> list[tuple[str, str]]:
        """The bundles broker ``index`` owns. O(owned bundles of the cluster)."""
        return [key for key, owner in self.owners.items() if owner == index]

    def begin_unload(self, key: tuple[str, str]) -> None:
        """The bundle's unload has begun: its owner refuses to load its topics (as
        Pulsar disables an owned bundle before unloading it) until ``release``."""
        if key in self.owners:
            self._unloading.add(key)

    def is_unloading(self, topic: TopicName) -> bool:
        """Whether the topic's bundle is being unloaded. O(1) while no unload runs."""
        return bool(self._unloading) and self.bundle_of(topic) in self._unloading

    def release(self, key: tuple[str, str], unloaded: bool = False) -> None:
        """The bundle has no owner any more (its topics are unloaded); ``unloaded``: an
        admin unload, so its next assignment passes over the broker that had it."""
        self._unloading.discard(key)
        index = self.owners.pop(key, None)
        if index is None:
            return
        self._owned[index] -= 1
        if unloaded:
            self._passed_over[key] = index

    def release_all(self, index: int) -> None:
        """Every bundle of broker ``index`` loses its owner (the broker is gone)."""
        for key in self.bundles_of(index):
            self.release(key)
