"""``brokerlab loadgen`` and ``compare`` against brokers with token authentication on: with
a token, given on the command line or in a file, a run produces, consumes and administers,
over HTTP and over the binary protocol; without one, or with one the broker did not sign,
it stops before producing and says that authentication failed and what to pass."""

from __future__ import annotations

import base64
import json
import pathlib

import pytest

from broker.auth.tokens import create_secret_key, create_token
from broker.cli import main
from tests.conftest import ServedBrokerFactory
from tests.harness import ServedBroker

TOKEN_PROVIDER = "org.apache.pulsar.broker.authentication.AuthenticationProviderToken"
SECRET = create_secret_key()
#: authentication and authorization on; "admin" may offload, as the scenario's event does
AUTH_SETTINGS: dict[str, object] = {
    "authenticationEnabled": True,
    "authenticationProviders": TOKEN_PROVIDER,
    "authorizationEnabled": True,
    "superUserRoles": "admin",
    "tokenSecretKey": "data:;base64," + base64.b64encode(SECRET).decode(),
}
#: a second of traffic on one topic, with an admin event (offload: a super-user's), then
#: a drain until every message is received and acknowledged
TINY = """
name = "auth"
topics = 1
messageSize = 100
messagesPerRequest = 10
producerRate = 200
subscriptionType = "Shared"
testDurationSeconds = 1

[[events]]
at = 0.5
type = "offload"
"""
DRAIN_S = "20"


def token_for(role: str, key: bytes = SECRET, expires_in_s: int | None = None) -> str:
    return create_token(key, "HS256", role, expires_in_s)


#: the module's tests on one xdist worker, which starts the secured broker (a module
#: fixture, a `brokerlab serve` process) once: each worker running some of them
#: started and stopped its own
pytestmark = pytest.mark.xdist_group("test_auth")


@pytest.fixture(scope="module")
def secured(shared_served_broker: ServedBrokerFactory) -> ServedBroker:
    """One ``brokerlab serve`` with authentication on for the module's runs (each run
    has topics of its own)."""
    return shared_served_broker(**AUTH_SETTINGS)


@pytest.fixture
def tiny(tmp_path: pathlib.Path) -> str:
    path = tmp_path / "auth.toml"
    path.write_text(TINY)
    return str(path)


def loadgen(scenario: str, out: pathlib.Path, *args: str) -> int:
    base = ["loadgen", "--scenario", scenario, "--out", str(out), "--no-progress"]
    return main([*base, "--drain", DRAIN_S, *args])


def said(capsys: pytest.CaptureFixture[str]) -> str:
    """What the command printed to stderr, as one line (rich wraps it)."""
    return " ".join(capsys.readouterr().err.split())


def assert_ran_whole(results: dict) -> None:
    totals = results["totals"]
    assert totals["publishedMessages"] > 0 and totals["publishErrors"] == 0, totals
    assert totals["consumedMessages"] > 0, totals
    assert results["drain"]["caughtUp"], results["drain"]
    assert [event["ok"] for event in results["events"]] == [True], results["events"]
    assert results["broker"]["statsUnavailable"] is None
    assert results["cache"]["hits"] + results["cache"]["misses"] > 0


# ------------------------------------------------------------------- with a token


@pytest.mark.slow
@pytest.mark.parametrize(
    ("driver", "given"),
    [("http", "--token"), ("http", "--token-file"), ("pulsar", "--token")],
    ids=["http-token", "http-token-file", "pulsar-token"],
)
def test_with_a_token_a_run_produces_consumes_and_administers(
    secured: ServedBroker,
    tiny: str,
    tmp_path: pathlib.Path,
    driver: str,
    given: str,
    no_run_charts: list[pathlib.Path],
) -> None:
    token = token_for("admin")
    if given == "--token-file":
        path = tmp_path / "admin.token"
        path.write_text(f"  {token}\n\n")
        credentials = ["--token-file", str(path)]
    else:
        credentials = ["--token", token]
    target = ["--url", secured.http_url, "--driver", driver]
    if driver == "pulsar":
        target += ["--service-url", secured.service_url]
    out = tmp_path / "out"
    assert loadgen(tiny, out, *target, *credentials) == 0
    results = json.loads((out / "results.json").read_text())
    assert results["scenario"]["driver"] == driver
    assert_ran_whole(results)


@pytest.mark.slow
def test_compare_hands_the_token_to_the_brokers_it_starts(
    tiny: str,
    tmp_path: pathlib.Path,
    no_run_charts: list[pathlib.Path],
    no_comparison_chart: list[pathlib.Path],
) -> None:
    """compare always starts its brokers: authentication turned on with --set, the token
    from a file."""
    path = tmp_path / "admin.token"
    path.write_text(token_for("admin") + "\n")
    settings = [
        f"--set={key}={str(value).lower() if isinstance(value, bool) else value}"
        for key, value in AUTH_SETTINGS.items()
    ]
    out = tmp_path / "compare"
    command = ["compare", "--scenario", tiny, "--implementations", "pip430"]
    command += [*settings, "--token-file", str(path), "--out", str(out), "--no-progress"]
    assert main(command) == 0
    results = json.loads((out / "pip430" / "results.json").read_text())
    assert results["broker"]["startedByLoadgen"]
    totals = results["totals"]
    assert totals["publishedMessages"] > 0 and totals["publishErrors"] == 0, totals
    assert totals["consumedMessages"] > 0, totals
    assert [event["ok"] for event in results["events"]] == [True], results["events"]
    assert (out / "compare.md").exists() and no_comparison_chart == [out]


# ---------------------------------------------------------- without a valid token


@pytest.mark.slow
@pytest.mark.parametrize(
    ("driver", "token", "explained"),
    [
        ("http", None, "no token was given: pass --token TOKEN or --token-file PATH"),
        ("pulsar", None, "no token was given: pass --token TOKEN or --token-file PATH"),
        ("http", token_for("admin", create_secret_key()), "did not accept the token"),
        ("http", token_for("admin", expires_in_s=-60), "did not accept the token"),
    ],
    ids=["http-none", "pulsar-none", "http-another-key", "http-expired"],
)
def test_without_a_valid_token_the_run_stops_at_once_naming_authentication(
    secured: ServedBroker,
    tiny: str,
    tmp_path: pathlib.Path,
    capsys: pytest.CaptureFixture[str],
    driver: str,
    token: str | None,
    explained: str,
) -> None:
    target = ["--url", secured.http_url, "--driver", driver]
    if driver == "pulsar":
        target += ["--service-url", secured.service_url]
    credentials = [] if token is None else ["--token", token]
    out = tmp_path / "out"
    assert loadgen(tiny, out, *target, *credentials) == 1
    error = said(capsys)
    assert "brokerlab loadgen: authentication failed:" in error, error
    assert explained in error and "401 unauthorized" in error, error
    assert "Traceback" not in error
    assert not (out / "results.json").exists()


# ------------------------------------------------------------- the options given


def test_token_and_token_file_are_one_or_the_other(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "t"
    path.write_text("abc")
    with pytest.raises(SystemExit) as exit_status:
        main(["loadgen", "--scenario", "catchup", "--token", "abc", "--token-file", str(path)])
    assert exit_status.value.code == 2
    assert "not allowed with argument --token" in said(capsys)


@pytest.mark.parametrize(
    ("content", "complaint"),
    [(None, "cannot read"), (" \n", "is empty"), ("two\nlines", "without spaces or line breaks")],
    ids=["missing", "empty", "two-lines"],
)
def test_a_token_file_that_holds_no_token_is_refused_before_anything_starts(
    tmp_path: pathlib.Path,
    capsys: pytest.CaptureFixture[str],
    content: str | None,
    complaint: str,
) -> None:
    path = tmp_path / "token"
    if content is not None:
        path.write_text(content)
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as exit_status:
        main(["loadgen", "--scenario", "catchup", "--token-file", str(path), "--out", str(out)])
    assert exit_status.value.code == 2
    error = said(capsys)
    assert "--token-file" in error and complaint in error, error
    assert not out.exists()
