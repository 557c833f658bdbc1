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

STATUS: dict[type[errors.BrokerError], int] = {
    errors.InvalidRequestError: 400,
    errors.NotFoundError: 404,
    errors.ConflictError: 409,
    errors.PreconditionFailedError: 412,
    errors.TooLargeError: 413,
    errors.NotImplementedYetError: 501,
    errors.UnavailableError: 503,
}


def status_of(error: errors.BrokerError) -> int:
    """The HTTP status of a broker error: that of its nearest class in ``STATUS``, so a
    subclass (``ServiceNotReadyError`` is an ``UnavailableError``) answers as its kind.
    O(depth of the class hierarchy)."""
    for cls in type(error).__mro__:
        status = STATUS.get(cls)
        if status is not None:
            return status
    return 500


_HTTP_CODES = {
    400: "invalid-request",
    404: "not-found",
    405: "method-not-allowed",
    413: "too-large",
}

#: seconds a client should wait before retrying after a storage fault
RETRY_AFTER_S = 1


def error_response(status: int, code: str, reason: str) -> web.Response:
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
    response = error_response(401, "unauthorized", reason)
    response.headers["WWW-Authenticate"] = 'Bearer realm="brokerlab"'
    return response


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def redirect_to_owner(request: web.Request, error: NotOwnerError) -> web.Response:
    """307 to the same route on the owning broker, as Pulsar's brokers redirect topic
    routes: the client repeats the request (method and body kept) there. 503 while the
    owner's address is not known yet."""
    owner = error.owner.http_url
    if not owner:
        return error_response(503, "unavailable", f"{error}; its address is not known yet")
    response = error_response(307, error.code, str(error))
    response.headers["Location"] = owner + request.path_qs
    return response


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except NotOwnerError as error:
        return redirect_to_owner(request, error)
    except errors.BrokerError as error:
        return error_response(status_of(error), error.code, str(error))
    except AuthenticationError as error:
        return unauthorized(str(error))
    except AuthorizationError as error:
        return error_response(403, "forbidden", str(error))
    except (BookieError, ManagedLedgerError) as error:
        return error_response(503, "unavailable", f"storage unavailable: {error}")
    except OSError as error:
        # the storage stub turns its I/O errors into BookieErrors; this is the net under
        # it: an I/O error is the storage's, never an internal error
        log.warning("I/O error on %s %s: %s", request.method, request.path, error)
        return error_response(503, "unavailable", f"storage I/O error: {error}")
    except web.HTTPRequestEntityTooLarge as error:
        return error_response(413, "too-large", f"request body too large: {error.text}")
    except web.RequestPayloadError:
        # aiohttp could not read the body as sent: corrupt Content-Encoding, bad chunking
        return error_response(
            400, "invalid-request", "the request body cannot be read (bad encoding or framing)"
        )
    except web.HTTPException as error:
        if error.status < 400:
            raise
        code = _HTTP_CODES.get(error.status, f"http-{error.status}")
        response = error_response(error.status, code, error.reason)
        if isinstance(error, web.HTTPMethodNotAllowed):
            response.headers["Allow"] = error.headers["Allow"]
        return response
    except Exception:
        log.exception("unhandled error on %s %s", request.method, request.path)
        return error_response(500, "internal-error", "internal error; see the broker log")
