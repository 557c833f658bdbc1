"""One contract, two renderings: the operations the handlers declare, the OpenAPI
document served at ``/openapi.json`` and the route reference of docs/api.md.

- docs/api.md is what ``python -m broker.http.apidoc --write`` makes of it (it is
  rendered in memory and compared), and every operation has its section there once.
- The document is valid OpenAPI 3.1; every error status carries its one code; one
  success status per route.
- The examples in the operations' descriptions (```json for the success answer,
  ```json request for the request body, and an answer written inline in the success
  text, `` `{...}` ``) have the fields of the schemas the document gives.

That the routes served are the operations declared is tests/http/test_routes_contract.py;
that the statuses declared are what the routes answer to bad input is
tests/http/test_bad_input.py (every error it provokes is checked against the
declaration of the operation it hits).
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from openapi_spec_validator import validate

from broker.http.apidoc import API_MD, DocError, render, route_section
from broker.http.app import contract
from broker.http.contract import (
    CHANGING_ERRORS,
    COMMON_ERRORS,
    TOPIC_OWNER,
    Operation,
    Success,
)
from broker.http.openapi import ERROR_CODES, openapi_spec
from storage_stub.bookie.api import OPERATIONS
from storage_stub.tiered.api import OBJECT_OPERATIONS

Json = dict[str, Any]


@pytest.fixture(scope="module")
def operations() -> list[Operation]:
    return contract()


@pytest.fixture(scope="module")
def spec() -> Json:
    return openapi_spec(contract())


def spec_operation(spec: Json, op: Operation) -> Json:
    operation: Json = spec["paths"][op.path][op.method.lower()]
    return operation


# --- docs/api.md ---------------------------------------------------------------------------


def test_docs_api_md_is_rendered_from_the_declarations(operations: list[Operation]) -> None:
    text = API_MD.read_text(encoding="utf-8")
    assert render(text, operations) == text, (
        "docs/api.md is stale: run `python -m broker.http.apidoc --write` and commit it"
    )


SAMPLE = Operation(
    "makeThing",
    "POST",
    "/things/{tenant}",
    "things",
    "make a thing",
    Success(200, '`{"id": 1}`.', {"type": "object"}),
    {400: "bad tenant name.", 503: "storage fault."},
    description="Makes it.",
    redirect=TOPIC_OWNER,
)


def test_a_route_section_is_heading_description_and_its_own_statuses() -> None:
    assert route_section(SAMPLE) == "\n".join(
        [
            "### `POST /things/{tenant}` — make a thing",
            "",
            "Makes it.",
            "",
            "Responses:",
            "",
            '- 200 — `{"id": 1}`.',
            f"- 307 — {TOPIC_OWNER}",
            "- 400 `invalid-request` — bad tenant name.",
            "- 503 `unavailable` — storage fault. `Retry-After` set.",
        ]
    )


def test_regions_are_filled_and_text_outside_them_kept() -> None:
    text = "\n".join(
        [
            "# Page",
            "By hand.",
            "<!-- generated:routes makeThing -->",
            "stale",
            "<!-- /generated -->",
            "<!-- generated:errors any -->",
            "<!-- /generated -->",
            "Also by hand.",
        ]
    )
    rendered = render(text, [SAMPLE])
    assert rendered.startswith("# Page\nBy hand.\n<!-- generated:routes makeThing -->\n\n###")
    assert "stale" not in rendered
    assert route_section(SAMPLE) in rendered
    assert rendered.endswith("<!-- /generated -->\nAlso by hand.")
    for status in COMMON_ERRORS:
        assert f"\n- {status} `{ERROR_CODES[status]}` — " in rendered
    assert render(rendered, [SAMPLE]) == rendered


@pytest.mark.parametrize(
    ("regions", "complaint"),
    [
        ("", "in none: ['makeThing']"),
        ("<!-- generated:routes makeThing -->\n<!-- /generated -->\n" * 2, "in several"),
        ("<!-- generated:routes makeThing nope -->\n<!-- /generated -->", "unknown"),
        ("<!-- generated:errors some -->\n<!-- /generated -->", "'any' or 'changing'"),
    ],
)
def test_an_operation_in_no_region_or_in_several_or_an_unknown_one_fails(
    regions: str, complaint: str
) -> None:
    with pytest.raises(DocError, match=re.escape(complaint)):
        render(regions, [SAMPLE])


def test_each_section_lists_the_statuses_of_the_document_but_the_shared_ones(
    operations: list[Operation], spec: Json
) -> None:
    shared = set(COMMON_ERRORS) | set(CHANGING_ERRORS)
    for op in operations:
        section = route_section(op)
        listed = {int(status) for status in re.findall(r"^- (\d{3}) ", section, re.MULTILINE)}
        specified = {int(status) for status in spec_operation(spec, op)["responses"]}
        assert listed == specified - shared, op.operation_id
        assert COMMON_ERRORS.keys() <= specified, op.operation_id
        assert (op.method != "GET") == (CHANGING_ERRORS.keys() <= specified), op.operation_id


def test_every_storage_operation_can_be_faulted_and_is_named_in_the_docs(spec: Json) -> None:
    enum = spec["components"]["schemas"]["FaultSetting"]["properties"]["operation"]["enum"]
    assert enum == [*OPERATIONS, *OBJECT_OPERATIONS]
    text = API_MD.read_text(encoding="utf-8")
    missing = [name for name in enum if f"`{name}`" not in text]
    assert not missing, f"fault operations not named in docs/api.md: {missing}"


# --- the OpenAPI document ------------------------------------------------------------------


def interned(value: Any, seen: dict[str, Any]) -> Any:
    """``value`` with every run of equal JSON objects and arrays made one object."""
    if isinstance(value, dict):
        value = {key: interned(item, seen) for key, item in value.items()}
    elif isinstance(value, list):
        value = [interned(item, seen) for item in value]
    else:
        return value
    return seen.setdefault(json.dumps(value, sort_keys=True), value)


def test_spec_is_a_valid_openapi_3_document(spec: Json) -> None:
    assert spec["openapi"] == "3.1.0"
    # the validator checks each schema object once (by identity, as it does a component
    # that several $refs reach): the document's equal inline schemas (each operation's
    # error answers, its parameters' types) made one object are checked once each, not
    # once per copy (3.0 s -> 0.7 s of CPU); a schema is valid or not wherever it is
    validate(interned(spec, {}))  # raises OpenAPIValidationError with the offending part


def test_spec_is_plain_json_data_and_fresh_on_each_call(spec: Json) -> None:
    assert json.loads(json.dumps(spec)) == spec
    other = openapi_spec(contract())
    other["paths"].clear()
    assert openapi_spec(contract())["paths"], "openapi_spec must not share state between calls"


def spec_error_code(response: Json) -> str:
    """The code an error (or redirect) answer promises: the enum laid over Error."""
    schema = response["content"]["application/json"]["schema"]
    assert {"$ref": "#/components/schemas/Error"} in schema["allOf"]
    overlay = next(part for part in schema["allOf"] if "properties" in part)
    (code,) = overlay["properties"]["code"]["enum"]
    return str(code)


def test_each_error_status_carries_its_one_code_and_a_503_its_retry_after(spec: Json) -> None:
    for path, item in spec["paths"].items():
        for method, operation in item.items():
            for status, answer in operation["responses"].items():
                where = f"{method.upper()} {path} {status}"
                if status == "307":
                    assert spec_error_code(answer) == "not-owner", where
                    assert "Location" in answer["headers"], where
                elif int(status) >= 400:
                    assert spec_error_code(answer) == ERROR_CODES[int(status)], where
                    assert ("headers" in answer) == (status == "503"), where


def test_success_statuses_are_one_per_route_and_answers_say_their_content(spec: Json) -> None:
    for path, item in spec["paths"].items():
        for method, operation in item.items():
            successes = [s for s in operation["responses"] if s.startswith("2")]
            if len(successes) == 2 and "204" in successes:
                # a read answering Pulsar's null (a policy not set) as 204, with no content
                assert "content" not in operation["responses"]["204"], (method, path)
                successes.remove("204")
            assert len(successes) == 1, (method, path, successes)
            (status,) = successes
            answer = operation["responses"][status]
            assert ("content" in answer) == (status != "204"), (method, path)


# --- examples against the schemas ----------------------------------------------------------

#: The key that marks an object of an example as abbreviated.
ABBREVIATED = "..."
FENCED = re.compile(r"^```(?P<info>[^`\n]*)\n(?P<body>.*?)\n```$", re.MULTILINE | re.DOTALL)
INLINE = re.compile(r"`(?P<json>[\[{][^`]*)`")
COMPONENT_PREFIX = "#/components/schemas/"


def inline_json(text: str) -> str:
    """An inline answer example as strict JSON: a bare ``...`` ending an array dropped,
    one ending an object turned into the abbreviated mark."""
    text = re.sub(r"\[\s*\.\.\.\s*\]", "[]", text)
    text = re.sub(r",\s*\.\.\.\s*\]", "]", text)
    return re.sub(r",\s*\.\.\.\s*\}", f', "{ABBREVIATED}": "{ABBREVIATED}"}}', text)


def examples(op: Operation) -> list[tuple[str, str]]:
    """(kind, JSON text) of the operation's examples: ``json`` (its success answer),
    ``json request`` (its body), and ``json inline`` (written in its success text)."""
    found = [(m["info"].strip(), m["body"]) for m in FENCED.finditer(op.description)]
    found += [("json inline", inline_json(m["json"])) for m in INLINE.finditer(op.success.when)]
    return [(kind, text) for kind, text in found if kind.startswith("json")]


def resolve(schema: Json, components: Json) -> Json:
    while "$ref" in schema:
        ref = schema["$ref"]
        assert ref.startswith(COMPONENT_PREFIX), f"a $ref outside components/schemas: {ref}"
        schema = components[ref.removeprefix(COMPONENT_PREFIX)]
    return schema


def _alternatives(schema: Json, components: Json) -> list[Json]:
    schema = resolve(schema, components)
    assert "allOf" not in schema, f"allOf is not supported by this test: {schema}"
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return [alt for part in schema[key] for alt in _alternatives(part, components)]
    return [schema]


def _is(kind: str, schema: Json) -> bool:
    declared = schema.get("type")
    return declared == kind or (isinstance(declared, list) and kind in declared)


def field_drift(example: Any, schema: Json, components: Json, at: str = "$") -> list[str]:
    """How the field names of ``example`` differ from ``schema``'s, one line each (empty
    when they agree). Scalars are not compared; with several alternatives of the
    example's kind, it must fit one."""
    if isinstance(example, dict):
        objects = [alt for alt in _alternatives(schema, components) if _is("object", alt)]
        if not objects:
            return [f"{at}: an object where the schema has none"]
        return min((_object_drift(example, alt, components, at) for alt in objects), key=len)
    if isinstance(example, list):
        arrays = [alt for alt in _alternatives(schema, components) if _is("array", alt)]
        if not arrays:
            return [f"{at}: an array where the schema has none"]
        return min((_array_drift(example, alt, components, at) for alt in arrays), key=len)
    return []


def _array_drift(example: list[Any], schema: Json, components: Json, at: str) -> list[str]:
    items = schema.get("items")
    if items is None:
        return []
    drift: list[str] = []
    for index, item in enumerate(example):
        drift += field_drift(item, items, components, f"{at}[{index}]")
    return drift


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


def test_examples_are_found_in_descriptions_and_inline_in_the_success_text() -> None:
    op = Operation(
        "x",
        "POST",
        "/x",
        "t",
        "x",
        Success(200, 'the thing: `{"id": 3, "tags": ["a", ...], ...}`; ids `[4, ...]`.'),
        {},
        description='Body:\n\n```json request\n{"name": "a"}\n```\n\n```json\n{"id": 1}\n```',
    )
    assert examples(op) == [
        ("json request", '{"name": "a"}'),
        ("json", '{"id": 1}'),
        ("json inline", '{"id": 3, "tags": ["a"], "...": "..."}'),
        ("json inline", "[4]"),
    ]


def test_examples_have_the_fields_of_their_schemas(operations: list[Operation], spec: Json) -> None:
    components: Json = spec["components"]["schemas"]
    drift: list[str] = []
    seen = 0
    for op in operations:
        operation = spec_operation(spec, op)
        kinds = [kind for kind, _ in examples(op)]
        assert kinds.count("json") <= 1, f"{op.operation_id}: several answer examples"
        for kind, text in examples(op):
            seen += 1
            where = f"{op.operation_id} ({kind})"
            assert kind in ("json", "json request", "json inline"), where
            if kind == "json request":
                content = operation.get("requestBody", {}).get("content", {})
            else:
                content = operation["responses"][str(op.success.status)].get("content", {})
            json_content = content.get("application/json")
            if json_content is None:
                drift.append(f"{where}: an example, but the route takes or answers no JSON")
                continue
            try:
                example = json.loads(text)
            except json.JSONDecodeError as error:
                drift.append(f"{where}: not valid JSON: {error}")
                continue
            schema = json_content["schema"]
            drift += [f"{where}: {line}" for line in field_drift(example, schema, components)]
    assert seen > 10, "the examples were not found"
    assert not drift, "examples differ from the schemas of the document:\n" + "\n".join(drift)


def test_a_wrong_example_is_reported(spec: Json) -> None:
    (create,) = [op for op in contract() if op.operation_id == "createConsumer"]
    schema = spec_operation(spec, create)["responses"]["200"]["content"]["application/json"]
    drift = field_drift({"consumerID": "c-1"}, schema["schema"], spec["components"]["schemas"])
    assert drift == [
        "$: field 'consumerID' is not in the schema",
        "$: required field 'consumerId' is missing (add it, or mark the object abbreviated "
        "with a '...' key)",
    ]
