"""The pieces an operation of the HTTP contract is declared with, each used both to read
a request and to describe it in the OpenAPI document, so the two cannot disagree.

- :class:`IntQuery`, :class:`ChoiceQuery`, :class:`FlagQuery`: a query parameter, its
  bounds or choices and its default; ``read(request)`` parses it (400 naming it when it
  is bad), ``parameter()`` is its OpenAPI Parameter Object.
- :class:`JsonBody`: a JSON request body of a pydantic type (``broker/http/models.py``);
  ``read(request)`` parses and validates it in one pass, ``schema`` is where the
  document's schema comes from.
- :class:`Operation`: one operation of the contract, declared once beside its handler
  by :meth:`RouteTable.operation` (method, path, parameters, body, the success answer,
  every error status with when it happens, a description in markdown). The OpenAPI
  document (``broker/http/openapi.py``) and the route reference of ``docs/api.md``
  (``broker/http/apidoc.py``) are both rendered from these declarations.
- :class:`RouteTable`: the operations of one module, each registered as an aiohttp
  route of its handler, so the routes served are the routes documented.

Texts (descriptions, when-texts) are markdown, as docs/api.md shows them; links to
sections of docs/api.md are written ``[Conventions](#conventions)``.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from aiohttp import web
from pydantic import TypeAdapter, ValidationError

from broker.dispatch.errors import InvalidRequestError
from broker.http.errors import ERRORS
from broker.http.parsing import decimal
from broker.session.options import flag

Json = dict[str, Any]
T = TypeVar("T")
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass(frozen=True, slots=True)
class IntQuery:
    """An integer query parameter in ``minimum..maximum``, ASCII digits only."""

    name: str
    description: str
    default: int
    minimum: int
    maximum: int

    def read(self, request: web.Request) -> int:
        raw = request.query.get(self.name)
        if raw is None:
            return self.default
        value = decimal(raw)
        if value is None:
            raise InvalidRequestError(f"query parameter {self.name} must be a decimal integer")
        if not self.minimum <= value <= self.maximum:
            raise InvalidRequestError(
                f"{self.name} must be within {self.minimum}..{self.maximum}, got {value}"
            )
        return value

    def parameter(self) -> Json:
        schema = {
            "type": "integer",
            "format": "int64",
            "minimum": self.minimum,
            "maximum": self.maximum,
            "default": self.default,
        }
        return _parameter(self.name, self.description, schema)


@dataclass(frozen=True, slots=True)
class ChoiceQuery:
    """A query parameter that is one of ``choices``."""

    name: str
    description: str
    choices: tuple[str, ...]
    default: str

    def read(self, request: web.Request) -> str:
        value = request.query.get(self.name, self.default)
        if value not in self.choices:
            raise InvalidRequestError(f"{self.name} must be one of {', '.join(self.choices)}")
        return value

    def parameter(self) -> Json:
        schema = {"type": "string", "enum": list(self.choices), "default": self.default}
        return _parameter(self.name, self.description, schema)


@dataclass(frozen=True, slots=True)
class FlagQuery:
    """A boolean query parameter: ``true`` or ``false``, spelled as
    :func:`broker.session.options.flag` reads every client's booleans."""

    name: str
    description: str
    default: bool = False

    def read(self, request: web.Request) -> bool:
        return flag(self.name, request.query.get(self.name), self.default)

    def parameter(self) -> Json:
        return _parameter(self.name, self.description, {"type": "boolean", "default": self.default})


@dataclass(frozen=True, slots=True)
class PatternQuery:
    """A text query parameter the handler parses itself (described by a pattern)."""

    name: str
    description: str
    pattern: str
    default: str

    def read(self, request: web.Request) -> str | None:
        """The raw value, None when absent: the handler knows what absent means."""
        return request.query.get(self.name)

    def parameter(self) -> Json:
        schema = {"type": "string", "pattern": self.pattern, "default": self.default}
        return _parameter(self.name, self.description, schema)


Query = IntQuery | ChoiceQuery | FlagQuery | PatternQuery


def _parameter(name: str, description: str, schema: Json) -> Json:
    return {
        "name": name,
        "in": "query",
        "required": False,
        "description": description,
        "schema": schema,
    }


#: body fields that are maps (string to string): the part after one in a location is a
#: key the client chose, whatever it looks like
_MAP_FIELDS = frozenset({"properties"})


def _field_path(location: tuple[int | str, ...]) -> str:
    """``("messages", 3, "payload")`` as ``messages[3].payload``; a map's key as
    ``properties["Key"]``. A union's branches are in pydantic's locations (tagged
    'str', 'StartMessageId'...): dropped, keeping the indexes, field names and keys."""
    text = ""
    after_map = False
    for part in location:
        if after_map:
            text += f"[{json.dumps(part)}]"
            after_map = False
        elif isinstance(part, int):
            text += f"[{part}]"
        elif not _is_branch_tag(part):
            text += f".{part}" if text else part
            after_map = part in _MAP_FIELDS
    return text


def invalid_body(error: ValidationError) -> InvalidRequestError:
    """The first problem pydantic found, as a 400 naming the field."""
    first = error.errors(include_url=False, include_context=False, include_input=False)[0]
    kind, message = first["type"], first["msg"]
    if kind == "json_invalid":
        return InvalidRequestError(f"malformed JSON: {message}")
    path = _field_path(tuple(first["loc"]))
    if not path:
        return InvalidRequestError(f"the body is not what this route takes: {message}")
    return InvalidRequestError(f"{path}: {message}")


def _is_branch_tag(part: int | str) -> bool:
    return isinstance(part, str) and (
        part[:1].isupper() or part.startswith(("literal[", "str", "int", "list["))
    )


class JsonBody(Generic[T]):
    """A JSON request body of type ``kind``, validated in one pass by pydantic (strict:
    JSON numbers, strings and booleans as they are, unknown fields ignored).

    ``required`` False: the route takes no body as well (``read_optional``)."""

    __slots__ = ("adapter", "description", "required")

    def __init__(self, kind: Any, description: str, *, required: bool = True) -> None:
        self.adapter: TypeAdapter[T] = TypeAdapter(kind)
        self.description = description
        self.required = required

    async def read(self, request: web.Request) -> T:
        """The validated body; 400 when there is none. O(body size)."""
        return self.parse(await request.read())

    async def read_optional(self, request: web.Request) -> T | None:
        """The validated body, None when the request has none. O(body size)."""
        raw = await request.read()
        if not raw:
            return None
        return self.validate(raw)

    def parse(self, raw: bytes) -> T:
        """``read`` for a body already read."""
        if not raw:
            raise InvalidRequestError("request body is empty; a JSON body is expected")
        return self.validate(raw)

    def validate(self, raw: bytes) -> T:
        """The validated body of non-empty ``raw``; 400 if its type refuses it."""
        try:
            return self.adapter.validate_json(raw)
        except ValidationError as error:
            raise invalid_body(error) from None


# --- operations --------------------------------------------------------------------------

#: Path templates shared by many operations.
TOPIC = "/persistent/{tenant}/{namespace}/{topic}"
ADMIN_TOPIC = "/admin/v2" + TOPIC
SUBSCRIPTION = ADMIN_TOPIC + "/subscription/{subscription}"
NAMESPACE = "/admin/v2/namespaces/{tenant}/{namespace}"
CONSUMER = "/consumers/{consumerId}"

#: Statuses any route can return (security); part of every operation.
COMMON_ERRORS: dict[int, str] = {
    401: "no token, or a token that is not valid (expired, badly signed, not "
    "`Authorization: Bearer <token>`).",
    403: "the token's role is not allowed this operation; or the `Host` is not a name of "
    "this broker; or a page of another origin asks to change state.",
}
#: Statuses every route that changes state (any method but GET) can return.
CHANGING_ERRORS: dict[int, str] = {
    415: "its body is of a type a web page may send to any site without asking "
    "(`text/plain`, a form type, or none): send `Content-Type: application/json`.",
}
#: The 503 of a route that needs this broker's service and lists no 503 of its own.
DOWN = "this broker is down (restarting, or not started yet)."

#: The 307 of a route serving a topic that another broker of the cluster may own.
TOPIC_OWNER = (
    "another broker of the cluster owns the topic: repeat the request at `Location` "
    "(see [Conventions](#conventions))."
)
#: The 307 of a route that also takes a partitioned topic's name, which is never redirected.
PARTITION_OWNER = (
    TOPIC_OWNER.removesuffix(".") + "; never on a partitioned topic's name, whose "
    "partitions are reached at their owners (see [Partitioned topics](#partitioned-topics))."
)


@dataclass(frozen=True, slots=True)
class Success:
    """The answer of an operation that worked.

    ``schema``: the type of a JSON answer (a model of ``broker/http/schemas.py``, which
    the document has as a component), or a JSON schema written out; None for text. No
    content at 204. ``unset``: when the operation answers 204 with no content instead
    (Pulsar's REST API sends a ``null`` answer so: a policy that is not set)."""

    status: int
    when: str
    schema: Any = None
    media_type: str = "application/json"
    unset: str | None = None


@dataclass(frozen=True, slots=True)
class Operation:
    """One operation of the HTTP contract: everything the OpenAPI document and
    docs/api.md say about it. ``errors``: each error status the route itself can answer,
    with when (the statuses of :data:`COMMON_ERRORS`, of :data:`CHANGING_ERRORS` and the
    503 of ``down`` are added by the renderers). ``redirect``: when it answers 307.
    ``down``: it needs this broker's service, so it answers 503 while the broker is
    down; routes that answer from the process alone pass False."""

    operation_id: str
    method: str
    path: str
    tag: str
    summary: str
    success: Success
    errors: Mapping[int, str]
    description: str = ""
    query: tuple[Query, ...] = ()
    body: JsonBody[Any] | None = None
    redirect: str | None = None
    down: bool = True
    handler: Handler | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        unknown = [status for status in self.errors if status not in ERRORS]
        if unknown:
            raise ValueError(f"{self.operation_id}: error statuses without a code: {unknown}")
        if self.method != self.method.upper():
            raise ValueError(f"{self.operation_id}: method {self.method!r} not upper case")

    def error_statuses(self) -> dict[int, str]:
        """Every error status of the operation and when, the shared ones included; the
        503 of ``down`` as :data:`DOWN` unless the route lists its own 503."""
        errors = dict(self.errors)
        if self.down and 503 not in errors:
            errors[503] = DOWN
        errors |= COMMON_ERRORS
        if self.method != "GET":
            errors |= CHANGING_ERRORS
        return dict(sorted(errors.items()))


class RouteTable:
    """The operations of one module of handlers, each served by one aiohttp route.

    ``operation(...)`` declares an operation and registers the decorated handler as its
    route; ``operations`` lists them in declaration order."""

    def __init__(self) -> None:
        self.routes = web.RouteTableDef()
        self.operations: list[Operation] = []

    def operation(
        self,
        method: str,
        path: str,
        operation_id: str,
        *,
        tag: str,
        summary: str,
        success: Success,
        errors: Mapping[int, str],
        description: str = "",
        query: tuple[Query, ...] = (),
        body: JsonBody[Any] | None = None,
        redirect: str | None = None,
        down: bool = True,
    ) -> Callable[[Handler], Handler]:
        """Declare an operation; the decorated handler implements it. Texts are markdown;
        ``description`` is dedented (write it as an indented triple-quoted string)."""

        def register(handler: Handler) -> Handler:
            if any(known.operation_id == operation_id for known in self.operations):
                raise ValueError(f"operation {operation_id} is declared twice")
            self.operations.append(
                Operation(
                    operation_id,
                    method,
                    path,
                    tag,
                    summary,
                    success,
                    errors,
                    inspect.cleandoc(description),
                    query,
                    body,
                    redirect,
                    down,
                    handler,
                )
            )
            self.routes.route(method, path)(handler)
            return handler

        return register
