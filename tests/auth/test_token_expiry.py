"""When a token expires: its ``exp`` read as PyJWT reads it (a number, or a string of an
integer), on the first check and on every check answered from the provider's cache."""

from __future__ import annotations

import math
import time
from typing import Any

import jwt
import pytest

from broker.auth.errors import AuthenticationError
from broker.auth.tokens import AuthenticationProviderToken, create_secret_key

SECRET = create_secret_key()


class Clock:
    """The provider's clock, moved by the test."""

    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


def signed(claims: dict[str, Any]) -> str:
    return jwt.encode(claims, SECRET, algorithm="HS256")


def provider(clock: Clock, skew_s: int = 0) -> AuthenticationProviderToken:
    return AuthenticationProviderToken(secret_key=SECRET, clock=clock, clock_skew_s=skew_s)


@pytest.mark.parametrize("as_text", [False, True], ids=["number", "numeric-string"])
def test_a_token_expires_after_it_was_cached(as_text: bool) -> None:
    clock = Clock()
    exp = int(clock.now) + 60
    token = signed({"sub": "alice", "exp": str(exp) if as_text else exp})
    tokens = provider(clock)
    assert tokens.authenticate_until(token) == ("alice", float(exp))
    clock.now = exp - 1
    assert tokens.authenticate(token) == "alice"  # answered from the cache
    clock.now = exp
    with pytest.raises(AuthenticationError, match="expired"):
        tokens.authenticate(token)
    with pytest.raises(AuthenticationError, match="expired"):
        tokens.authenticate(token)  # and stays expired, cached or not


def test_the_allowed_clock_skew_extends_a_string_exp_too() -> None:
    clock = Clock()
    exp = int(clock.now) + 60
    tokens = provider(clock, skew_s=30)
    token = signed({"sub": "alice", "exp": str(exp)})
    tokens.authenticate(token)
    clock.now = exp + 29
    assert tokens.authenticate(token) == "alice"
    clock.now = exp + 30
    with pytest.raises(AuthenticationError, match="expired"):
        tokens.authenticate(token)


def test_a_token_without_exp_never_expires() -> None:
    clock = Clock()
    tokens = provider(clock)
    token = signed({"sub": "alice"})
    assert tokens.authenticate_until(token) == ("alice", math.inf)
    clock.now += 100 * 365 * 86400
    assert tokens.authenticate(token) == "alice"


#: exp values of every JSON type, against a clock at 1,000,000 s
EXP_VALUES = [
    2_000_000,
    "2000000",
    " 2000000 ",  # int() strips blanks, so PyJWT accepts it
    2_000_000.9,
    500_000,
    "500000",
    1_000_000,  # exp == now: expired, as PyJWT has it
    "2e6",
    "2000000.5",
    "soon",
    "",
    None,
    True,  # int(True) == 1: long expired
    [2_000_000],
    {"at": 2_000_000},
    10**400,  # later than any float, still an integer
]


@pytest.mark.parametrize("exp", EXP_VALUES, ids=lambda value: repr(value)[:24])
def test_exp_is_accepted_and_refused_as_pyjwt_accepts_and_refuses_it(exp: Any) -> None:
    now = 1_000_000.0
    token = signed({"sub": "alice", "exp": exp})
    pyjwt_error: type[Exception] | None = None
    try:
        # PyJWT's own check, at the same instant (it takes its time from the clock; a
        # leeway moves its "now" back to ours)
        jwt.decode(token, SECRET, algorithms=["HS256"], leeway=time.time() - now)
    except jwt.ExpiredSignatureError as error:
        pyjwt_error = type(error)
    except jwt.DecodeError as error:
        pyjwt_error = type(error)
    clock = Clock()
    clock.now = now
    tokens = provider(clock)
    if pyjwt_error is None:
        role, until = tokens.authenticate_until(token)
        assert role == "alice"
        assert until > now
    else:
        expected = "expired" if pyjwt_error is jwt.ExpiredSignatureError else "must be an integer"
        with pytest.raises(AuthenticationError, match=expected):
            tokens.authenticate(token)
