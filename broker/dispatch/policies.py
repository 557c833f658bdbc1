"""Namespace and topic policies, kept as Pulsar keeps them: durable in the metadata store,
read from memory.

Records:

- ``namespace/{t}/{ns}`` -> the namespace's Pulsar ``Policies`` JSON, holding only the
  fields that were set (``{}`` for a new namespace), under Pulsar's field names:
  ``retention_policies``, ``backlog_quota_map``, ``message_ttl_in_seconds``,
  ``deduplicationEnabled``, ``schema_compatibility_strategy``, ...
- ``topic-policies/{t}/{ns}/{topic}`` -> the topic-level policies set on one topic.
  Pulsar keeps these in a system topic (``__change_events``) under ``TopicPolicies``'
  field names (``retentionPolicies``, ``messageTTLInSeconds``); brokerlab keeps them in
  their own metadata records, under the *namespace* field names, so one name reaches
  both levels (``effective``). A deliberate difference: no system topic is created.

Reads (``namespace``, ``topic``, ``effective``) are synchronous dictionary lookups, O(1).
Writes are async: the record is written (durable under the store's sync mode), then the
memory copy changes, then the watchers hear of it. Writes are serialised by one lock
(policy changes are rare; a read-modify-write of a record must not interleave with
another). Values are JSON values and are returned as stored: callers must not mutate them.

The store loads every record once (``load``; the cluster does it when it opens its
storage). Before that, reads see nothing; every write loads first. Loading also writes
the standalone defaults (tenant ``public``, namespace ``public/default``) the first time
a metadata store is used, as Pulsar's standalone mode creates them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import orjson

from broker.dispatch.errors import ConflictError, NotFoundError
from broker.dispatch.names import TopicName
from broker.dispatch.partitions import partition_of
from storage_stub.bookie.api import MetadataStore

log = logging.getLogger(__name__)

TENANT_PREFIX = "tenant/"
NAMESPACE_PREFIX = "namespace/"
TOPIC_POLICIES_PREFIX = "topic-policies/"
#: written once the standalone defaults exist, so deleting them sticks
DEFAULTS_KEY = "registry/standalone-defaults"
DEFAULT_TENANT = "public"
DEFAULT_NAMESPACE = "default"

#: Pulsar's Policies field names brokerlab acts on (others are stored and shown as given)
RETENTION = "retention_policies"
BACKLOG_QUOTA = "backlog_quota_map"
MESSAGE_TTL = "message_ttl_in_seconds"
DEDUPLICATION = "deduplicationEnabled"
SCHEMA_COMPATIBILITY = "schema_compatibility_strategy"

#: a namespace's scope in watch callbacks: (tenant, namespace)
NamespaceScope = tuple[str, str]
PolicyWatcher = Callable[[TopicName | NamespaceScope, str], None]


def namespace_key(tenant: str, namespace: str) -> str:
    return f"{NAMESPACE_PREFIX}{tenant}/{namespace}"


def topic_policies_key(topic: TopicName) -> str:
    return f"{TOPIC_POLICIES_PREFIX}{topic.tenant}/{topic.namespace}/{topic.local_name}"


class PolicyStore:
    """Namespace and topic policies: O(1) reads from memory, durable async writes,
    watchers told of each change. One per metadata store (a cluster's brokers share it)."""

    def __init__(self, metadata: MetadataStore, cluster: str) -> None:
        self._metadata = metadata
        self._cluster = cluster
        #: (tenant, namespace) -> the namespace's Policies fields that are set
        self._namespaces: dict[NamespaceScope, dict[str, Any]] = {}
        #: topic -> its topic-level policies (absent: none set)
        self._topics: dict[TopicName, dict[str, Any]] = {}
        self._watchers: list[PolicyWatcher] = []
        self._loaded = False
        self._lock = asyncio.Lock()

    # ------------------------------------------------------------------ loading

    async def load(self) -> None:
        """Write the standalone defaults if this metadata store never had them, then read
        every namespace and topic-policy record. Idempotent. O(records)."""
        if self._loaded:
            return
        async with self._lock:
            await self._load_locked()

    async def _load_locked(self) -> None:
        if self._loaded:
            return
        metadata = self._metadata
        if await metadata.get(DEFAULTS_KEY) is None:
            tenant_info = {"adminRoles": [], "allowedClusters": [self._cluster]}
            await metadata.put(TENANT_PREFIX + DEFAULT_TENANT, orjson.dumps(tenant_info))
            await metadata.put(namespace_key(DEFAULT_TENANT, DEFAULT_NAMESPACE), b"{}")
            await metadata.put(DEFAULTS_KEY, b"1")
        for key in await metadata.keys_with_prefix(NAMESPACE_PREFIX):
            tenant, _, namespace = key[len(NAMESPACE_PREFIX) :].partition("/")
            raw = await metadata.get(key)
            if raw is not None:
                self._namespaces[(tenant, namespace)] = orjson.loads(raw) or {}
        for key in await metadata.keys_with_prefix(TOPIC_POLICIES_PREFIX):
            raw = await metadata.get(key)
            if raw is not None:
                tenant, namespace, local = key[len(TOPIC_POLICIES_PREFIX) :].split("/", 2)
                self._topics[TopicName(tenant, namespace, local)] = orjson.loads(raw)
        self._loaded = True

    # ------------------------------------------------------------------ watchers

    def watch(self, callback: PolicyWatcher) -> Callable[[], None]:
        """Call ``callback(scope, name)`` after each change of a policy (scope: the
        TopicName, or the (tenant, namespace) pair). Returns the function that stops it."""
        self._watchers.append(callback)

        def unwatch() -> None:
            if callback in self._watchers:
                self._watchers.remove(callback)

        return unwatch

    def _changed(self, scope: TopicName | NamespaceScope, name: str) -> None:
        for callback in list(self._watchers):
            try:
                callback(scope, name)
            except Exception:  # one watcher's bug must not undo a durable write
                log.exception("policy watcher failed on %s %s", scope, name)

    # ------------------------------------------------------------------ namespaces

    def namespace_exists(self, tenant: str, namespace: str) -> bool:
        """O(1)."""
        return (tenant, namespace) in self._namespaces

    def namespaces_of(self, tenant: str) -> list[str]:
        """The namespaces of ``tenant`` (local names, sorted). O(namespaces)."""
        return sorted(ns for (t, ns) in self._namespaces if t == tenant)

    def namespace_policies(self, tenant: str, namespace: str) -> dict[str, Any] | None:
        """Every policy set on the namespace (do not mutate), None if it does not exist.
        O(1)."""
        return self._namespaces.get((tenant, namespace))

    def namespace(self, tenant: str, namespace: str, name: str) -> Any | None:
        """The namespace's policy ``name``, None if unset (or no such namespace). O(1)."""
        policies = self._namespaces.get((tenant, namespace))
        return None if policies is None else policies.get(name)

    async def create_namespace(self, tenant: str, namespace: str) -> None:
        """Write the namespace's record, with no policy set. ConflictError if it exists."""
        async with self._lock:
            await self._load_locked()
            if (tenant, namespace) in self._namespaces:
                raise ConflictError(f"namespace {tenant}/{namespace} already exists")
            await self._metadata.put(namespace_key(tenant, namespace), b"{}")
            self._namespaces[(tenant, namespace)] = {}

    async def delete_namespace(self, tenant: str, namespace: str) -> None:
        """Delete the namespace's record and the topic policies of its topics.
        NotFoundError if it does not exist. O(topics with policies)."""
        async with self._lock:
            await self._load_locked()
            if (tenant, namespace) not in self._namespaces:
                raise NotFoundError(f"namespace {tenant}/{namespace} does not exist")
            for topic in [
                t for t in self._topics if (t.tenant, t.namespace) == (tenant, namespace)
            ]:
                await self._metadata.delete(topic_policies_key(topic))
                del self._topics[topic]
            await self._metadata.delete(namespace_key(tenant, namespace))
            del self._namespaces[(tenant, namespace)]

    async def set_namespace(self, tenant: str, namespace: str, name: str, value: Any) -> None:
        """Set the namespace's policy ``name`` (a JSON value). NotFoundError if the
        namespace does not exist; then nothing changes."""
        await self._update_namespace(tenant, namespace, name, value, remove=False)

    async def remove_namespace(self, tenant: str, namespace: str, name: str) -> None:
        """Unset the namespace's policy ``name`` (nothing if unset). NotFoundError if the
        namespace does not exist."""
        await self._update_namespace(tenant, namespace, name, None, remove=True)

    async def _update_namespace(
        self, tenant: str, namespace: str, name: str, value: Any, remove: bool
    ) -> None:
        async with self._lock:
            await self._load_locked()
            current = self._namespaces.get((tenant, namespace))
            if current is None:
                raise NotFoundError(f"Namespace {tenant}/{namespace} does not exist")
            if remove and name not in current:
                return
            updated = dict(current)
            if remove:
                del updated[name]
            else:
                updated[name] = value
            await self._metadata.put(namespace_key(tenant, namespace), orjson.dumps(updated))
            self._namespaces[(tenant, namespace)] = updated
        self._changed((tenant, namespace), name)

    # ------------------------------------------------------------------ topics

    @staticmethod
    def topic_key(topic: TopicName) -> TopicName:
        """Whose topic-level policies ``topic`` has: a partition has its partitioned
        topic's, as in Pulsar; any other topic its own. O(1)."""
        partition = partition_of(topic)
        return topic if partition is None else partition[0]

    def topic_policies(self, topic: TopicName) -> dict[str, Any]:
        """Every topic-level policy of ``topic`` (do not mutate). O(1)."""
        return self._topics.get(self.topic_key(topic)) or {}

    def topic(self, topic: TopicName, name: str) -> Any | None:
        """The topic-level policy ``name`` of ``topic`` (a partition: of its partitioned
        topic), None if unset. O(1)."""
        policies = self._topics.get(self.topic_key(topic))
        return None if policies is None else policies.get(name)

    async def set_topic(self, topic: TopicName, name: str, value: Any) -> None:
        """Set the topic-level policy ``name`` (a JSON value); on a partition's name, its
        partitioned topic's. The watchers hear the key's name (see ``topic_key``)."""
        await self._update_topic(self.topic_key(topic), name, value, remove=False)

    async def remove_topic(self, topic: TopicName, name: str) -> None:
        """Unset the topic-level policy ``name`` (nothing if unset)."""
        await self._update_topic(self.topic_key(topic), name, None, remove=True)

    async def drop_topic(self, topic: TopicName) -> None:
        """Forget every topic-level policy stored under ``topic`` (the topic, or the
        partitioned topic, was deleted), without telling the watchers: there is no topic
        left to react."""
        async with self._lock:
            await self._load_locked()
            if topic in self._topics:
                await self._metadata.delete(topic_policies_key(topic))
                del self._topics[topic]

    async def _update_topic(self, topic: TopicName, name: str, value: Any, remove: bool) -> None:
        async with self._lock:
            await self._load_locked()
            current = self._topics.get(topic, {})
            if remove and name not in current:
                return
            updated = dict(current)
            if remove:
                del updated[name]
            else:
                updated[name] = value
            key = topic_policies_key(topic)
            if updated:
                await self._metadata.put(key, orjson.dumps(updated))
                self._topics[topic] = updated
            else:
                await self._metadata.delete(key)
                self._topics.pop(topic, None)
        self._changed(topic, name)

    # ------------------------------------------------------------------ resolution

    def effective(self, topic: TopicName, name: str, default: Any) -> Any:
        """The policy that applies to ``topic``: its own, else its namespace's, else
        ``default`` (the broker config's). O(1)."""
        value = self.topic(topic, name)
        if value is not None:
            return value
        value = self.namespace(topic.tenant, topic.namespace, name)
        return default if value is None else value
