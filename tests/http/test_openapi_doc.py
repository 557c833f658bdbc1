"""docs/api.md and GET /openapi.json describe one contract: same routes, same statuses.

docs/api.md writes each route as a heading that starts with the method and path in
backticks (``### `POST /consumers/{consumerId}/ack` — ...``) and lists every status of
the route as ``- 404 `not-found` — when``; statuses that any route can return are listed
once under "Errors any route can return", and those of every route that changes state
(any method but GET) under "Errors any route that changes state can return". These
tests parse that and compare it with ``broker.http.openapi.openapi_spec()`` both ways,
so a route or a status added to one side only fails here.
"""

from __future__ import annotations

import json
import pathlib
import re
from dataclasses import dataclass, field
from typing import Any

import pytest
from openapi_spec_validator import validate

from broker.http.openapi import ERROR_CODES, openapi_spec
from storage_stub.bookie.api import OPERATIONS
from storage_stub.tiered.api import OBJECT_OPERATIONS

API_MD = pathlib.Path(__file__).resolve().parents[2] / "docs" / "api.md"

HTTP_METHODS = ("GET", "PUT", "POST", "DELETE", "PATCH", "HEAD", "OPTIONS")
HEADING = re.compile(r"^(?P<level>#{1,6})\s+(?P<text>.*)$")
ROUTE_HEADING = re.compile(
    r"^`(?P<method>" + "|".join(HTTP_METHODS) + r") (?P<path>/[A-Za-z0-9_./{}-]*)` — \S.*$"
)
# Anything that looks like an attempt at a route heading, well formed or not.
ROUTE_LIKE = re.compile(r"^`(?:" + "|".join(HTTP_METHODS) + r")\b", re.IGNORECASE)
STATUS_LINE = re.compile(r"^- (?P<status>\d{3})(?: `(?P<code>[a-z][a-z-]*)`)? — \S")
COMMON_ERRORS_HEADING = "Errors any route can return"
CHANGING_ERRORS_HEADING = "Errors any route that changes state can return"

Route = tuple[str, str]  # (METHOD, path template)


@dataclass
class DocRoute:
    method: str
    path: str
    line: int
    statuses: dict[int, str | None] = field(default_factory=dict)


@dataclass
class ApiDoc:
    routes: list[DocRoute]
    common_statuses: dict[int, str | None]
    changing_statuses: dict[int, str | None]
    malformed_headings: list[tuple[int, str]]


def parse_api_doc(text: str) -> ApiDoc:
    """Route headings, each route's status lines, and the statuses common to all routes."""
    routes: list[DocRoute] = []
    common: dict[int, str | None] = {}
    changing: dict[int, str | None] = {}
    malformed: list[tuple[int, str]] = []
    # Status lines go to the section being read: a route, the common list, or nowhere.
    current: dict[int, str | None] | None = None
    current_level = 0
    for number, line in enumerate(text.splitlines(), start=1):
        heading = HEADING.match(line)
        if heading:
            level, title = len(heading["level"]), heading["text"].strip()
            route = ROUTE_HEADING.match(title)
            if route:
                doc_route = DocRoute(route["method"], route["path"], number)
                routes.append(doc_route)
                current, current_level = doc_route.statuses, level
            elif ROUTE_LIKE.match(title):
                malformed.append((number, line))
                current = None
            elif title == COMMON_ERRORS_HEADING:
                current, current_level = common, level
            elif title == CHANGING_ERRORS_HEADING:
                current, current_level = changing, level
            elif current is not None and level <= current_level:
                current = None
            continue
        status = STATUS_LINE.match(line)
        if status and current is not None:
            code = int(status["status"])
            assert code not in current, f"docs/api.md:{number}: status {code} listed twice"
            current[code] = status["code"]
    return ApiDoc(routes, common, changing, malformed)


def spec_routes(spec: dict[str, Any]) -> dict[Route, dict[str, Any]]:
    return {
        (method.upper(), path): operation
        for path, item in spec["paths"].items()
        for method, operation in item.items()
        if method.upper() in HTTP_METHODS
    }


def spec_error_code(response: dict[str, Any]) -> str:
    """The code an error response promises: the enum laid over the Error schema."""
    schema = response["content"]["application/json"]["schema"]
    assert {"$ref": "#/components/schemas/Error"} in schema["allOf"]
    overlay = next(part for part in schema["allOf"] if "properties" in part)
    (code,) = overlay["properties"]["code"]["enum"]
    return str(code)


@pytest.fixture(scope="module")
def doc() -> ApiDoc:
    return parse_api_doc(API_MD.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def spec() -> dict[str, Any]:
    return openapi_spec()


def describe(routes: set[Route]) -> str:
    return "\n".join(f"  {method} {path}" for method, path in sorted(routes, key=lambda r: r[1]))


# --- the parser itself ------------------------------------------------------------------


def test_parser_reads_route_headings_status_lines_and_common_errors() -> None:
    sample = "\n".join(
        [
            "## Errors",
            "### Errors any route can return",
            "- 401 `unauthorized` — no token.",
            "### Errors any route that changes state can return",
            "- 415 `unsupported-media-type` — a body of a simple type.",
            "## Consumers",
            "### `POST /consumers/{consumerId}/ack` — acknowledge",
            "| field | type |",
            "- 204 — applied.",
            "- 404 `not-found` — unknown consumer.",
            "### `GET /metrics` — metrics",
            "- 200 — text.",
            "## Elsewhere",
            "- 500 `oops` — not in any route section, so not counted.",
            "### `get /lowercase` — a malformed route heading",
        ]
    )
    parsed = parse_api_doc(sample)
    assert [(r.method, r.path, r.statuses) for r in parsed.routes] == [
        ("POST", "/consumers/{consumerId}/ack", {204: None, 404: "not-found"}),
        ("GET", "/metrics", {200: None}),
    ]
    assert parsed.common_statuses == {401: "unauthorized"}
    assert parsed.changing_statuses == {415: "unsupported-media-type"}
    assert [line for _, line in parsed.malformed_headings] == [
        "### `get /lowercase` — a malformed route heading"
    ]


# --- the spec on its own ----------------------------------------------------------------


def test_spec_is_a_valid_openapi_3_document(spec: dict[str, Any]) -> None:
    assert spec["openapi"] == "3.1.0"
    validate(spec)  # raises OpenAPIValidationError with the offending part


def test_spec_is_plain_json_data_and_fresh_on_each_call(spec: dict[str, Any]) -> None:
    assert json.loads(json.dumps(spec)) == spec
    other = openapi_spec()
    other["paths"].clear()
    assert openapi_spec()["paths"], "openapi_spec() must not share state between calls"


# --- docs/api.md against the spec -------------------------------------------------------


def test_every_route_heading_in_the_docs_is_well_formed(doc: ApiDoc) -> None:
    assert not doc.malformed_headings, (
        "headings that look like routes but are not in the form "
        "'### `METHOD /path/{param}` — summary':\n"
        + "\n".join(f"  docs/api.md:{n}: {line}" for n, line in doc.malformed_headings)
    )
    for route in doc.routes:
        assert "..." not in route.path and "?" not in route.path, route
        assert route.path == "/" or not route.path.endswith("/"), route


def test_each_route_is_documented_once(doc: ApiDoc) -> None:
    seen: dict[Route, int] = {}
    for route in doc.routes:
        key = (route.method, route.path)
        assert key not in seen, f"{key} documented at lines {seen[key]} and {route.line}"
        seen[key] = route.line


def test_docs_and_spec_list_the_same_routes(doc: ApiDoc, spec: dict[str, Any]) -> None:
    documented = {(r.method, r.path) for r in doc.routes}
    specified = set(spec_routes(spec))
    assert documented, "no route heading found in docs/api.md"
    assert documented == specified, (
        "routes in docs/api.md but not in the OpenAPI spec:\n"
        + describe(documented - specified)
        + "\nroutes in the OpenAPI spec but not in docs/api.md:\n"
        + describe(specified - documented)
    )


def test_each_route_has_the_same_statuses_in_docs_and_spec(
    doc: ApiDoc, spec: dict[str, Any]
) -> None:
    assert doc.common_statuses, f"no '{COMMON_ERRORS_HEADING}' list in docs/api.md"
    assert doc.changing_statuses, f"no '{CHANGING_ERRORS_HEADING}' list in docs/api.md"
    operations = spec_routes(spec)
    drift: list[str] = []
    for route in doc.routes:
        operation = operations.get((route.method, route.path))
        if operation is None:
            continue  # reported by test_docs_and_spec_list_the_same_routes
        assert route.statuses, f"docs/api.md:{route.line}: no status lines for {route.path}"
        documented = set(route.statuses) | set(doc.common_statuses)
        if route.method != "GET":
            documented |= set(doc.changing_statuses)
        specified = {int(status) for status in operation["responses"]}
        if documented != specified:
            drift.append(
                f"  {route.method} {route.path}: only in docs {sorted(documented - specified)}"
                f", only in spec {sorted(specified - documented)}"
            )
    assert not drift, "statuses differ between docs/api.md and the spec:\n" + "\n".join(drift)


def test_each_error_status_carries_its_one_code_in_docs_and_spec(
    doc: ApiDoc, spec: dict[str, Any]
) -> None:
    operations = spec_routes(spec)
    for status, code in [*doc.common_statuses.items(), *doc.changing_statuses.items()]:
        assert code == ERROR_CODES[status], f"common {status}: docs say {code}"
    for route in doc.routes:
        for status, code in route.statuses.items():
            where = f"docs/api.md:{route.line} {route.method} {route.path} {status}"
            if status < 400:
                assert code is None, f"{where}: a success has no error code"
                continue
            assert code == ERROR_CODES.get(status), f"{where}: code {code!r}"
            operation = operations.get((route.method, route.path))
            if operation is not None:
                assert spec_error_code(operation["responses"][str(status)]) == code, where


def test_success_statuses_are_one_per_route_and_answers_say_their_content(
    spec: dict[str, Any],
) -> None:
    for (method, path), operation in spec_routes(spec).items():
        successes = [s for s in operation["responses"] if s.startswith("2")]
        assert len(successes) == 1, (method, path, successes)
        (status,) = successes
        answer = operation["responses"][status]
        if status == "204":
            assert "content" not in answer, (method, path)
        else:
            assert answer["content"], (method, path)


def test_every_storage_operation_can_be_faulted_and_is_documented(
    spec: dict[str, Any],
) -> None:
    text = API_MD.read_text(encoding="utf-8")
    enum = spec["components"]["schemas"]["FaultSetting"]["properties"]["operation"]["enum"]
    assert enum == [*OPERATIONS, *OBJECT_OPERATIONS]
    missing = [name for name in enum if f"`{name}`" not in text]
    assert not missing, f"fault operations not named in docs/api.md: {missing}"
