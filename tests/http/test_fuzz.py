"""Schemathesis drives every operation of the generated ``/openapi.json`` against a real
``brokerlab serve`` process with requests generated from the document: valid ones and,
as its negative mode makes them, invalid ones. The broker may refuse anything, but it
never answers a 5xx other than a documented 503, and each answer has the status codes
and the body the document gives the operation. No request holds the broker: each is
answered within ANSWER_BOUND_S, and a health probe after each operation's examples
(during the run, and after its last) is answered within it too (a partition count the
fuzzer chose once held the loop for good while every request still answered 2xx).

The run is bounded (a few examples per operation, derandomized) so it fits the suite.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import response_schema_conformance, status_code_conformance

from broker.http.app import contract
from broker.http.openapi import openapi_spec
from tests.conftest import ServedBrokerFactory
from tests.harness import ServedBroker, http_request

#: each operation, in each mode, gets its own derandomized run: breadth over operations
#: finds what depth per operation finds (a 500 on an optional field of produce was found
#: with 5, 8, 10 and 20 examples alike), at a third of the time of 20. A request body
#: (nested models, optional fields) gets EXAMPLES_WITH_BODY; path and query parameters
#: alone (strings, integers, booleans, enums) are covered in EXAMPLES_WITH_PARAMETERS, the
#: fewest that found that 500; an operation without input has one request to make.
EXAMPLES_WITH_BODY = 8
EXAMPLES_WITH_PARAMETERS = 5
EXAMPLES_WITHOUT_INPUT = 1
#: every request, fuzzed or probe, is answered within this (a responsiveness bound, not
#: a speed claim: a request that holds the loop is not answered at all)
ANSWER_BOUND_S = 15.0
HEALTH = "/admin/v2/brokers/health"

#: every case on one xdist worker: each worker that ran some of them started its own
#: broker, loaded the document into schemathesis and warmed hypothesis' engine up (its
#: first case cost 1.2 to 1.6 s of CPU, a later one some 0.05 s); the group, the largest
#: unit of work, is handed out first (``--dist loadgroup`` orders units by size)
pytestmark = pytest.mark.xdist_group("fuzz")


@pytest.fixture(scope="module")
def session() -> Iterator[requests.Session]:
    """One HTTP session for every request: its connections are kept alive, and it reads
    no proxy or netrc settings from the environment at each request (what a fresh
    session per request cost was a fifth of the run)."""
    with requests.Session() as shared:
        shared.trust_env = False
        yield shared


@pytest.fixture(scope="module")
def fuzz_schema(shared_served_broker: ServedBrokerFactory) -> Any:
    """The document of the module's ``broker``, its requests sent there."""
    served = shared_served_broker()
    schema = schemathesis.openapi.from_dict(served.http("GET", "/openapi.json"))
    schema.config.update(base_url=served.http_url, request_timeout=ANSWER_BOUND_S)
    # Strings of any character UTF-8 can encode, that is every one but the surrogates:
    # schemathesis' default codec="utf-8" asks hypothesis for the same set, which it
    # finds by encoding all 1.1 million code points once per process (3.5 s of CPU in each
    # xdist worker of a fresh clone, whose .hypothesis/ has no cached copy); without a
    # codec, schemathesis excludes the surrogate category itself.
    schema.config.generation.codec = None
    return schema


#: operations fuzzed with invalid input only (answered 400, nothing done): a valid
#: restart of the broker under test would fail every request made while it is down (up
#: to the hour ``downtimeMs`` allows)
ONLY_INVALID_INPUT = {"restartBroker"}


#: operations whose only input is the consumer id path parameter: any non-empty string
#: is a valid one (an unknown id answers 404), and an empty one is no path
NO_INVALID_INPUT = {"closeConsumer", "redeliverUnacknowledged"}


def _takes_input(operation: dict[str, Any]) -> bool:
    return bool(operation.get("parameters") or operation.get("requestBody"))


def _examples(operation: dict[str, Any]) -> int:
    if operation.get("requestBody"):
        return EXAMPLES_WITH_BODY
    return EXAMPLES_WITH_PARAMETERS if _takes_input(operation) else EXAMPLES_WITHOUT_INPUT


def _runs() -> list[Any]:
    """Each operation with valid input, and, when it takes any input, with invalid; with
    its number of examples."""
    runs = []
    for item in openapi_spec(contract())["paths"].values():
        for operation in item.values():
            operation_id = operation["operationId"]
            examples = _examples(operation)
            modes = [] if operation_id in ONLY_INVALID_INPUT else [GenerationMode.POSITIVE]
            if _takes_input(operation) and operation_id not in NO_INVALID_INPUT:
                modes.append(GenerationMode.NEGATIVE)
            runs.extend(
                pytest.param(operation_id, mode, examples, id=f"{operation_id}-{mode.value}")
                for mode in modes
            )
    return sorted(runs, key=lambda run: run.id)


@pytest.mark.parametrize(("operation_id", "mode", "examples"), _runs())
def test_every_operation_answers_as_documented_and_never_fails_inside(
    broker: ServedBroker,
    fuzz_schema: Any,
    session: requests.Session,
    operation_id: str,
    mode: GenerationMode,
    examples: int,
) -> None:
    operation = fuzz_schema.find_operation_by_id(operation_id)

    @settings(
        max_examples=examples,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(case=operation.as_strategy(generation_mode=mode))
    def answers_as_documented(case: Any) -> None:
        response = case.call(session=session)
        if operation_id == "setFault":
            broker.http("DELETE", "/admin/v2/brokerlab/faults")  # faults stay out of others
        case.validate_response(
            response,
            checks=[not_a_server_error, status_code_conformance, response_schema_conformance],
        )

    answers_as_documented()
    # whatever the examples left running, the broker still answers
    health = http_request(broker.http_url, "GET", HEALTH, timeout=ANSWER_BOUND_S)
    assert health.status == 200, health
