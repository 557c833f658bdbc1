"""Error responses: every non-2xx answer is ``{"reason", "code"}`` with the right status."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import orjson
from aiohttp import web

from broker.auth.errors import AuthenticationError, AuthorizationError
from broker.dispatch import errors
from broker.dispatch.ownership import NotOwnerError
from broker.ledger.managed_ledger import ManagedLedgerError
from storage_stub.bookie.api import BookieError

log = logging.getLogger(__name__)

#: The one table of error answers: each status, the one code its body carries, and the
#: broker errors that answer with it (a subclass answers as its nearest listed class).
#: The OpenAPI document and docs/api.md take their codes from here.
ERRORS: dict[int, tuple[str, tuple[type[Exception], ...]]] = {
    400: ("invalid-request", (errors.InvalidRequestError,)),
    401: ("unauthorized", (AuthenticationError,)),
    403: ("forbidden", (AuthorizationError,)),
    404: ("not-found", (errors.NotFoundError,)),
    405: ("method-not-allowed", (errors.MethodNotAllowedError,)),
    408: ("request-timeout", ()),
    409: ("conflict", (errors.ConflictError,)),
    412: ("precondition-failed", (errors.PreconditionFailedError,)),
    413: ("too-large", (errors.TooLargeError,)),
    415: ("unsupported-media-type", ()),
    422: ("invalid-schema", (errors.InvalidSchemaError,)),
    429: ("too-many-requests", ()),
    500: ("internal-error", (errors.StoredEntryError,)),
    501: ("not-implemented", (errors.NotImplementedYetError,)),
    503: ("unavailable", (errors.UnavailableError,)),
}

#: The code of a 307: another broker of the cluster owns the topic (not an error, but its
#: body is the error body all the same, as Pulsar's redirects carry a reason).
REDIRECT_CODE = "not-owner"

#: status of each listed broker error class
STATUS: dict[type[Exception], int] = {
    cls: status for status, (_, classes) in ERRORS.items() for cls in classes
}


def code_of(status: int) -> str:
    """The code of an error status: the table's, or ``http-{status}`` for one aiohttp
    raises that the table does not list."""
    entry = ERRORS.get(status)
    return entry[0] if entry is not None else f"http-{status}"


def status_of(error: Exception) -> int:
    """The HTTP status of a broker error: that of its nearest class in ``STATUS``, so a
    subclass (``ServiceNotReadyError`` is an ``UnavailableError``) answers as its kind.
    O(depth of the class hierarchy)."""
    for cls in type(error).__mro__:
        status = STATUS.get(cls)
        if status is not None:
            return status
    return 500


#: seconds a client should wait before retrying after a storage fault
RETRY_AFTER_S = 1


def error_response(status: int, reason: str) -> web.Response:
    """The error body ``{"reason", "code"}`` with the status's one code."""
    code = REDIRECT_CODE if status == 307 else code_of(status)
    response = web.Response(
        status=status,
        body=orjson.dumps({"reason": reason, "code": code}),
        content_type="application/json",
    )
    if status == 503:
        response.headers["Retry-After"] = str(RETRY_AFTER_S)
    return response


def unauthorized(reason: str) -> web.Response:
    """401 with the challenge RFC 6750 asks for: the client should send a Bearer token."""
    response = error_response(401, reason)
    response.headers["WWW-Authenticate"] = 'Bearer realm="brokerlab"'
    return response


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def redirect_to_owner(request: web.Request, error: NotOwnerError) -> web.Response:
    """307 to the same route on the owning broker, as Pulsar's brokers redirect topic
    routes: the client repeats the request (method and body kept) there. 503 while the
    owner's address is not known yet."""
    owner = error.owner.http_url
    if not owner:
        return error_response(503, f"{error}; its address is not known yet")
    response = error_response(307, str(error))
    response.headers["Location"] = owner + request.path_qs
    return response


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except NotOwnerError as error:
        return redirect_to_owner(request, error)
    except errors.BrokerError as error:
        return error_response(status_of(error), str(error))
    except AuthenticationError as error:
        return unauthorized(str(error))
    except AuthorizationError as error:
        return error_response(403, str(error))
    except (BookieError, ManagedLedgerError) as error:
        return error_response(503, f"storage unavailable: {error}")
    except OSError as error:
        # the storage stub turns its I/O errors into BookieErrors; this is the net under
        # it: an I/O error is the storage's, never an internal error
        log.warning("I/O error on %s %s: %s", request.method, request.path, error)
        return error_response(503, f"storage I/O error: {error}")
    except web.HTTPRequestEntityTooLarge as error:
        return error_response(413, f"request body too large: {error.text}")
    except web.RequestPayloadError:
        # aiohttp could not read the body as sent: corrupt Content-Encoding, bad chunking
        return error_response(400, "the request body cannot be read (bad encoding or framing)")
    except web.HTTPException as error:
        if error.status < 400:
            raise
        response = error_response(error.status, error.reason)
        if isinstance(error, web.HTTPMethodNotAllowed):
            response.headers["Allow"] = error.headers["Allow"]
        return response
    except Exception:
        log.exception("unhandled error on %s %s", request.method, request.path)
        return error_response(500, "internal error; see the broker log")
