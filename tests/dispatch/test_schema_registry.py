"""The schema registry: Avro schema resolution, Pulsar's compatibility strategies,
validation of each type, and versions kept in the metadata store."""

from __future__ import annotations

import asyncio
import base64

import orjson
import pytest
from google.protobuf import descriptor_pb2, timestamp_pb2

from broker.dispatch import avro
from broker.dispatch.errors import IncompatibleSchemaError, InvalidSchemaError
from broker.dispatch.names import TopicName
from broker.dispatch.schema_registry import (
    AVRO,
    JSON,
    KEY_VALUE,
    PROTOBUF_NATIVE,
    STRATEGIES,
    STRING,
    SchemaData,
    SchemaRegistry,
    check_compatible,
    schema_id,
    validate,
)
from storage_stub.bookie.memory import InMemoryMetadataStore


def record(*fields: dict[str, object], name: str = "User") -> dict[str, object]:
    return {"type": "record", "name": name, "fields": list(fields)}


NAME = {"name": "name", "type": "string"}
AGE = {"name": "age", "type": "int"}
AGE_DEFAULT = {"name": "age", "type": "int", "default": 0}
EMAIL_OPTIONAL = {"name": "email", "type": ["null", "string"], "default": None}


def schema(definition: object, type_: int = AVRO) -> SchemaData:
    return SchemaData(type_, orjson.dumps(definition))


def compatible(old: object, new: object, strategy: str) -> bool:
    try:
        check_compatible([schema(old)], schema(new), strategy)
    except IncompatibleSchemaError:
        return False
    return True


# ---------------------------------------------------------------------- resolution


def test_a_new_field_with_a_default_passes_every_strategy() -> None:
    old, new = record(NAME), record(NAME, EMAIL_OPTIONAL)
    for strategy in ("BACKWARD", "FORWARD", "FULL"):
        assert compatible(old, new, strategy), strategy


def test_a_new_required_field_breaks_backward_and_full_not_forward() -> None:
    old, new = record(NAME), record(NAME, AGE)
    assert not compatible(old, new, "BACKWARD")  # the new reader finds no age in old data
    assert not compatible(old, new, "FULL")
    assert compatible(old, new, "FORWARD")  # the old reader ignores the new field
    assert compatible(old, new, "ALWAYS_COMPATIBLE")


def test_removing_a_field_without_default_breaks_forward_only() -> None:
    old, new = record(NAME, AGE), record(NAME)
    assert compatible(old, new, "BACKWARD")
    assert not compatible(old, new, "FORWARD")
    assert compatible(record(NAME, AGE_DEFAULT), new, "FULL")


def test_promotions_go_one_way() -> None:
    as_int = record({"name": "n", "type": "int"})
    as_long = record({"name": "n", "type": "long"})
    assert compatible(as_int, as_long, "BACKWARD")  # a long reader reads ints
    assert not compatible(as_int, as_long, "FORWARD")  # an int reader cannot read longs
    as_string = record({"name": "n", "type": "string"})
    as_bytes = record({"name": "n", "type": "bytes"})
    assert compatible(as_string, as_bytes, "FULL")


def test_union_branches_and_enum_symbols() -> None:
    narrow = record({"name": "v", "type": ["null", "string"]})
    wide = record({"name": "v", "type": ["null", "string", "int"]})
    assert compatible(narrow, wide, "BACKWARD")
    assert not compatible(narrow, wide, "FORWARD")
    small = record({"name": "c", "type": {"type": "enum", "name": "C", "symbols": ["A", "B"]}})
    big = record({"name": "c", "type": {"type": "enum", "name": "C", "symbols": ["A", "B", "D"]}})
    assert compatible(small, big, "BACKWARD")
    assert not compatible(small, big, "FORWARD")
    defaulted = {"type": "enum", "name": "C", "symbols": ["A", "B"], "default": "A"}
    assert compatible(big, record({"name": "c", "type": defaulted}), "BACKWARD")


def test_record_names_compare_unqualified_or_through_aliases() -> None:
    assert not compatible(record(NAME, name="User"), record(NAME, name="Person"), "BACKWARD")
    qualified = dict(record(NAME, name="User"), namespace="com.example")
    assert compatible(record(NAME, name="User"), qualified, "FULL")
    aliased = dict(record(NAME, name="Person"), aliases=["User"])
    assert compatible(record(NAME, name="User"), aliased, "BACKWARD")


def test_recursive_types_parse_and_resolve() -> None:
    node = {
        "type": "record",
        "name": "Node",
        "fields": [{"name": "value", "type": "int"}, {"name": "next", "type": ["null", "Node"]}],
    }
    parsed = avro.parse(node)
    assert avro.can_read(parsed, avro.parse(node))


@pytest.mark.parametrize(
    "definition",
    [
        {"type": "record", "name": "X"},  # no fields
        {"type": "record", "name": "X", "fields": [{"name": "a", "type": "Missing"}]},
        {"type": "record", "name": "1bad", "fields": []},
        {"type": "enum", "name": "E", "symbols": ["A", "A"]},
        ["null", "null"],
        {"type": "array"},
        {"type": "fixed", "name": "F"},
        42,
    ],
)
def test_invalid_avro_schemas_are_refused(definition: object) -> None:
    with pytest.raises(InvalidSchemaError):
        validate(schema(definition))


def test_validation_by_type() -> None:
    with pytest.raises(InvalidSchemaError):
        validate(SchemaData(AVRO, b"{not json"))
    validate(SchemaData(STRING, b""))
    validate(SchemaData(STRING, b"null"))  # what the Python client sends
    with pytest.raises(InvalidSchemaError):
        validate(SchemaData(STRING, b"abc"))
    validate(SchemaData(JSON, orjson.dumps({"type": "object", "id": "x"})))  # old JSON Schema form
    with pytest.raises(InvalidSchemaError):
        validate(SchemaData(8, b"x"))  # INT32 carries no definition


def key_value(key: bytes, value: bytes, value_type: str) -> SchemaData:
    data = len(key).to_bytes(4, "big") + key + len(value).to_bytes(4, "big") + value
    props = {"key.schema.type": "STRING", "value.schema.type": value_type}
    return SchemaData(KEY_VALUE, data, props)


def test_key_value_schemas_check_each_side_by_its_type() -> None:
    old = key_value(b"", orjson.dumps(record(NAME)), "AVRO")
    validate(old)
    check_compatible([old], key_value(b"", orjson.dumps(record(NAME, AGE_DEFAULT)), "AVRO"), "FULL")
    with pytest.raises(IncompatibleSchemaError):
        check_compatible([old], key_value(b"", orjson.dumps(record(NAME, AGE)), "AVRO"), "FULL")
    with pytest.raises(InvalidSchemaError):
        validate(key_value(b"", b"{oops", "AVRO"))


def test_a_different_type_is_incompatible_but_under_always_compatible() -> None:
    with pytest.raises(IncompatibleSchemaError, match="exists schema type JSON"):
        check_compatible([schema(record(NAME), JSON)], SchemaData(STRING, b""), "FULL")
    check_compatible([schema(record(NAME), JSON)], SchemaData(STRING, b""), "ALWAYS_COMPATIBLE")


def test_partitions_share_their_topic_schema_id() -> None:
    assert schema_id(TopicName.of("t", "ns", "orders-partition-3")) == "t/ns/orders"
    assert schema_id(TopicName.of("t", "ns", "orders")) == "t/ns/orders"


# ---------------------------------------------------------------------- the registry


async def test_versions_are_stored_checked_and_deleted() -> None:
    store = InMemoryMetadataStore()
    registry = SchemaRegistry(store)
    v1 = schema(record(NAME))
    assert await registry.put_if_absent("t/ns/x", v1, "FULL") == 0
    same = SchemaData(AVRO, orjson.dumps(record(NAME), option=orjson.OPT_INDENT_2))
    assert await registry.put_if_absent("t/ns/x", same, "FULL") == 0  # identical once parsed
    assert await registry.put_if_absent("t/ns/x", schema(record(NAME, EMAIL_OPTIONAL)), "FULL") == 1
    with pytest.raises(IncompatibleSchemaError):
        await registry.put_if_absent("t/ns/x", schema(record(NAME, AGE)), "FULL")
    with pytest.raises(InvalidSchemaError):
        await registry.put_if_absent("t/ns/x", SchemaData(AVRO, b"[}"), "FULL")
    assert [s.version for s in await registry.all_versions("t/ns/x")] == [0, 1]  # nothing stored

    # a registry over the same store (a restarted broker) sees the same versions
    again = SchemaRegistry(store)
    latest = await again.get("t/ns/x")
    assert latest is not None and latest.version == 1
    first = await again.get("t/ns/x", 0)
    assert first is not None and first.schema.data == v1.data

    assert await again.delete("t/ns/x", "admin", force=False) == 2
    assert await again.get("t/ns/x") is None
    assert await again.get("t/ns/x", 0) is None  # before the delete: gone for readers
    # after a delete anything goes, and versions keep counting
    assert await again.put_if_absent("t/ns/x", SchemaData(STRING, b""), "FULL") == 3


async def test_transitive_strategies_compare_every_live_version() -> None:
    registry = SchemaRegistry(InMemoryMetadataStore())
    await registry.put_if_absent("t/ns/y", schema(record(NAME, AGE)), "ALWAYS_COMPATIBLE")
    await registry.put_if_absent("t/ns/y", schema(record(NAME, AGE_DEFAULT)), "ALWAYS_COMPATIBLE")
    dropped = schema(record(NAME))
    # FORWARD with the latest: its reader has a default for age; with all: v0's has not
    await registry.check("t/ns/y", dropped, "FORWARD")
    with pytest.raises(IncompatibleSchemaError):
        await registry.check("t/ns/y", dropped, "FORWARD_TRANSITIVE")


async def test_consumer_schemas_must_read_the_latest() -> None:
    registry = SchemaRegistry(InMemoryMetadataStore())
    with pytest.raises(IncompatibleSchemaError, match="empty"):
        await registry.check_consumer("t/ns/z", schema(record(NAME)), "FULL")
    await registry.put_if_absent("t/ns/z", schema(record(NAME)), "FULL")
    await registry.check_consumer("t/ns/z", schema(record(NAME, EMAIL_OPTIONAL)), "FULL")
    with pytest.raises(IncompatibleSchemaError):
        await registry.check_consumer("t/ns/z", schema(record(NAME, AGE)), "FULL")


def protobuf_native(root: str) -> SchemaData:
    """A PROTOBUF_NATIVE schema as Pulsar's clients send it: the descriptor set of the
    root message's file, base64, and the root's name."""
    files = descriptor_pb2.FileDescriptorSet()
    timestamp_pb2.DESCRIPTOR.CopyToProto(files.file.add())
    definition = {
        "fileDescriptorSet": base64.b64encode(files.SerializeToString()).decode(),
        "rootMessageTypeName": root,
        "rootFileDescriptorName": "google/protobuf/timestamp.proto",
    }
    return SchemaData(PROTOBUF_NATIVE, orjson.dumps(definition))


def test_protobuf_native_schemas_keep_their_root_message() -> None:
    validate(protobuf_native("google.protobuf.Timestamp"))
    with pytest.raises(InvalidSchemaError):
        validate(protobuf_native("google.protobuf.Missing"))  # not in its descriptors
    with pytest.raises(InvalidSchemaError):
        validate(
            SchemaData(PROTOBUF_NATIVE, b'{"fileDescriptorSet": "!!", "rootMessageTypeName": "x"}')
        )
    old = protobuf_native("google.protobuf.Timestamp")
    check_compatible([old], protobuf_native("google.protobuf.Timestamp"), "FULL")
    with pytest.raises(IncompatibleSchemaError):
        check_compatible([old], old, "ALWAYS_INCOMPATIBLE")


class SlowStore(InMemoryMetadataStore):
    """A metadata store whose reads let other tasks run, as a disk's do."""

    async def get(self, key: str) -> bytes | None:
        await asyncio.sleep(0)
        return await super().get(key)


async def test_concurrent_puts_of_one_topic_each_get_a_version() -> None:
    """Puts of one topic run one at a time: none overwrites another's version."""
    registry = SchemaRegistry(SlowStore())
    await registry.put_if_absent("t/ns/c", schema(record(NAME)), "ALWAYS_COMPATIBLE")
    extra = [{"name": f"f{i}", "type": "int", "default": i} for i in range(5)]
    versions = await asyncio.gather(
        *(
            registry.put_if_absent("t/ns/c", schema(record(NAME, field)), "ALWAYS_COMPATIBLE")
            for field in extra
        )
    )
    assert sorted(versions) == [1, 2, 3, 4, 5]
    assert [s.version for s in await registry.all_versions("t/ns/c")] == [0, 1, 2, 3, 4, 5]


def test_the_http_model_names_the_registrys_strategies() -> None:
    # the model's Literal spells the strategies out (a type needs them literally): it
    # must say what the registry and broker.conf accept, plus UNDEFINED
    from typing import get_args

    from broker.http.models import SchemaCompatibilityStrategy

    literal = get_args(SchemaCompatibilityStrategy)[0]
    assert get_args(literal) == ("UNDEFINED", *STRATEGIES)
