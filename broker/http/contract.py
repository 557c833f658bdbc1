"""The pieces an operation of the HTTP contract is declared with, each used both to read
a request and to describe it in the OpenAPI document, so the two cannot disagree.

- :class:`IntQuery`, :class:`ChoiceQuery`, :class:`FlagQuery`: a query parameter, its
  bounds or choices and its default; ``read(request)`` parses it (400 naming it when it
  is bad), ``parameter()`` is its OpenAPI Parameter Object.
- :class:`JsonBody`: a JSON request body of a pydantic type (``broker/http/models.py``);
  ``read(request)`` parses and validates it in one pass, ``schema`` is where the
  document's schema comes from.
- :class:`RouteTable`: aiohttp routes attached to operations of the contract by
  operation id: a handler says which operation it implements and gets that operation's
  method and path, so the routes served are the routes documented.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from aiohttp import web
from pydantic import TypeAdapter, ValidationError

from broker.dispatch.errors import InvalidRequestError
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


class RouteTable:
    """The app's routes, each the implementation of one operation of the contract.

    ``operations`` maps an operation id to its (method, path); ``implements(id)``
    registers the decorated handler at them, once."""

    def __init__(self, operations: Mapping[str, tuple[str, str]]) -> None:
        self.operations = operations
        self.routes = web.RouteTableDef()
        self.implemented: dict[str, Handler] = {}

    def implements(self, operation_id: str) -> Callable[[Handler], Handler]:
        method, path = self.operations[operation_id]

        def register(handler: Handler) -> Handler:
            if operation_id in self.implemented:
                raise ValueError(f"operation {operation_id} is implemented twice")
            self.implemented[operation_id] = handler
            self.routes.route(method.upper(), path)(handler)
            return handler

        return register
