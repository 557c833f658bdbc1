"""The two ways a client is refused, whatever the front end."""

from __future__ import annotations


class AuthenticationError(Exception):
    """A client's credentials are missing or not valid (HTTP 401, the binary protocol's
    AuthenticationError)."""


class AuthorizationError(Exception):
    """An authenticated role may not do this (HTTP 403, the binary protocol's
    AuthorizationError)."""
