"""The ceiling of ``brokerlab bench http``: a bare aiohttp endpoint on uvloop.

It answers the produce route exactly as the broker does on the wire (same JSON body,
parsed with orjson; one ``messagePublishResults`` entry per message) and does nothing
else: no validation, no storage, no dispatch. Whatever the broker loses to it is the
cost of being a broker.

Run as ``python -m broker.bench.bare_server [--host H] [--port P]``; it prints
``bare listening on http://H:P`` when ready and stops on SIGINT or SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from collections.abc import Sequence

import orjson
import uvloop
from aiohttp import web

READY_PREFIX = "bare listening on "
MAX_BODY_BYTES = 16 * 1024 * 1024  # the broker's maxHttpRequestBodyBytes default
_NEXT_ENTRY = web.AppKey("next_entry", list)


async def produce(request: web.Request) -> web.Response:
    body = orjson.loads(await request.read())
    count = len(body["messages"])
    counter = request.app[_NEXT_ENTRY]
    first = counter[0]
    counter[0] = first + count
    results = [
        {"messageId": f"0:{entry_id}", "errorCode": 0} for entry_id in range(first, first + count)
    ]
    return web.Response(
        body=orjson.dumps({"messagePublishResults": results}), content_type="application/json"
    )


def create_app() -> web.Application:
    app = web.Application(client_max_size=MAX_BODY_BYTES)
    app[_NEXT_ENTRY] = [0]
    app.router.add_post("/topics/persistent/{tenant}/{namespace}/{topic}", produce)
    return app


async def serve(host: str, port: int) -> None:
    runner = web.AppRunner(create_app(), access_log=None, handle_signals=False)
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port)
        await site.start()
        bound = runner.addresses[0][1]
        print(f"{READY_PREFIX}http://{host}:{bound}", flush=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop.set)
        await stop.wait()
    finally:
        await runner.cleanup()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m broker.bench.bare_server")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args(argv)
    uvloop.run(serve(args.host, args.port))
    return 0


if __name__ == "__main__":
    sys.exit(main())
