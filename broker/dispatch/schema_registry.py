"""The schema registry, as Pulsar's ``SchemaRegistryServiceImpl``: every topic's schemas,
versioned and stored durably in the metadata store, checked against the topic's
compatibility strategy before a new version is added.

A topic's schemas are shared by its partitions: they are kept under its *schema id*,
``tenant/namespace/topic`` without the ``-partition-N`` suffix (Pulsar's
``TopicName.getSchemaName``). Each version is one record, ``schema/{id}/{version}`` ->
JSON ``{"type", "data" (base64), "properties", "timestamp", "user", "deleted"}``;
versions count from 0. A delete adds a *deleted* version (a forced one removes every
record), after which the topic has no schema and the versions before it are no longer
compared (Pulsar's ``trimDeletedSchemaAndGetList``).

Rules as Pulsar's (each looked up in its source, 3.x/4.x):

- an identical schema (same type, same definition; Avro-based ones compared parsed) gets
  the version it already has;
- otherwise the new one is validated for its type (:func:`validate`), then checked
  against the latest version, or against every version since the last delete for the
  ``*_TRANSITIVE`` strategies (:func:`check_compatible`), then stored as the next version;
- a type different from the stored one is always incompatible (except under
  ALWAYS_COMPATIBLE);
- AVRO and JSON (Avro-format) schemas are checked with the Avro specification's schema
  resolution (:mod:`broker.dispatch.avro`): BACKWARD = the new schema reads data of the
  old, FORWARD = the old reads the new, FULL = both; PROTOBUF_NATIVE keeps its root
  message name; every other type (STRING, PROTOBUF, primitives) is only refused by
  ALWAYS_INCOMPATIBLE; KEY_VALUE checks its key and value schemas each by its type.

Put and delete of one schema id run one at a time (a lock per id): on a topic's owner,
as Pulsar serializes them in its schema storage.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import time
from collections.abc import AsyncIterator, Iterable
from typing import Any

import orjson
from google.protobuf import descriptor_pb2, descriptor_pool

from broker.dispatch import avro
from broker.dispatch.errors import IncompatibleSchemaError, InvalidSchemaError
from broker.dispatch.names import TopicName
from broker.tasks import FifoLock
from storage_stub.bookie.api import MetadataStore

SCHEMA_PREFIX = "schema/"

#: Pulsar's SchemaType names by the protocol's Schema.Type numbers (PulsarApi.proto);
#: AUTO_CONSUME is 21 on the wire, a client-side type never stored
TYPE_NAMES = {
    0: "NONE",
    1: "STRING",
    2: "JSON",
    3: "PROTOBUF",
    4: "AVRO",
    5: "BOOLEAN",
    6: "INT8",
    7: "INT16",
    8: "INT32",
    9: "INT64",
    10: "FLOAT",
    11: "DOUBLE",
    12: "DATE",
    13: "TIME",
    14: "TIMESTAMP",
    15: "KEY_VALUE",
    16: "INSTANT",
    17: "LOCAL_DATE",
    18: "LOCAL_TIME",
    19: "LOCAL_DATE_TIME",
    20: "PROTOBUF_NATIVE",
    21: "AUTO_CONSUME",
}
TYPE_NUMBERS = {name: number for number, name in TYPE_NAMES.items()}
NONE, STRING, JSON, PROTOBUF, AVRO, KEY_VALUE, PROTOBUF_NATIVE, AUTO_CONSUME = (
    0,
    1,
    2,
    3,
    4,
    15,
    20,
    21,
)
#: types Pulsar compares parsed (its ``isUsingAvroSchemaParser``)
_AVRO_PARSED = frozenset((AVRO, JSON, PROTOBUF))
#: Java SchemaType names of client-side types; BYTES (-1) is stored as NONE, as Pulsar
#: stores every negative type
CLIENT_SIDE_TYPES = frozenset(("AUTO", "AUTO_CONSUME", "AUTO_PUBLISH"))

#: Pulsar's SchemaCompatibilityStrategy values (UNDEFINED: not set at that level)
STRATEGIES = (
    "ALWAYS_INCOMPATIBLE",
    "ALWAYS_COMPATIBLE",
    "BACKWARD",
    "FORWARD",
    "FULL",
    "BACKWARD_TRANSITIVE",
    "FORWARD_TRANSITIVE",
    "FULL_TRANSITIVE",
)
TRANSITIVE = frozenset(("BACKWARD_TRANSITIVE", "FORWARD_TRANSITIVE", "FULL_TRANSITIVE"))


class SchemaData:
    """One schema as a client or an admin sends it, or as stored. O(1) state."""

    __slots__ = ("data", "deleted", "properties", "timestamp", "type", "user")

    def __init__(
        self,
        type_: int,
        data: bytes,
        properties: dict[str, str] | None = None,
        timestamp: int = 0,
        user: str = "",
        deleted: bool = False,
    ) -> None:
        self.type = type_
        self.data = data
        self.properties = properties or {}
        self.timestamp = timestamp or int(time.time() * 1000)
        self.user = user
        self.deleted = deleted

    @property
    def type_name(self) -> str:
        return TYPE_NAMES.get(self.type, str(self.type))

    def to_record(self) -> bytes:
        return orjson.dumps(
            {
                "type": self.type,
                "data": base64.b64encode(self.data).decode(),
                "properties": self.properties,
                "timestamp": self.timestamp,
                "user": self.user,
                "deleted": self.deleted,
            }
        )

    @classmethod
    def from_record(cls, raw: bytes) -> SchemaData:
        record = orjson.loads(raw)
        return cls(
            record["type"],
            base64.b64decode(record["data"]),
            record["properties"],
            record["timestamp"],
            record["user"],
            record["deleted"],
        )


class StoredSchema:
    __slots__ = ("schema", "version")

    def __init__(self, version: int, schema: SchemaData) -> None:
        self.version = version
        self.schema = schema


def schema_id(name: TopicName) -> str:
    """The id a topic's schemas are kept under: ``tenant/namespace/topic`` of its
    partitioned topic (a partition's suffix removed), as Pulsar's getSchemaName."""
    local = name.local_name
    head, sep, tail = local.rpartition("-partition-")
    if sep and tail.isdigit():
        local = head
    return f"{name.tenant}/{name.namespace}/{local}"


def version_bytes(version: int) -> bytes:
    """A version as the protocol carries it: 8 bytes, big-endian (Pulsar's
    LongSchemaVersion)."""
    return version.to_bytes(8, "big", signed=True)


def version_of(raw: bytes) -> int:
    """InvalidSchemaError unless 8 bytes."""
    if len(raw) != 8:
        raise InvalidSchemaError(f"a schema version is 8 bytes, not {len(raw)}")
    return int.from_bytes(raw, "big", signed=True)


# ---------------------------------------------------------------------- validation


def _json(schema: SchemaData) -> Any:
    try:
        return orjson.loads(schema.data)
    except orjson.JSONDecodeError as error:
        raise InvalidSchemaError(
            f"Invalid schema definition data for {schema.type_name} schema: not JSON ({error})"
        ) from None


def parse_avro(schema: SchemaData) -> avro.AvroType:
    """The Avro schema of an AVRO, JSON or PROTOBUF schema. InvalidSchemaError."""
    definition = _json(schema)
    try:
        return avro.parse(definition)
    except avro.AvroSchemaError as error:
        raise InvalidSchemaError(
            f"Invalid schema definition data for {schema.type_name} schema: {error}"
        ) from None


def _is_old_json_schema(schema: SchemaData) -> bool:
    """A JSON schema in the JSON Schema format Pulsar's first JSON schemas used."""
    try:
        return isinstance(orjson.loads(schema.data), dict)
    except orjson.JSONDecodeError:
        return False


def decode_key_value(schema: SchemaData) -> tuple[SchemaData, SchemaData]:
    """The key and value schemas of a KEY_VALUE schema: its data is the key schema's and
    the value schema's definitions, each after its length (4 bytes, big-endian; -1 for
    none), their types and properties in ``key.schema.*`` / ``value.schema.*``
    (Pulsar's KeyValueSchemaInfo). InvalidSchemaError."""
    data = schema.data
    parts: list[bytes] = []
    offset = 0
    for _ in range(2):
        if len(data) < offset + 4:
            raise InvalidSchemaError("Invalid KeyValue schema data: truncated")
        length = int.from_bytes(data[offset : offset + 4], "big", signed=True)
        offset += 4
        if length < 0:
            length = 0
        if len(data) < offset + length:
            raise InvalidSchemaError("Invalid KeyValue schema data: truncated")
        parts.append(bytes(data[offset : offset + length]))
        offset += length
    props = schema.properties
    result = []
    for side, part in zip(("key", "value"), parts, strict=True):
        type_name = props.get(f"{side}.schema.type", "BYTES")
        if type_name == "BYTES":
            number = NONE
        elif type_name in TYPE_NUMBERS and type_name not in CLIENT_SIDE_TYPES:
            number = TYPE_NUMBERS[type_name]
        else:
            raise InvalidSchemaError(f"Invalid KeyValue schema: unknown {side} type {type_name}")
        nested_props: dict[str, str] = {}
        raw_props = props.get(f"{side}.schema.properties")
        if raw_props:
            try:
                loaded = orjson.loads(raw_props)
            except orjson.JSONDecodeError:
                loaded = None
            if isinstance(loaded, dict):
                nested_props = {str(k): str(v) for k, v in loaded.items()}
        result.append(SchemaData(number, part, nested_props, schema.timestamp))
    return result[0], result[1]


def _protobuf_root(schema: SchemaData) -> str:
    """The root message of a PROTOBUF_NATIVE schema (JSON with ``fileDescriptorSet``,
    base64, and ``rootMessageTypeName``), which its descriptors must define."""
    definition = _json(schema)
    if not isinstance(definition, dict):
        raise InvalidSchemaError("Invalid PROTOBUF_NATIVE schema: not a JSON object")
    root = definition.get("rootMessageTypeName")
    encoded = definition.get("fileDescriptorSet")
    if not isinstance(root, str) or not isinstance(encoded, str):
        raise InvalidSchemaError(
            "Invalid PROTOBUF_NATIVE schema: fileDescriptorSet and rootMessageTypeName required"
        )
    try:
        files = descriptor_pb2.FileDescriptorSet.FromString(base64.b64decode(encoded))
        pool = descriptor_pool.DescriptorPool()
        for file in files.file:
            pool.Add(file)
        pool.FindMessageTypeByName(root)
    except (binascii.Error, ValueError, KeyError, TypeError) as error:
        raise InvalidSchemaError(f"Invalid PROTOBUF_NATIVE schema: {error}") from None
    except Exception as error:  # the protobuf runtime's own DecodeError
        raise InvalidSchemaError(f"Invalid PROTOBUF_NATIVE schema: {error}") from None
    return root


def validate(schema: SchemaData) -> None:
    """InvalidSchemaError unless the definition is well formed for its type, as Pulsar's
    SchemaDataValidator: AVRO, JSON and PROTOBUF parse as Avro (JSON also in the old
    JSON Schema form); PROTOBUF_NATIVE's descriptors define its root message; STRING's
    data is empty (or ``null``, as the Python client sends); the other primitives' data
    is empty; KEY_VALUE's key and value schemas each validate; NONE carries nothing to
    check; client-side types (AUTO_CONSUME) are refused. O(size of the definition)."""
    kind = schema.type
    if kind in (AVRO, JSON, PROTOBUF):
        try:
            parse_avro(schema)
        except InvalidSchemaError:
            if kind != JSON or not _is_old_json_schema(schema):
                raise
    elif kind == PROTOBUF_NATIVE:
        _protobuf_root(schema)
    elif kind == STRING:
        if schema.data and schema.data != b"null":
            raise InvalidSchemaError(
                f"Invalid schema definition data for string schema: {schema.data[:64]!r}"
            )
    elif kind == KEY_VALUE:
        key, value = decode_key_value(schema)
        validate(key)
        validate(value)
    elif kind == NONE:
        return
    elif kind == AUTO_CONSUME:
        raise InvalidSchemaError("Schema AUTO_CONSUME is a client-side schema type")
    elif kind in TYPE_NAMES:
        if schema.data:
            raise InvalidSchemaError(
                "Invalid schema definition data for primitive schemas: length of schema data "
                f"should be zero, but {len(schema.data)} bytes is found"
            )
    else:
        raise InvalidSchemaError(f"Unknown schema type: {kind}")


def same_schema(a: SchemaData, b: SchemaData) -> bool:
    """Whether two schemas are one: same type and definition (Avro-based ones compared
    parsed: whitespace and key order aside; ``doc`` is ignored, as Avro's equality does)."""
    if a.type != b.type:
        return False
    if a.data == b.data:
        return True
    if a.type in _AVRO_PARSED:
        try:
            return _normal(orjson.loads(a.data)) == _normal(orjson.loads(b.data))
        except orjson.JSONDecodeError:
            return False
    return False


def _normal(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _normal(v) for k, v in value.items() if k != "doc"}
    if isinstance(value, list):
        return [_normal(v) for v in value]
    return value


# ---------------------------------------------------------------------- compatibility


def check_compatible(existing: list[SchemaData], new: SchemaData, strategy: str) -> None:
    """IncompatibleSchemaError unless ``new`` may follow ``existing`` (oldest first: the
    versions to compare with, the latest alone or all since the last delete) under
    ``strategy``. O(size of the schemas compared)."""
    if strategy == "ALWAYS_COMPATIBLE" or not existing:
        return
    for old in existing:
        if old.type != new.type:
            raise IncompatibleSchemaError(
                f"Incompatible schema: exists schema type {old.type_name}, "
                f"new schema type {new.type_name}"
            )
    _check_by_type(existing, new, strategy)


def _check_by_type(existing: list[SchemaData], new: SchemaData, strategy: str) -> None:
    kind = new.type
    if kind in (AVRO, JSON):
        _check_avro(existing, new, strategy)
    elif kind == KEY_VALUE:
        keys, values = zip(*(decode_key_value(old) for old in existing), strict=True)
        new_key, new_value = decode_key_value(new)
        for olds, part in ((keys, new_key), (values, new_value)):
            check_compatible(list(olds), part, strategy)
    elif kind == PROTOBUF_NATIVE:
        if strategy == "ALWAYS_INCOMPATIBLE":
            raise IncompatibleSchemaError("Schema compatibility strategy is ALWAYS_INCOMPATIBLE")
        root = _protobuf_root(new)
        for old in existing:
            if _protobuf_root(old) != root:
                raise IncompatibleSchemaError(
                    f"Protobuf root message isn't allow change! ({_protobuf_root(old)} -> {root})"
                )
    elif strategy == "ALWAYS_INCOMPATIBLE":
        raise IncompatibleSchemaError("Schema compatibility strategy is ALWAYS_INCOMPATIBLE")


def _check_avro(existing: list[SchemaData], new: SchemaData, strategy: str) -> None:
    if new.type == JSON and len(existing) == 1:
        # Pulsar's JsonSchemaCompatibilityCheck: a schema in the old JSON Schema form on
        # either side is accepted (it replaces, or is replaced by, the Avro form); two
        # old forms must have the same id
        old = existing[0]
        old_avro, new_avro = _avro_or_none(old), _avro_or_none(new)
        if old_avro is None or new_avro is None:
            if (
                old_avro is None
                and new_avro is None
                and _json(old).get("id") != _json(new).get("id")
            ):
                raise IncompatibleSchemaError("Incompatible JSON schemas: their ids differ")
            return
    if strategy == "ALWAYS_INCOMPATIBLE":
        raise IncompatibleSchemaError("Schema compatibility strategy is ALWAYS_INCOMPATIBLE")
    try:
        new_schema = parse_avro(new)
        olds = [parse_avro(old) for old in existing]
    except InvalidSchemaError as error:
        raise IncompatibleSchemaError(str(error)) from None
    base = strategy.removesuffix("_TRANSITIVE")
    for old_schema in reversed(olds):  # the latest first, as Avro's validator reports
        reasons = []
        if base in ("BACKWARD", "FULL"):
            reasons.append(avro.incompatibility(new_schema, old_schema))
        if base in ("FORWARD", "FULL"):
            reasons.append(avro.incompatibility(old_schema, new_schema))
        reason = next((r for r in reasons if r is not None), None)
        if reason is not None:
            raise IncompatibleSchemaError(
                f"Error during schema compatibility check with strategy {strategy}: {reason}"
            )


def _avro_or_none(schema: SchemaData) -> avro.AvroType | None:
    try:
        return parse_avro(schema)
    except InvalidSchemaError:
        return None


# ---------------------------------------------------------------------- the registry


def _key(schema: str, version: int) -> str:
    return f"{SCHEMA_PREFIX}{schema}/{version:020d}"


class SchemaRegistry:
    """Every topic's schemas in the metadata store. Reads cost one prefix scan of the
    topic's versions (a handful of keys) plus one get per version read; a put or delete
    writes one record. Nothing is cached: brokers of a cluster share the store, and a
    topic's owner may change between two calls."""

    def __init__(self, metadata: MetadataStore) -> None:
        self._metadata = metadata
        #: schema id -> (its lock, how many calls hold or wait for it); an entry lives
        #: only while a put or delete of that id is under way
        self._locks: dict[str, tuple[FifoLock, list[int]]] = {}

    @contextlib.asynccontextmanager
    async def _exclusive(self, schema: str) -> AsyncIterator[None]:
        """One put or delete of ``schema`` at a time. O(1)."""
        entry = self._locks.get(schema)
        if entry is None:
            entry = self._locks[schema] = (FifoLock(), [0])
        lock, users = entry
        users[0] += 1
        try:
            async with lock:
                yield
        finally:
            users[0] -= 1
            if not users[0]:
                del self._locks[schema]

    async def _versions(self, schema: str) -> list[int]:
        prefix = f"{SCHEMA_PREFIX}{schema}/"
        keys = await self._metadata.keys_with_prefix(prefix)
        return sorted(int(key[len(prefix) :]) for key in keys)

    async def _read(self, schema: str, version: int) -> StoredSchema | None:
        raw = await self._metadata.get(_key(schema, version))
        return None if raw is None else StoredSchema(version, SchemaData.from_record(raw))

    async def all_versions(self, schema: str) -> list[StoredSchema]:
        """Every stored version, deleted markers included, oldest first."""
        found = []
        for version in await self._versions(schema):
            stored = await self._read(schema, version)
            if stored is not None:
                found.append(stored)
        return found

    async def live_versions(self, schema: str) -> list[StoredSchema]:
        """The versions since the last delete (none if the latest is a delete)."""
        versions = await self.all_versions(schema)
        for index in range(len(versions) - 1, -1, -1):
            if versions[index].schema.deleted:
                return versions[index + 1 :]
        return versions

    async def latest(self, schema: str) -> StoredSchema | None:
        """The latest version, None when there is none or it is a delete."""
        versions = await self._versions(schema)
        if not versions:
            return None
        stored = await self._read(schema, versions[-1])
        return None if stored is None or stored.schema.deleted else stored

    async def get(self, schema: str, version: int | None = None) -> StoredSchema | None:
        """``version`` (None: the latest); None if it does not exist, was deleted, or
        precedes the last delete (as Pulsar, which cannot read those back)."""
        if version is None:
            return await self.latest(schema)
        for stored in await self.live_versions(schema):
            if stored.version == version:
                return stored
        return None

    async def has_schema(self, schema: str) -> bool:
        return await self.latest(schema) is not None

    @staticmethod
    def find(versions: Iterable[StoredSchema], new: SchemaData) -> int | None:
        for stored in versions:
            if same_schema(stored.schema, new):
                return stored.version
        return None

    async def put_if_absent(self, schema: str, new: SchemaData, strategy: str) -> int:
        """The version of ``new``: the one an identical schema has, or the next one after
        validating it and checking it against the live versions under ``strategy``
        (InvalidSchemaError, IncompatibleSchemaError: nothing stored)."""
        validate(new)
        async with self._exclusive(schema):
            versions = await self.all_versions(schema)
            live = _live(versions)
            found = self.find(live, new)
            if found is not None:
                return found
            compare = live if strategy in TRANSITIVE else live[-1:]
            if compare and strategy not in TRANSITIVE and same_schema(compare[0].schema, new):
                return compare[0].version
            check_compatible([s.schema for s in compare], new, strategy)
            version = versions[-1].version + 1 if versions else 0
            await self._metadata.put(_key(schema, version), new.to_record())
            return version

    async def check(self, schema: str, new: SchemaData, strategy: str) -> None:
        """Whether ``new`` could be added (Pulsar's isCompatible / checkCompatible):
        IncompatibleSchemaError or InvalidSchemaError when not."""
        validate(new)
        live = await self.live_versions(schema)
        compare = live if strategy in TRANSITIVE else live[-1:]
        if compare and strategy not in TRANSITIVE and same_schema(compare[0].schema, new):
            return
        check_compatible([s.schema for s in compare], new, strategy)

    async def check_consumer(self, schema: str, new: SchemaData, strategy: str) -> None:
        """A consumer's schema on a topic in use (Pulsar's checkConsumerCompatibility):
        it must read the latest version (BACKWARD) under BACKWARD, FORWARD,
        FORWARD_TRANSITIVE and FULL, and pass ``strategy`` against every live version
        otherwise. IncompatibleSchemaError, also when the topic has no schema."""
        validate(new)
        if strategy == "ALWAYS_COMPATIBLE":
            return
        live = await self.live_versions(schema)
        if not live:
            raise IncompatibleSchemaError(
                "Failed to add schema to an active topic with empty(BYTES) schema: "
                f"new schema type {new.type_name}"
            )
        if strategy in ("BACKWARD", "FORWARD", "FORWARD_TRANSITIVE", "FULL"):
            if not same_schema(live[-1].schema, new):
                check_compatible([live[-1].schema], new, "BACKWARD")
        else:
            check_compatible([s.schema for s in live], new, strategy)

    async def delete(self, schema: str, user: str, force: bool) -> int | None:
        """Delete the topic's schema: a deleted version is added (its number returned),
        or with ``force`` every record goes (None). Nothing to delete: None."""
        async with self._exclusive(schema):
            versions = await self._versions(schema)
            if not versions:
                return None
            if force:
                for version in versions:
                    await self._metadata.delete(_key(schema, version))
                return None
            latest = await self._read(schema, versions[-1])
            if latest is not None and latest.schema.deleted:
                return latest.version
            version = versions[-1] + 1
            marker = SchemaData(NONE, b"", {}, user=user, deleted=True)
            await self._metadata.put(_key(schema, version), marker.to_record())
            return version


def _live(versions: list[StoredSchema]) -> list[StoredSchema]:
    for index in range(len(versions) - 1, -1, -1):
        if versions[index].schema.deleted:
            return versions[index + 1 :]
    return versions


async def drop_schemas(metadata: MetadataStore, name: TopicName) -> None:
    """Remove every schema version of a deleted topic, as Pulsar deletes a topic's schema
    with it: a non-partitioned topic, or a partitioned one (never on a partition's
    delete: the others still use it). O(versions)."""
    await SchemaRegistry(metadata).delete(schema_id(name), "", force=True)
