"""The routes the app serves are the operations of the contract, and the reverse: the
same methods and paths, with the same path parameters, each operation implemented by
exactly one handler. A handler added with a plain aiohttp route, or an operation
declared without a handler, fails here."""

from __future__ import annotations

import re
from typing import Any, get_args

import pytest
from aiohttp import web

from broker.dispatch.subscription import SUBSCRIPTION_TYPES
from broker.http import (
    admin_brokers,
    admin_policies,
    admin_topics,
    deduplication,
    pulsar_admin,
    pulsar_schemas,
)
from broker.http import app as app_module
from broker.http.app import contract, create_app
from broker.http.models import SubscriptionType
from broker.http.openapi import NOT_IN_SPEC, openapi_spec
from storage_stub.bookie.api import OPERATIONS
from storage_stub.tiered.api import OBJECT_OPERATIONS
from tests.conftest import make_settings

Route = tuple[str, str]
PARAMETER = re.compile(r"{(\w+)(?::[^}]*)?}")


def served_routes(app: web.Application) -> dict[Route, list[str]]:
    """(METHOD, path template) of every route the app serves, with its path parameters;
    HEAD (which aiohttp adds for every GET) and OPTIONS left out."""
    served: dict[Route, list[str]] = {}
    for route in app.router.routes():
        method = route.method
        if method in ("HEAD", "OPTIONS"):
            continue
        info = route.resource.get_info() if route.resource is not None else {}
        path = info.get("formatter") or info.get("path")
        assert isinstance(path, str), info
        served[(method, path)] = PARAMETER.findall(path)
    return served


def documented_routes(spec: dict[str, Any]) -> dict[Route, list[str]]:
    documented: dict[Route, list[str]] = {}
    components = spec["components"]["parameters"]
    for path, item in spec["paths"].items():
        for method, operation in item.items():
            names = []
            for parameter in operation["parameters"]:
                if "$ref" in parameter:
                    parameter = components[parameter["$ref"].rsplit("/", 1)[1]]
                if parameter["in"] == "path":
                    names.append(parameter["name"])
            documented[(method.upper(), path)] = names
    return documented


@pytest.fixture(scope="module")
def app() -> web.Application:
    return create_app(make_settings(None))


def test_every_route_served_is_an_operation_of_the_spec_and_the_reverse(
    app: web.Application,
) -> None:
    served = {
        route: names
        for route, names in served_routes(app).items()
        if not route[1].startswith(NOT_IN_SPEC)
    }
    documented = documented_routes(openapi_spec(contract()))
    assert sorted(set(served) - set(documented)) == [], "served but not in the spec"
    assert sorted(set(documented) - set(served)) == [], "in the spec but not served"
    for route, names in served.items():
        assert names == documented[route], f"{route}: path parameters differ"


def test_the_routes_left_out_of_the_spec_are_the_websocket_upgrades(app: web.Application) -> None:
    left_out = sorted(path for _, path in served_routes(app) if path.startswith(NOT_IN_SPEC))
    assert left_out and all(path.startswith("/ws/v2/") for path in left_out), left_out


def test_each_operation_has_exactly_one_handler() -> None:
    operations = contract()
    ids = [op.operation_id for op in operations]
    assert len(ids) == len(set(ids)), "an operation declared twice"
    handlers = [op.handler for op in operations]
    assert all(handlers) and len({id(handler) for handler in handlers}) == len(handlers)
    declared = [
        *app_module.api.operations,
        *pulsar_admin.api.operations,
        *admin_topics.api.operations,
        *admin_brokers.api.operations,
        *admin_policies.api.operations,
        *deduplication.api.operations,
        *pulsar_schemas.api.operations,
    ]
    assert [op.operation_id for op in declared] == ids


def test_a_path_parameter_is_declared_once_in_the_components(app: web.Application) -> None:
    spec = openapi_spec(contract())
    declared = set(spec["components"]["parameters"])
    used = {name for names in served_routes(app).values() for name in names}
    assert used <= declared, used - declared


def test_the_contracts_closed_lists_are_the_brokers_own() -> None:
    """Names the contract enumerates come from, or equal, the lists the broker acts on."""
    assert get_args(SubscriptionType) == SUBSCRIPTION_TYPES
    schemas = openapi_spec(contract())["components"]["schemas"]
    operation = schemas["FaultSetting"]["properties"]["operation"]
    assert tuple(operation["enum"]) == OPERATIONS + OBJECT_OPERATIONS
