"""What a topic does with the schemas its clients bring, as Pulsar's ``AbstractTopic`` and
``ServerCnx`` do, once for every front end:

- a producer's schema is added to the topic's (or found there) and its version given
  back, for the client to stamp on every message (Pulsar's ``tryAddSchema`` /
  ``addSchema``); a producer without one is refused on a topic that has a schema only
  when schema validation is enforced;
- a consumer's schema is added when the topic is idle (no schema, no producers, no
  consumers other than AUTO_CONSUME ones, nothing stored), and otherwise must read the
  topic's schema (``addSchemaIfIdleOrCheckCompatible``);
- the strategy, auto-update and validation settings of a topic: the policies
  (topic, then namespace) when set, else broker.conf's ``schemaCompatibilityStrategy``
  (FULL), ``isAllowAutoUpdateSchemaEnabled`` (true), ``isSchemaValidationEnforced``
  (false).

Each call costs a few metadata reads (the registry caches nothing); they happen when a
client creates a producer or consumer, never per message.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from broker.dispatch.errors import IncompatibleSchemaError
from broker.dispatch.names import TopicName
from broker.dispatch.partitions import partition_of
from broker.dispatch.schema_registry import (
    AUTO_CONSUME,
    NONE,
    STRATEGIES,
    SchemaData,
    SchemaRegistry,
    schema_id,
)

if TYPE_CHECKING:
    from broker.dispatch.topic import PersistentTopic

#: Pulsar's Policies field names of the schema rules
STRATEGY_POLICY = "schema_compatibility_strategy"
AUTO_UPDATE_POLICY = "is_allow_auto_update_schema"
VALIDATION_POLICY = "schema_validation_enforced"


class Policies(Protocol):
    """The policy store's resolution (``broker.dispatch.policies.PolicyStore``)."""

    def effective(self, topic: TopicName, name: str, default: Any) -> Any: ...


class TopicSchemas:
    """The schema rules of topics over one registry. Stateless besides its settings."""

    def __init__(
        self,
        registry: SchemaRegistry,
        strategy: str = "FULL",
        auto_update: bool = True,
        validation_enforced: bool = False,
        policies: Policies | None = None,
    ) -> None:
        self.registry = registry
        self._strategy = strategy
        self._auto_update = auto_update
        self._validation_enforced = validation_enforced
        self._policies = policies

    def _policy(self, name: TopicName, policy: str, default: Any) -> Any:
        """A partition follows its partitioned topic's policies (set on that name)."""
        if self._policies is None:
            return default
        base = partition_of(name)
        return self._policies.effective(base[0] if base else name, policy, default)

    def strategy(self, name: TopicName) -> str:
        """schemaCompatibilityStrategy: topic policy, namespace policy, broker.conf."""
        value = self._policy(name, STRATEGY_POLICY, None)
        return value if value in STRATEGIES else self._strategy  # UNDEFINED: not set

    def auto_update(self, name: TopicName) -> bool:
        """isAllowAutoUpdateSchema: namespace policy, else broker.conf."""
        value = self._policy(name, AUTO_UPDATE_POLICY, None)
        return value if isinstance(value, bool) else self._auto_update

    def validation_enforced(self, name: TopicName) -> bool:
        """schemaValidationEnforced: topic or namespace policy, else broker.conf."""
        value = self._policy(name, VALIDATION_POLICY, None)
        return value if isinstance(value, bool) else self._validation_enforced

    async def add_schema(self, name: TopicName, schema: SchemaData) -> int:
        """The version of ``schema`` on the topic: registered if new and compatible (with
        auto-update on), or the version it already has (auto-update off: only that).
        IncompatibleSchemaError, InvalidSchemaError."""
        registry = self.registry
        sid = schema_id(name)
        if self.auto_update(name):
            return await registry.put_if_absent(sid, schema, self.strategy(name))
        found = registry.find(await registry.live_versions(sid), schema)
        if found is None:
            raise IncompatibleSchemaError("Schema not found and schema auto updating is disabled.")
        return found

    async def producer_schema(
        self, topic: PersistentTopic, schema: SchemaData | None
    ) -> int | None:
        """A producer's schema (None or NONE: bytes) on ``topic``: the version it sends
        with, None for none. IncompatibleSchemaError, InvalidSchemaError: refused."""
        if schema is not None and schema.type != NONE:
            return await self.add_schema(topic.name, schema)
        if self.validation_enforced(topic.name) and await self.registry.has_schema(
            schema_id(topic.name)
        ):
            raise IncompatibleSchemaError(
                "Producers cannot connect or send message without a schema to topics with a "
                "schema if SchemaValidationEnforced is enabled"
            )
        return None

    async def consumer_schema(self, topic: PersistentTopic, schema: SchemaData | None) -> None:
        """A consumer's schema on ``topic`` (None, NONE and AUTO_CONSUME: nothing to check).
        IncompatibleSchemaError, InvalidSchemaError: refused."""
        if schema is None or schema.type in (NONE, AUTO_CONSUME):
            return
        name = topic.name
        sid = schema_id(name)
        in_use = (
            bool(topic.producers)
            or topic.ledger.total_size() > 0
            or any(
                not consumer.auto_consume_schema
                for subscription in topic.subscriptions.values()
                for consumer in subscription.consumers
            )
        )
        if in_use or await self.registry.has_schema(sid):
            await self.registry.check_consumer(sid, schema, self.strategy(name))
        else:
            await self.add_schema(name, schema)
