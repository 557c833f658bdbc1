"""docs/api.md's JSON examples of answers and requests have the fields of their schemas.

``tests/http/test_openapi_doc.py`` holds docs/api.md and ``openapi_spec()`` to the same
routes and statuses; this module holds the examples of bodies to the same fields. In a
route section of docs/api.md (from its ``### `METHOD /path` — ...`` heading to the next
heading of the same or a higher level), every fenced block marked ```` ```json ```` is
an example of the route's success answer, and one marked ```` ```json request ```` is an
example of its request body, compared the same way with the request body's schema. Each
answer example must be one strict JSON value; it is compared with the JSON schema of the
route's success answer in the generated spec (``$ref`` resolved into
``components/schemas``), at every level the example shows (the answer object, or the
items of an answer array, and the objects and array items nested in them):

- a field of the example that the schema does not name fails, unless the schema takes
  any name there (``additionalProperties`` given as a schema, as for maps and for
  counters that may grow new names; such a field's value is checked against it);
- a field the schema marks required that the example leaves out fails, unless that
  object of the example is marked abbreviated.

Convention for abbreviated examples: an object of an example that shows only some of
its fields carries the key ``"..."`` (written ``"...": "..."``); that key is not a field,
and the object's missing required fields are not reported. The mark covers that one
object only, not the objects nested in it.

A route section's success line may show its answer inline instead, as a code span
starting with ``{`` or ``[`` anywhere on the line: ``- 200 — `{"consumerId": "..."}`,
...`` or ``- 200 — the names: `["a"]`.``. It is an answer
example like a fenced one, written shorter: a bare ``...`` after the last item of an
array (``["a", ...]``) or as its only item (``[...]``) means more items and is left out,
and after the last field of an object (``{"a": 1, ...}``) it marks the object
abbreviated.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from broker.http.openapi import openapi_spec
from tests.http.test_openapi_doc import API_MD, HEADING, ROUTE_HEADING, spec_routes

Json = dict[str, Any]

#: The key that marks an object of an example as abbreviated.
ABBREVIATED = "..."
#: The info strings of the fenced JSON blocks of a route section.
ANSWER_INFO = "json"
REQUEST_INFO = "json request"
#: what an inline answer (on a route's success line) is parsed as
INLINE_INFO = "json inline"
FENCE = re.compile(r"^(?P<fence>`{3,}|~{3,})(?P<info>[^`]*)$")
#: a route's success line (``- 200 — ...``), and a code span of it that is an answer
#: (``{...}`` or ``[...]``), wherever on the line
SUCCESS_LINE = re.compile(r"^- 2\d\d — ")
INLINE_ANSWER = re.compile(r"`(?P<json>[\[{][^`]*)`")
COMPONENT_PREFIX = "#/components/schemas/"


@dataclass(frozen=True)
class JsonBlock:
    """A fenced block whose info string starts with ``json``, in a route section."""

    method: str
    path: str
    line: int  # of the opening fence
    info: str
    text: str

    @property
    def where(self) -> str:
        return f"docs/api.md:{self.line} {self.method} {self.path}"


def inline_json(text: str) -> str:
    """An inline answer example as strict JSON: a bare ``...`` ending an array dropped,
    one ending an object turned into the abbreviated mark."""
    text = re.sub(r"\[\s*\.\.\.\s*\]", "[]", text)
    text = re.sub(r",\s*\.\.\.\s*\]", "]", text)
    return re.sub(r",\s*\.\.\.\s*\}", f', "{ABBREVIATED}": "{ABBREVIATED}"}}', text)


def parse_json_blocks(text: str) -> list[JsonBlock]:
    """The ``json`` fenced blocks of the route sections, and their inline answers (as
    ``json inline`` blocks), in document order. Headings inside fenced blocks are not
    headings."""
    blocks: list[JsonBlock] = []
    route: tuple[str, str, int] | None = None  # method, path, heading level
    fence: str | None = None
    info = ""
    start = 0
    body: list[str] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if fence is not None:
            stripped = line.strip()
            closing = set(stripped) == {fence[0]} and len(stripped) >= len(fence)
            if not closing:
                body.append(line)
            elif route is not None and info.split()[:1] == ["json"]:
                blocks.append(JsonBlock(route[0], route[1], start, info, "\n".join(body)))
            fence = None if closing else fence
            continue
        opening = FENCE.match(line.strip())
        if opening:
            fence, info = opening["fence"], " ".join(opening["info"].split())
            start, body = number, []
            continue
        if route is not None and SUCCESS_LINE.match(line):
            for inline in INLINE_ANSWER.finditer(line):
                example = inline_json(inline["json"])
                blocks.append(JsonBlock(route[0], route[1], number, INLINE_INFO, example))
            continue
        heading = HEADING.match(line)
        if heading:
            level, title = len(heading["level"]), heading["text"].strip()
            matched = ROUTE_HEADING.match(title)
            if matched:
                route = (matched["method"], matched["path"], level)
            elif route is not None and level <= route[2]:
                route = None
    assert fence is None, f"docs/api.md:{start}: a fenced block is never closed"
    return blocks


# --- comparing an example with a schema ---------------------------------------------------


def resolve(schema: Json, components: Json) -> Json:
    """The schema a ``$ref`` into components/schemas names (repeatedly), else itself."""
    while "$ref" in schema:
        ref = schema["$ref"]
        assert ref.startswith(COMPONENT_PREFIX), f"a $ref outside components/schemas: {ref}"
        schema = components[ref.removeprefix(COMPONENT_PREFIX)]
    return schema


def _alternatives(schema: Json, components: Json) -> list[Json]:
    """The schemas a value may match: those of an anyOf or oneOf, else the one."""
    schema = resolve(schema, components)
    assert "allOf" not in schema, f"allOf is not supported by this test: {schema}"
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return [alt for part in schema[key] for alt in _alternatives(part, components)]
    return [schema]


def _is_object(schema: Json) -> bool:
    kind = schema.get("type")
    return kind == "object" or (isinstance(kind, list) and "object" in kind)


def _is_array(schema: Json) -> bool:
    kind = schema.get("type")
    return kind == "array" or (isinstance(kind, list) and "array" in kind)


def field_drift(example: Any, schema: Json, components: Json, at: str = "$") -> list[str]:
    """What differs between the field names of ``example`` and ``schema``, one line each
    (empty when they agree). Scalars are not compared."""
    # With several alternatives of the example's kind, it must fit one of them.
    if isinstance(example, dict):
        objects = [alt for alt in _alternatives(schema, components) if _is_object(alt)]
        if not objects:
            return [f"{at}: an object where the schema has none"]
        return min((_object_drift(example, alt, components, at) for alt in objects), key=len)
    if isinstance(example, list):
        arrays = [alt for alt in _alternatives(schema, components) if _is_array(alt)]
        if not arrays:
            return [f"{at}: an array where the schema has none"]
        return min((_array_drift(example, alt, components, at) for alt in arrays), key=len)
    return []


def _object_drift(example: Json, schema: Json, components: Json, at: str) -> list[str]:
    properties: Json = schema.get("properties", {})
    additional = schema.get("additionalProperties")
    if not properties and additional is None:
        return []  # a free-form object: {"type": "object"}
    drift: list[str] = []
    for name, value in example.items():
        if name == ABBREVIATED:
            continue
        if name in properties:
            drift += field_drift(value, properties[name], components, f"{at}.{name}")
        elif isinstance(additional, dict):
            drift += field_drift(value, additional, components, f"{at}[{name!r}]")
        elif additional is not True:
            drift.append(f"{at}: field {name!r} is not in the schema")
    if ABBREVIATED not in example:
        for name in schema.get("required", []):
            if name not in example:
                drift.append(
                    f"{at}: required field {name!r} is missing (add it, or mark the object "
                    f"abbreviated with a {ABBREVIATED!r} key)"
                )
    return drift


def _array_drift(example: list[Any], schema: Json, components: Json, at: str) -> list[str]:
    items = schema.get("items")
    if items is None:
        return []
    drift: list[str] = []
    for index, item in enumerate(example):
        drift += field_drift(item, items, components, f"{at}[{index}]")
    return drift


def success_schema(operation: Json) -> tuple[str, Json | None]:
    """The route's success status and the JSON schema of its answer (None: no JSON)."""
    (status,) = [status for status in operation["responses"] if status.startswith("2")]
    content = operation["responses"][status].get("content", {})
    json_content = content.get("application/json")
    return status, None if json_content is None else json_content["schema"]


# --- fixtures -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def blocks() -> list[JsonBlock]:
    return parse_json_blocks(API_MD.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def spec() -> Json:
    return openapi_spec()


# --- the parser and the comparison on their own -------------------------------------------


def test_parser_reads_the_json_blocks_of_route_sections_only() -> None:
    sample = "\n".join(
        [
            "## Produce",
            "```json",
            '{"not": "in a route section"}',
            "```",
            "### `POST /things/{tenant}` — make a thing",
            "```json request",
            '{"name": "a"}',
            "```",
            "```json",
            "# not a heading",
            '{"id": 1}',
            "```",
            "```",
            '{"no": "info string"}',
            "```",
            "#### Details",
            "````json",
            '{"id": 2}',
            "````",
            '- 200 — `{"id": 3, "more": [...], "tags": ["a", ...], ...}`, inline',
            "- 200 — `L:E` ids, sorted: `[4]`.",
            "- 204 — `done`",
            "### Not a route",
            '- 200 — `{"after": "the section"}`',
            "```json",
            '{"after": "the section"}',
            "```",
        ]
    )
    parsed = parse_json_blocks(sample)
    assert [(b.method, b.path, b.line, b.info, b.text) for b in parsed] == [
        ("POST", "/things/{tenant}", 6, "json request", '{"name": "a"}'),
        ("POST", "/things/{tenant}", 9, "json", '# not a heading\n{"id": 1}'),
        ("POST", "/things/{tenant}", 17, "json", '{"id": 2}'),
        (
            "POST",
            "/things/{tenant}",
            20,
            "json inline",
            '{"id": 3, "more": [], "tags": ["a"], "...": "..."}',
        ),
        ("POST", "/things/{tenant}", 21, "json inline", "[4]"),
    ]


SAMPLE_COMPONENTS: Json = {
    "Item": {
        "type": "object",
        "properties": {"id": {"type": "integer"}, "tags": {"type": "array"}},
        "required": ["id"],
    },
    "Answer": {
        "type": "object",
        "properties": {
            "items": {"type": "array", "items": {"$ref": "#/components/schemas/Item"}},
            "byName": {
                "type": "object",
                "additionalProperties": {"$ref": "#/components/schemas/Item"},
            },
            "counters": {
                "type": "object",
                "properties": {"hits": {"type": "integer"}},
                "required": ["hits"],
                "additionalProperties": {"type": "integer"},
            },
            "maybe": {"anyOf": [{"$ref": "#/components/schemas/Item"}, {"type": "null"}]},
            "count": {"type": "integer"},
        },
        "required": ["items", "count"],
    },
}
ANSWER: Json = {"$ref": "#/components/schemas/Answer"}


def test_an_example_with_exactly_the_schemas_fields_agrees() -> None:
    example = {
        "items": [{"id": 1, "tags": []}],
        "byName": {"a": {"id": 2}},
        "counters": {"hits": 1, "newCounter": 2},
        "maybe": None,
        "count": 3,
    }
    assert field_drift(example, ANSWER, SAMPLE_COMPONENTS) == []


@pytest.mark.parametrize(
    ("example", "drift"),
    [
        ({"items": [], "count": 1, "bogus": 0}, ["$: field 'bogus' is not in the schema"]),
        ({"items": [{"id": 1, "bogus": 0}], "count": 1}, ["$.items[0]: field 'bogus'"]),
        ({"items": [], "count": 1, "byName": {"a": {}}}, ["$.byName['a']: required field 'id'"]),
        ({"items": [], "count": 1, "maybe": {"nope": 1, "id": 1}}, ["$.maybe: field 'nope'"]),
        ({"items": []}, ["$: required field 'count' is missing"]),
        ({"items": {}, "count": 1}, ["$.items: an object where the schema has none"]),
        ({"items": [], "count": 1, "counters": {}}, ["$.counters: required field 'hits'"]),
    ],
)
def test_an_unknown_or_missing_field_is_drift(example: Json, drift: list[str]) -> None:
    found = field_drift(example, ANSWER, SAMPLE_COMPONENTS)
    assert len(found) == len(drift), found
    for line, start in zip(found, drift, strict=True):
        assert line.startswith(start), found


def test_an_object_marked_abbreviated_may_leave_out_required_fields_only() -> None:
    assert field_drift({"items": [{"...": "..."}], "...": "..."}, ANSWER, SAMPLE_COMPONENTS) == []
    assert field_drift({"...": "...", "bogus": 1}, ANSWER, SAMPLE_COMPONENTS) == [
        "$: field 'bogus' is not in the schema"
    ]
    # the mark covers its own object, not those nested in it
    assert field_drift({"...": "...", "items": [{}]}, ANSWER, SAMPLE_COMPONENTS) == [
        "$.items[0]: required field 'id' is missing (add it, or mark the object "
        "abbreviated with a '...' key)"
    ]


# --- docs/api.md against the spec ---------------------------------------------------------


def test_every_json_block_of_a_route_is_an_answer_or_a_request(
    blocks: list[JsonBlock],
) -> None:
    odd = [b for b in blocks if b.info not in (ANSWER_INFO, REQUEST_INFO, INLINE_INFO)]
    assert not odd, (
        f"json blocks of route sections are marked '{ANSWER_INFO}' (the success answer) or "
        f"'{REQUEST_INFO}':\n" + "\n".join(f"  {b.where}: ```{b.info}" for b in odd)
    )


def test_each_route_shows_at_most_one_answer_example(blocks: list[JsonBlock]) -> None:
    seen: dict[tuple[str, str], int] = {}
    for block in blocks:
        if block.info != ANSWER_INFO:
            continue
        key = (block.method, block.path)
        assert key not in seen, f"{block.where}: a second answer example (first at {seen[key]})"
        seen[key] = block.line


def examples_drift(
    blocks: list[JsonBlock],
    spec: Json,
    info: str,
    schema_of: Callable[[Json], tuple[Json | None, str]],
) -> list[str]:
    """Every way the examples marked ``info`` differ from their schemas in the spec.
    ``schema_of(operation)``: the schema an example is held to, or None and why an
    example there is wrong."""
    operations = spec_routes(spec)
    components: Json = spec["components"]["schemas"]
    examples = [block for block in blocks if block.info == info]
    assert examples, f"no ```{info} example found in docs/api.md"
    drift: list[str] = []
    for block in examples:
        operation = operations.get((block.method, block.path))
        if operation is None:
            continue  # reported by test_openapi_doc.py: test_docs_and_spec_list_the_same_routes
        schema, why = schema_of(operation)
        if schema is None:
            drift.append(f"{block.where}: {why}")
            continue
        try:
            example = json.loads(block.text)
        except json.JSONDecodeError as error:
            drift.append(f"{block.where}: the example is not valid JSON: {error}")
            continue
        drift += [f"{block.where}: {line}" for line in field_drift(example, schema, components)]
    return drift


def answer_schema(operation: Json) -> tuple[Json | None, str]:
    status, schema = success_schema(operation)
    return schema, f"an answer example, but the {status} answer is not JSON"


def request_schema(operation: Json) -> tuple[Json | None, str]:
    """The JSON schema of the route's request body (None: it takes none)."""
    content = operation.get("requestBody", {}).get("content", {})
    json_content = content.get("application/json")
    schema = None if json_content is None else json_content["schema"]
    return schema, "a request example, but the route takes no JSON body"


def test_answer_examples_have_the_fields_of_the_answer_schema(
    blocks: list[JsonBlock], spec: Json
) -> None:
    drift = answer_drift(blocks, spec)
    assert not drift, (
        "answer examples of docs/api.md differ from the answer schemas of the spec:\n"
        + "\n".join(f"  {line}" for line in drift)
    )


def answer_drift(blocks: list[JsonBlock], spec: Json) -> list[str]:
    """How the answer examples, fenced and inline alike, differ from their schemas."""
    drift = examples_drift(blocks, spec, ANSWER_INFO, answer_schema)
    return drift + examples_drift(blocks, spec, INLINE_INFO, answer_schema)


def test_a_wrong_inline_answer_is_reported(spec: Json) -> None:
    sample = "\n".join(
        [
            "### `POST /consumers/persistent/{tenant}/{namespace}/{topic}/{subscription}` — x",
            "```json",
            '{"consumerId": "c-1"}',
            "```",
            '- 200 — the consumer: `{"consumerID": "c-1"}`.',
        ]
    )
    drift = answer_drift(parse_json_blocks(sample), spec)
    assert [line.split(": ", 1)[1] for line in drift] == [
        "$: field 'consumerID' is not in the schema",
        "$: required field 'consumerId' is missing (add it, or mark the object abbreviated "
        "with a '...' key)",
    ]


def test_request_examples_have_the_fields_of_the_request_schema(
    blocks: list[JsonBlock], spec: Json
) -> None:
    """The same comparison for the ```json request examples: a field the route's body
    type does not name (the broker would ignore it) or a required one left out fails."""
    drift = examples_drift(blocks, spec, REQUEST_INFO, request_schema)
    assert not drift, (
        "request examples of docs/api.md differ from the request schemas of the spec:\n"
        + "\n".join(f"  {line}" for line in drift)
    )
