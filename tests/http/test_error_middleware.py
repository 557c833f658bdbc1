"""The error middleware: storage failures of every kind answer 503 `unavailable` with
Retry-After, never 500 (issue #14 E)."""

from __future__ import annotations

import errno

import aiohttp
import pytest
from aiohttp import web

from broker.http.errors import error_middleware
from broker.ledger.managed_ledger import ManagedLedgerError
from storage_stub.bookie.api import StorageFaultError


@pytest.mark.parametrize(
    "error",
    [
        OSError(errno.ENOSPC, "No space left on device"),
        OSError(errno.EIO, "Input/output error"),
        StorageFaultError("metadataPut", "IO error: No space left on device"),
        ManagedLedgerError("managed ledger is closed"),
    ],
    ids=["enospc", "eio", "storage-fault", "ledger-closed"],
)
async def test_storage_and_io_errors_answer_503_with_retry_after(error: Exception) -> None:
    async def fail(request: web.Request) -> web.Response:
        raise error

    app = web.Application(middlewares=[error_middleware])
    app.router.add_get("/fail", fail)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        url = f"http://127.0.0.1:{runner.addresses[0][1]}/fail"
        async with aiohttp.ClientSession() as session, session.get(url) as response:
            body = await response.json()
            assert response.status == 503
            assert body["code"] == "unavailable"
            assert int(response.headers["Retry-After"]) >= 1
    finally:
        await runner.cleanup()
