"""Tenants and namespaces: the small registry Pulsar's admin clients expect.

Records in the metadata store: ``tenant/{t}`` -> Pulsar's TenantInfo
(``{"adminRoles": [...], "allowedClusters": [...]}``) and ``namespace/{t}/{ns}`` -> the
namespace's Policies, which the policy store (``broker.dispatch.policies``) owns: the
registry creates and deletes namespaces through it, so its memory stays in step.
Tenant ``public`` and namespace ``public/default`` exist from the start, as in Pulsar's
standalone mode (written when the policy store first loads, and never again once deleted).

The registry answers the admin routes; it does not gate topics: a topic may be created
in any namespace, registered or not, as brokerlab always allowed.
"""

from __future__ import annotations

import contextlib
from typing import Protocol

import orjson

from broker.dispatch.errors import ConflictError, InvalidRequestError, NotFoundError
from broker.dispatch.names import TopicName
from broker.dispatch.partitions import PartitionedTopics
from broker.dispatch.policies import TENANT_PREFIX, PolicyStore
from storage_stub.bookie.api import MetadataStore


class NamespaceTopics(Protocol):
    """What the registry needs of the broker service to delete a namespace's topics."""

    @property
    def partitions(self) -> PartitionedTopics: ...

    async def list_topics(self, tenant: str, namespace: str) -> list[str]: ...

    async def delete_topic(self, name: TopicName, force: bool) -> None: ...


class NamespaceRegistry:
    """Tenants and namespaces. Every operation is O(1) metadata calls except listings
    (one prefix scan) and deletes (which delete the topics they hold)."""

    def __init__(
        self, metadata: MetadataStore, cluster: str, owner: NamespaceTopics, policies: PolicyStore
    ) -> None:
        self._metadata = metadata
        self.cluster = cluster
        self._owner = owner
        self._policies = policies

    async def _ensure_defaults(self) -> None:
        await self._policies.load()  # writes the standalone defaults the first time

    def tenant_info(self, admin_roles: list[str], clusters: list[str] | None) -> dict[str, object]:
        """Pulsar's TenantInfo; ``clusters`` None: this cluster. InvalidRequestError for a
        cluster that is not this one."""
        if clusters is None:
            clusters = [self.cluster]
        unknown = [c for c in clusters if c != self.cluster]
        if unknown:
            raise InvalidRequestError(
                f"unknown clusters {unknown}: this broker's only cluster is {self.cluster!r}"
            )
        return {"adminRoles": admin_roles, "allowedClusters": clusters}

    # ------------------------------------------------------------------ tenants

    async def tenants(self) -> list[str]:
        await self._ensure_defaults()
        keys = await self._metadata.keys_with_prefix(TENANT_PREFIX)
        return [key[len(TENANT_PREFIX) :] for key in keys]

    async def tenant(self, tenant: str) -> dict[str, object]:
        """The TenantInfo of ``tenant``; NotFoundError if it does not exist."""
        await self._ensure_defaults()
        raw = await self._metadata.get(TENANT_PREFIX + tenant)
        if raw is None:
            raise NotFoundError(f"tenant {tenant} does not exist")
        info: dict[str, object] = orjson.loads(raw)
        return info

    async def create_tenant(self, tenant: str, info: dict[str, object]) -> None:
        """ConflictError if it exists."""
        await self._ensure_defaults()
        if await self._metadata.get(TENANT_PREFIX + tenant) is not None:
            raise ConflictError(f"tenant {tenant} already exists")
        await self._metadata.put(TENANT_PREFIX + tenant, orjson.dumps(info))

    async def delete_tenant(self, tenant: str, force: bool) -> None:
        """Delete a tenant. ConflictError while it has namespaces, unless ``force``,
        which deletes them (with their topics) first. NotFoundError if it does not exist."""
        await self.tenant(tenant)
        namespaces = await self.namespaces(tenant)
        if namespaces and not force:
            raise ConflictError(
                f"tenant {tenant} still has namespaces {namespaces}; delete them or use force=true"
            )
        for full in namespaces:
            await self.delete_namespace(tenant, full.split("/", 1)[1], force=True)
        await self._metadata.delete(TENANT_PREFIX + tenant)

    # ------------------------------------------------------------------ namespaces

    async def namespaces(self, tenant: str) -> list[str]:
        """``tenant/namespace`` names, sorted. NotFoundError if the tenant does not exist."""
        await self.tenant(tenant)
        return [f"{tenant}/{ns}" for ns in self._policies.namespaces_of(tenant)]

    async def namespace_exists(self, tenant: str, namespace: str) -> bool:
        await self._ensure_defaults()
        return self._policies.namespace_exists(tenant, namespace)

    async def create_namespace(self, tenant: str, namespace: str) -> None:
        """NotFoundError: no such tenant. ConflictError: the namespace exists."""
        await self.tenant(tenant)
        await self._policies.create_namespace(tenant, namespace)

    async def delete_namespace(self, tenant: str, namespace: str, force: bool) -> None:
        """Delete a namespace. ConflictError while it holds topics, unless ``force``,
        which deletes them first (closing their consumers). NotFoundError if it does not
        exist."""
        if not await self.namespace_exists(tenant, namespace):
            raise NotFoundError(f"namespace {tenant}/{namespace} does not exist")
        partitions = self._owner.partitions
        partitioned = await partitions.names(tenant, namespace)
        topics = await self._owner.list_topics(tenant, namespace)
        if (partitioned or topics) and not force:
            raise ConflictError(
                f"namespace {tenant}/{namespace} is not empty "
                f"({len(partitioned)} partitioned topics, {len(topics)} topics); "
                "delete them or use force=true"
            )
        for name in partitioned:
            await partitions.delete(name, force=True)
        for full in await self._owner.list_topics(tenant, namespace):
            with contextlib.suppress(NotFoundError):  # deleted meanwhile
                await self._owner.delete_topic(TopicName.parse(full), force=True)
        await self._policies.delete_namespace(tenant, namespace)
