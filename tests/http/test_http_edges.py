"""The HTTP listener's edges against a real broker: requests its parser refuses are
answered ``{"reason", "code"}`` without a traceback in the broker's log."""

from __future__ import annotations

import json
import socket

import pytest

from tests.harness import ServedBroker

pytestmark = pytest.mark.slow

#: a deadline on each read of a raw socket, not a wait
READ_DEADLINE_S = 20.0


def exchange(broker: ServedBroker, request: bytes) -> tuple[int, bytes]:
    """Send ``request`` as it is on a socket of its own; the status and the body the
    broker answered before closing (it closes after an error answer, and after any
    answer to an HTTP/1.0 request)."""
    host, port = broker.http_url.removeprefix("http://").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=READ_DEADLINE_S) as sock:
        sock.sendall(request)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), body


def test_a_request_without_host_is_answered_in_json_and_logs_no_traceback(
    broker: ServedBroker,
) -> None:
    mark = broker.mark()
    for _ in range(20):
        status, body = exchange(broker, b"GET / HTTP/1.1\r\n\r\n")
        assert status == 400
        answer = json.loads(body)
        assert answer["code"] == "invalid-request"
        assert "Host" in answer["reason"]
    # HTTP/1.0 makes Host optional: such a request is served
    status, body = exchange(broker, b"GET /admin/v2/brokers/health HTTP/1.0\r\n\r\n")
    assert (status, body) == (200, b"ok")
    broker.ok("GET", "/admin/v2/brokers/health")  # its output is read up to here
    logged = broker.log(since=mark)
    assert "Traceback" not in logged
    assert "Missing 'Host'" not in logged, logged  # 20 refusals are not worth a line each
