"""Avro schemas as Pulsar's schema registry reads them: the declaration rules of the Avro
specification ("Schema Declaration") to parse one, and its schema-resolution rules
("Schema Resolution") to tell whether a reader schema can read what a writer schema
wrote. Pulsar's AVRO and JSON (and PROTOBUF) schemas are Avro schemas in JSON; its
compatibility strategies are these checks in one or both directions
(:mod:`broker.dispatch.schema_registry`).

Written here from the specification, checked against what Avro's Java
``SchemaCompatibility`` (which Pulsar's broker calls) answers: names compare unqualified
(or through the reader's aliases), a reader field missing from the writer needs a default
(``"default": null`` counts), writer enum symbols the reader lacks need the reader's enum
default, the promotions int→long/float/double, long→float/double, float→double and
string↔bytes. Defaults are not validated (Pulsar's parser does not either).

Pure and synchronous; parsing is O(size of the schema), a check O(size of both schemas)
(each pair of named types is compared once, which also ends recursive types).
"""

from __future__ import annotations

import re
from typing import Any

PRIMITIVES = frozenset(("null", "boolean", "int", "long", "float", "double", "bytes", "string"))
NAMED = frozenset(("record", "error", "enum", "fixed"))
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
#: writer type -> reader types that read it (the specification's promotions)
_PROMOTIONS = {
    "int": frozenset(("long", "float", "double")),
    "long": frozenset(("float", "double")),
    "float": frozenset(("double",)),
    "string": frozenset(("bytes",)),
    "bytes": frozenset(("string",)),
}


class AvroSchemaError(ValueError):
    """The text is not a valid Avro schema."""


class Field:
    """A record field: its name, aliases, type and whether it has a default."""

    __slots__ = ("aliases", "has_default", "name", "type")

    def __init__(self, name: str, type_: AvroType, has_default: bool, aliases: frozenset[str]):
        self.name = name
        self.type = type_
        self.has_default = has_default
        self.aliases = aliases


class AvroType:
    """One node of a parsed schema. ``kind`` is a primitive name or ``record`` (errors
    too), ``enum``, ``fixed``, ``array``, ``map``, ``union``. Named types have their full
    ``name`` and the full names of their ``aliases``."""

    __slots__ = (
        "aliases",
        "branches",
        "enum_default",
        "fields",
        "items",
        "kind",
        "name",
        "size",
        "symbols",
    )

    def __init__(self, kind: str, name: str = "") -> None:
        self.kind = kind
        self.name = name
        self.aliases: frozenset[str] = frozenset()
        self.fields: list[Field] = []
        self.symbols: list[str] = []
        self.enum_default: str | None = None
        self.items: AvroType | None = None
        self.branches: list[AvroType] = []
        self.size = 0

    @property
    def short_name(self) -> str:
        return self.name.rpartition(".")[2]

    def describe(self) -> str:
        return f"{self.kind} {self.name}" if self.name else self.kind


# ---------------------------------------------------------------------- parsing


def parse(definition: Any) -> AvroType:
    """The schema declared by ``definition`` (JSON already decoded: a string, an object or
    an array). AvroSchemaError naming the first rule it breaks. O(size)."""
    return _Parser().parse(definition, "")


class _Parser:
    __slots__ = ("names",)

    def __init__(self) -> None:
        #: full name -> named type, as defined so far (a name is usable after its
        #: definition, and inside it: recursive types)
        self.names: dict[str, AvroType] = {}

    def parse(self, node: Any, namespace: str) -> AvroType:
        if isinstance(node, str):
            return self._reference(node, namespace)
        if isinstance(node, list):
            return self._union(node, namespace)
        if isinstance(node, dict):
            return self._object(node, namespace)
        raise AvroSchemaError(f"a schema is a string, an object or an array, not {node!r}")

    def _reference(self, name: str, namespace: str) -> AvroType:
        if name in PRIMITIVES:
            return AvroType(name)
        full = name if "." in name else (f"{namespace}.{name}" if namespace else name)
        found = self.names.get(full) or self.names.get(name)
        if found is None:
            raise AvroSchemaError(f"{name!r} is not a defined type")
        return found

    def _union(self, branches: list[Any], namespace: str) -> AvroType:
        union = AvroType("union")
        seen: set[str] = set()
        for branch in branches:
            parsed = self.parse(branch, namespace)
            if parsed.kind == "union":
                raise AvroSchemaError("a union cannot hold a union directly")
            key = parsed.name or parsed.kind
            if key in seen:
                raise AvroSchemaError(f"a union holds {key} twice")
            seen.add(key)
            union.branches.append(parsed)
        return union

    def _object(self, node: dict[str, Any], namespace: str) -> AvroType:
        kind = node.get("type")
        if kind is None:
            raise AvroSchemaError(f"no type in {node!r}")
        if not isinstance(kind, str):
            # {"type": {...}} or {"type": [...]}: a schema wrapped in an object
            return self.parse(kind, namespace)
        if kind in PRIMITIVES:
            return AvroType(kind)  # logicalType and other attributes do not change reading
        if kind in NAMED:
            return self._named(node, "record" if kind == "error" else kind, namespace)
        if kind == "array":
            if "items" not in node:
                raise AvroSchemaError("an array needs items")
            array = AvroType("array")
            array.items = self.parse(node["items"], namespace)
            return array
        if kind == "map":
            if "values" not in node:
                raise AvroSchemaError("a map needs values")
            map_ = AvroType("map")
            map_.items = self.parse(node["values"], namespace)
            return map_
        return self._reference(kind, namespace)

    def _full_name(self, node: dict[str, Any], namespace: str) -> tuple[str, str]:
        """The full name of a named type and the namespace its members resolve in."""
        name = node.get("name")
        if not isinstance(name, str) or not name:
            raise AvroSchemaError(f"a {node.get('type')} needs a name")
        given = node.get("namespace")
        if given is not None and not isinstance(given, str):
            raise AvroSchemaError(f"namespace of {name} must be a string")
        if "." in name:
            full = name
        else:
            space = namespace if given is None else given
            full = f"{space}.{name}" if space else name
        for part in full.split("."):
            if not _NAME.match(part):
                raise AvroSchemaError(f"{full!r} is not a valid name")
        if full.rpartition(".")[2] in PRIMITIVES:
            raise AvroSchemaError(f"{full!r} redefines a primitive type")
        return full, full.rpartition(".")[0]

    def _aliases(self, node: dict[str, Any], namespace: str) -> frozenset[str]:
        aliases = node.get("aliases", [])
        if not isinstance(aliases, list) or not all(isinstance(a, str) for a in aliases):
            raise AvroSchemaError("aliases must be a list of names")
        return frozenset(a if "." in a or not namespace else f"{namespace}.{a}" for a in aliases)

    def _named(self, node: dict[str, Any], kind: str, namespace: str) -> AvroType:
        full, inner = self._full_name(node, namespace)
        if full in self.names:
            raise AvroSchemaError(f"{full} is defined twice")
        named = AvroType(kind, full)
        named.aliases = self._aliases(node, inner)
        self.names[full] = named
        if kind == "record":
            fields = node.get("fields")
            if not isinstance(fields, list):
                raise AvroSchemaError(f"record {full} needs a list of fields")
            seen: set[str] = set()
            for field in fields:
                if not isinstance(field, dict):
                    raise AvroSchemaError(f"a field of {full} is not an object")
                name = field.get("name")
                if not isinstance(name, str) or not _NAME.match(name):
                    raise AvroSchemaError(f"a field of {full} has no valid name: {name!r}")
                if name in seen:
                    raise AvroSchemaError(f"record {full} has two fields named {name}")
                seen.add(name)
                if "type" not in field:
                    raise AvroSchemaError(f"field {name} of {full} has no type")
                field_aliases = field.get("aliases", [])
                if not isinstance(field_aliases, list):
                    raise AvroSchemaError(f"aliases of field {name} must be a list")
                named.fields.append(
                    Field(
                        name,
                        self.parse(field["type"], inner),
                        "default" in field,
                        frozenset(str(a) for a in field_aliases),
                    )
                )
        elif kind == "enum":
            symbols = node.get("symbols")
            if not isinstance(symbols, list) or not all(
                isinstance(s, str) and _NAME.match(s) for s in symbols
            ):
                raise AvroSchemaError(f"enum {full} needs a list of symbols that are names")
            if len(set(symbols)) != len(symbols):
                raise AvroSchemaError(f"enum {full} repeats a symbol")
            named.symbols = list(symbols)
            default = node.get("default")
            if default is not None:
                if default not in symbols:
                    raise AvroSchemaError(f"default {default!r} of enum {full} is not a symbol")
                named.enum_default = default
        else:  # fixed
            size = node.get("size")
            if not isinstance(size, int) or isinstance(size, bool) or size < 0:
                raise AvroSchemaError(f"fixed {full} needs a size (an integer >= 0)")
            named.size = size
        return named


# ---------------------------------------------------------------------- resolution


def incompatibility(reader: AvroType, writer: AvroType) -> str | None:
    """Why data written with ``writer`` cannot be read with ``reader`` (the Avro
    specification's schema resolution), or None when it can. O(size of both)."""
    return _Resolver().check(reader, writer, "")


def can_read(reader: AvroType, writer: AvroType) -> bool:
    return incompatibility(reader, writer) is None


class _Resolver:
    __slots__ = ("_done",)

    def __init__(self) -> None:
        #: pairs of named types checked or being checked (assumed compatible meanwhile:
        #: a recursive type's inner reference meets its own pair again)
        self._done: set[tuple[int, int]] = set()

    def check(self, reader: AvroType, writer: AvroType, where: str) -> str | None:
        if writer.kind == "union":
            # every branch the writer may have written must be readable
            for branch in writer.branches:
                reason = self.check(reader, branch, where)
                if reason is not None:
                    return reason
            return None
        if reader.kind == "union":
            for branch in reader.branches:
                if self.check(branch, writer, where) is None:
                    return None
            return (
                f"{where or 'the schema'}: the reader's union has no branch for {writer.describe()}"
            )
        if reader.kind != writer.kind:
            if reader.kind in _PROMOTIONS.get(writer.kind, ()):
                return None
            return _mismatch(reader, writer, where)
        kind = reader.kind
        if kind in PRIMITIVES:
            return None
        if kind in ("array", "map"):
            assert reader.items is not None and writer.items is not None
            return self.check(reader.items, writer.items, f"{where}[]")
        if reader.short_name != writer.short_name and writer.name not in reader.aliases:
            return _mismatch(reader, writer, where)
        pair = (id(reader), id(writer))
        if pair in self._done:
            return None
        self._done.add(pair)
        if kind == "fixed":
            if reader.size != writer.size:
                return f"{where or reader.name}: size {writer.size} written, {reader.size} read"
            return None
        if kind == "enum":
            missing = [s for s in writer.symbols if s not in reader.symbols]
            if missing and reader.enum_default is None:
                return f"{where or reader.name}: the reader's enum lacks symbols {missing}"
            return None
        return self._record(reader, writer, where)

    def _record(self, reader: AvroType, writer: AvroType, where: str) -> str | None:
        by_name = {field.name: field for field in writer.fields}
        for field in reader.fields:
            written = by_name.get(field.name)
            if written is None:
                written = next((by_name[a] for a in field.aliases if a in by_name), None)
            path = f"{where}.{field.name}" if where else f"{reader.short_name}.{field.name}"
            if written is None:
                if not field.has_default:
                    return f"{path}: the reader's field is not written and has no default"
                continue
            reason = self.check(field.type, written.type, path)
            if reason is not None:
                return reason
        return None


def _mismatch(reader: AvroType, writer: AvroType, where: str) -> str:
    return f"{where or 'schema'}: {writer.describe()} written, {reader.describe()} expected"
